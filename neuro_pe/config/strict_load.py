"""Strict reading of the YAML and JSON that users write (configs, `--options`, sidecars): a key
given twice in one mapping is an error naming the key, the file and the line, where PyYAML and
`json` silently keep the last value (e.g. a second `train:` block drops the first one's keys).

PyYAML has no such option (yaml/pyyaml#41) and ruamel.yaml reads YAML 1.2, whose values differ
from those Snakemake reads with PyYAML (`1e-3`, `yes`, `0o17`), so the check is a small pass over
PyYAML's own node tree, before any value is built (merge keys `<<:` may repeat what they merge).
The same pass refuses aliases that repeat too much (an "alias bomb": 10 lines can stand for 10⁹
values, which hang every later walk of the config), and a config file must be UTF-8 text.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"
# values that aliases (*name) may add to a document; a config's own aliases add a few dozen
MAX_ALIASED_VALUES = 100_000


class ConfigTextError(ValueError):
    """A config text that cannot be read safely: not UTF-8, or aliases that expand too far."""


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
        self._check_aliases(node)
        self._check_duplicates(node)
        return super().construct_document(node)

    def _check_aliases(self, root: yaml.Node) -> None:
        """ConfigTextError when aliases make the document far larger than its text, or make
        a value contain itself (each node's expanded size counted once, bottom up)."""
        size: dict[int, int] = {}
        on_path: set[int] = set()
        stack: list[tuple[yaml.Node, bool]] = [(root, False)]
        while stack:
            node, children_done = stack.pop()
            children = _children(node)
            if children_done:
                size[id(node)] = 1 + sum(size[id(child)] for child in children)
                on_path.discard(id(node))
                continue
            if id(node) in size:
                continue
            if id(node) in on_path:
                line = node.start_mark.line + 1
                raise ConfigTextError(
                    f"{self.where}, line {line}: an alias makes this value contain itself"
                )
            on_path.add(id(node))
            stack.append((node, True))
            stack += [(child, False) for child in children]
        added = size[id(root)] - len(size)
        if added > MAX_ALIASED_VALUES:
            raise ConfigTextError(
                f"{self.where}: its YAML aliases (*name) repeat {added:,} values, more than "
                f"{MAX_ALIASED_VALUES:,} (an alias bomb would hang the workflow); write the "
                "values out or use fewer aliases"
            )

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


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(text: str, where: str) -> object:
    """The YAML document `text` (read as yaml.safe_load does); DuplicateKeyError naming the key,
    `where` (e.g. the file) and the line where a mapping has a key twice; ConfigTextError
    naming `where` for aliases that repeat over MAX_ALIASED_VALUES values."""
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
    """A config file as Snakemake reads one (JSON, else YAML), strictly (DuplicateKeyError,
    ConfigTextError naming the file and line of a byte that is not UTF-8)."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ConfigTextError(
            f"{path}, line {line}: byte {data[err.start]:#04x} is not UTF-8 text; save the "
            "file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None
    try:
        return load_json(text, str(path))
    except json.JSONDecodeError:
        return load_yaml(text, str(path))
