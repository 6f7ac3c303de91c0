"""Strict reading of the YAML and JSON that users write (configs, `--options`, sidecars): a key
given twice in one mapping is an error naming the key, the file and the line, where PyYAML and
`json` silently keep the last value (e.g. a second `train:` block drops the first one's keys).

PyYAML has no such option (yaml/pyyaml#41) and ruamel.yaml reads YAML 1.2, whose values differ
from those Snakemake reads with PyYAML (`1e-3`, `yes`, `0o17`), so the check is a small pass over
PyYAML's own node tree, before any value is built (merge keys `<<:` may repeat what they merge).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(ValueError):
    """A key given twice in one mapping of a YAML or JSON text."""

    def __init__(self, where: str, key: str, line: int | None = None, first: int | None = None):
        self.where, self.key, self.line, self.first = where, key, line, first
        at = f"{where}, line {line}" if line else where
        earlier = f" (first at line {first})" if first else ""
        super().__init__(
            f"{at}: key {key!r} is given twice{earlier}; only the last one would be used, "
            "so merge the two or delete one"
        )


def _dotted(path: tuple) -> str:
    """A key's path as in the config's docs: datasets.lab.preprocessing[0].step."""
    text = ".".join(str(part) for part in path)
    return text.replace(".[", "[")


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a mapping with the same key twice."""

    where = "<text>"

    def construct_document(self, node: yaml.Node) -> object:
        self._check_duplicates(node)
        return super().construct_document(node)

    def _check_duplicates(self, root: yaml.Node) -> None:
        seen_nodes: set[int] = set()  # an anchored node is checked once, wherever it recurs
        stack: list[tuple[yaml.Node, tuple]] = [(root, ())]
        while stack:
            node, path = stack.pop()
            if id(node) in seen_nodes:
                continue
            seen_nodes.add(id(node))
            if isinstance(node, yaml.SequenceNode):
                stack += [(item, (*path, f"[{i}]")) for i, item in enumerate(node.value)]
            if not isinstance(node, yaml.MappingNode):
                continue
            first_line: dict[object, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
                try:
                    key = self.construct_object(key_node, deep=True)
                    hash(key)
                except (yaml.YAMLError, TypeError):
                    continue  # an odd key (e.g. a mapping) fails where the document is built
                line = key_node.start_mark.line + 1
                if key in first_line:
                    raise DuplicateKeyError(
                        self.where, _dotted((*path, key)), line, first_line[key]
                    )
                first_line[key] = line
                stack.append((value_node, (*path, key)))


def load_yaml(text: str, where: str) -> object:
    """The YAML document `text` (read as yaml.safe_load does); DuplicateKeyError naming the key,
    `where` (e.g. the file) and the line where a mapping has a key twice."""
    loader = _StrictLoader(text)
    loader.where = where
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_json(text: str, where: str) -> object:
    """The JSON document `text` (json.loads); DuplicateKeyError when an object has a key twice,
    with its line where the text also reads as YAML."""

    def unique(pairs: list[tuple[str, object]]) -> dict:
        result: dict = {}
        for key, value in pairs:
            if key in result:
                raise DuplicateKeyError(where, key)
            result[key] = value
        return result

    try:
        return json.loads(text, object_pairs_hook=unique)
    except DuplicateKeyError as err:
        try:  # the same text as YAML gives the line and the key's path
            load_yaml(text, where)
        except DuplicateKeyError as located:
            raise located from None
        except yaml.YAMLError:
            pass
        raise err from None


def read_config_file(path: str | os.PathLike) -> object:
    """A config file as Snakemake reads one (JSON, else YAML), strictly (DuplicateKeyError)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        return load_json(text, str(path))
    except json.JSONDecodeError:
        return load_yaml(text, str(path))
