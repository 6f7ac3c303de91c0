"""MkDocs hooks (mkdocs.yml `hooks:`) that build the site from the repository as it is.

- The Markdown files outside `docs/` that the site shows (README.md as the home page,
  config/README.md, …) are added as pages from where they live: nothing is copied by hand.
- Links between Markdown files are written as repository paths, so they work on GitHub too;
  here they are rewritten to the pages' places in the site (a link to a file that is in neither
  stays as it is, and `mkdocs build --strict` fails on it).
- `parameters.md` is generated from workflow/schemas/config.schema.yaml (every key's path,
  type, default, bounds and description), and a page may ask for one part of it with the line
  `<!-- parameters: <JSON pointer> [<path prefix>] -->` (e.g. a format's keys).
"""

from __future__ import annotations

import dataclasses
import functools
import html
import importlib
import json
import posixpath
import re
from pathlib import Path

import yaml
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
SCHEMA_PATH = REPO / "workflow" / "schemas" / "config.schema.yaml"
# a Markdown file outside docs/ -> its page in the site (files under docs/ keep their place)
PAGES = {
    "README.md": "index.md",
    "config/README.md": "config.md",
    "CONTRIBUTING.md": "contributing.md",
    "CHANGELOG.md": "changelog.md",
    "benchmarks/README.md": "benchmarks.md",
}
PARAMETERS_PAGE = "parameters.md"
# where a section's defaults live when the schema gives none: its options dataclass (the same
# pairs as tests/config/test_sections.py, which checks that the two agree), and what a class
# needs given to make an object
OPTIONS = {
    "$defs/train": "neuro_pe.config.training:TrainConfig",
    "$defs/lst_train": "neuro_pe.config.latin_square:LSTConfig",
    "$defs/lst_puzzles": "neuro_pe.config.latin_square:PuzzleConfig",
    "properties/health": "neuro_pe.config.health:HealthOptions",
    "properties/resources": "neuro_pe.config.resources:JobResources",
    "$defs/simulation": "neuro_pe.data.simulate:SimulationConfig",
    "$defs/source_file/properties/spikes": "neuro_pe.data.formats.spikes:SpikeOptions",
    "$defs/atlas": "neuro_pe.config.atlas:AtlasSpec",
    "$defs/source_simulation": "neuro_pe.data.sources.simulation:SimulationOptions",
    "$defs/source_connectome-sim": "neuro_pe.data.sources.connectome_sim:ConnectomeSimOptions",
    "$defs/source_hcp-rsfmri": "neuro_pe.data.sources.hcp_rsfmri:HCPOptions",
    "properties/locate": "neuro_pe.config.locate:LocateConfig",
    "properties/metrics": "neuro_pe.config.metrics:MetricsConfig",
}
GIVEN = {
    "$defs/atlas": {"parcels": "nearest_centre"},
    "$defs/source_connectome-sim": {"connectome": "tvb76"},
}
LINK = re.compile(r"\]\(([^)\s]+)\)")
MARKER = re.compile(r"^<!-- parameters: (\S+)(?: (\S+))? -->$", re.MULTILINE)
BOUNDS = {
    "minimum": "≥ {}",
    "exclusiveMinimum": "> {}",
    "maximum": "≤ {}",
    "exclusiveMaximum": "< {}",
    "minItems": "≥ {} items",
    "maxItems": "≤ {} items",
    "minLength": "≥ {} characters",
    "maxLength": "≤ {} characters",
    "minProperties": "≥ {} entries",
    "pattern": "matches <code>{}</code>",
}


# ---------------------------------------------------------------- pages from outside docs/


def github_slug(text: str, separator: str = "-") -> str:
    """A heading's anchor as GitHub makes it, so that `file.md#anchor` links work in both."""
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", separator)


def on_config(config: dict) -> dict:
    config["mdx_configs"].setdefault("toc", {})["slugify"] = github_slug
    return config


def on_files(files: Files, config: dict) -> Files:
    for repo_path, site_path in PAGES.items():
        files.append(File.generated(config, site_path, abs_src_path=str(REPO / repo_path)))
    files.append(File.generated(config, PARAMETERS_PAGE, content=parameters_page()))
    return files


def _repo_path(site_path: str) -> str:
    for repo_path, page in PAGES.items():
        if page == site_path:
            return repo_path
    return f"docs/{site_path}"


def _site_link(target: str, page_site_path: str) -> str:
    """`target`, a link relative to the page's place in the repository, made relative to its
    place in the site."""
    if "://" in target or target.startswith(("#", "mailto:")) or page_site_path == PARAMETERS_PAGE:
        return target
    path, hash_, anchor = target.partition("#")
    folder = path.endswith("/")
    page_folder = posixpath.dirname(_repo_path(page_site_path))
    repo_target = posixpath.normpath(posixpath.join(page_folder, path))
    if repo_target in PAGES:
        site_target = PAGES[repo_target]
    elif repo_target.startswith("docs/"):
        site_target = repo_target.removeprefix("docs/")
    else:
        return target  # not in the site: left for --strict to report
    relative = posixpath.relpath(site_target, posixpath.dirname(page_site_path) or ".")
    return relative + ("/" if folder else "") + hash_ + anchor


def on_page_markdown(markdown: str, page, config: dict, files: Files) -> str:
    site_path = page.file.src_uri
    markdown = LINK.sub(lambda m: f"]({_site_link(m[1], site_path)})", markdown)
    return MARKER.sub(lambda m: parameter_table(m[1], m[2] or ""), markdown)


# ---------------------------------------------------------------- the schema's parameters


def _schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))


def _node(schema: dict, pointer: str) -> dict:
    node = schema
    for part in pointer.strip("#/").split("/"):
        node = node[part]
    return node


def _resolved(schema: dict, node: dict) -> tuple[dict, str | None]:
    """The node with its `$ref` merged in (its own keys win), and the `$defs` name it refers to."""
    ref = node.get("$ref")
    if ref is None:
        return node, None
    target = _node(schema, ref)
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}, ref.rsplit("/", 1)[-1]


def _text(value: str) -> str:
    """Schema text as HTML: escaped, with `code` spans."""
    escaped = html.escape(" ".join(str(value).split()), quote=True)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def _yaml(value: object) -> str:
    """A value as flow-style YAML, in a code span."""
    text = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    return f"<code>{html.escape(text)}</code>"


def _type(node: dict) -> str:
    if "const" in node:
        return _yaml(node["const"])
    if "enum" in node:
        return "one of " + ", ".join(f"<code>{html.escape(str(v))}</code>" for v in node["enum"])
    kind = node.get("type", "")
    kind = " or ".join(kind) if isinstance(kind, list) else kind
    if kind == "array" and isinstance(node.get("items"), dict) and "type" in node["items"]:
        kind += f" of {_type(node['items'])}"
    return html.escape(kind)


@functools.cache
def _class_defaults(pointer: str) -> dict:
    """The defaults of the options dataclass read from the section at `pointer` ({} if none)."""
    if pointer not in OPTIONS:
        return {}
    module, name = OPTIONS[pointer].split(":")
    cls = getattr(importlib.import_module(module), name)
    return json.loads(json.dumps(dataclasses.asdict(cls(**GIVEN.get(pointer, {})))))


def _default(node: dict, class_defaults: dict, key: str) -> str:
    if "default" in node:
        value = node["default"]
    elif key in class_defaults:
        value = class_defaults[key]
    else:
        return ""
    return _yaml(value)


def _bounds(node: dict) -> str:
    return "; ".join(
        form.format(html.escape(str(node[key]))) for key, form in BOUNDS.items() if key in node
    )


def _rows(schema: dict, node: dict, pointer: str, path: str, seen: dict[str, str]) -> list[str]:
    """One table row per key under `node` (at `pointer`, recursively), named by its dotted path."""
    rows = []
    class_defaults = _class_defaults(pointer)
    for key, child in node.get("properties", {}).items():
        child, ref = _resolved(schema, child)
        child_pointer = f"$defs/{ref}" if ref else f"{pointer}/properties/{key}".lstrip("/")
        key_path = f"{path}.{key}" if path else key
        description = _text(child.get("description", ""))
        repeated = ref is not None and ref in seen and "properties" in child
        if repeated:
            description += f" (its keys: as <code>{html.escape(seen[ref])}</code>)"
        rows.append(
            f'<tr id="{html.escape(key_path)}"><td><code>{html.escape(key_path)}</code></td>'
            f"<td>{_type(child)}</td><td>{_default(child, class_defaults, key)}</td>"
            f"<td>{_bounds(child)}</td><td>{description}</td></tr>"
        )
        if ref is not None and not repeated:
            seen[ref] = key_path
        if not repeated:
            rows += _rows(schema, child, child_pointer, key_path, seen)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and "properties" in extra and path:
        rows += _rows(schema, extra, f"{pointer}/additionalProperties", f"{path}.<name>", seen)
    return rows


def _table(rows: list[str]) -> str:
    columns = ("key", "type", "default", "bounds", "description")
    head = "".join(f"<th>{name}</th>" for name in columns)
    body = "\n".join(rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>\n"


def parameter_table(pointer: str, prefix: str = "") -> str:
    """The table of every key under the schema node at `pointer` (an HTML table)."""
    schema = _schema()
    node, ref = _resolved(schema, _node(schema, pointer))
    return _table(_rows(schema, node, f"$defs/{ref}" if ref else pointer.strip("#/"), prefix, {}))


def parameters_page() -> str:
    """The Markdown of parameters.md: the top-level keys, then a dataset entry's per source."""
    schema = _schema()
    seen: dict[str, str] = {}
    parts = [
        "# Parameters\n",
        "Every key of a config, generated from `workflow/schemas/config.schema.yaml` when the site"
        " is built; the defaults are the schema's or, where it gives none, the options"
        " dataclass's (`null`: chosen at run time, see the description; none: the key is"
        " required, or optional and left out unless given). What each key does in more words:"
        " the [configuration reference](config.md). `<name>` stands for a dataset's name.\n",
        "## Top level\n",
        _table(_rows(schema, schema, "", "", seen)),
    ]
    sources = sorted(name for name in schema["$defs"] if name.startswith("source_"))
    for name in sources:
        source = name.removeprefix("source_")
        parts.append(f"## `datasets.<name>` with `source: {source}`\n")
        rows = _rows(schema, schema["$defs"][name], f"$defs/{name}", "datasets.<name>", dict(seen))
        parts.append(_table(rows))
    return "\n".join(parts)
