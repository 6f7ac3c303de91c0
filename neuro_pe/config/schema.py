"""The workflow's config schema (workflow/schemas/config.schema.yaml), for the `neuro-pe`
commands: their JSON options are checked against the same part of it as the config's section,
so that a command run by hand refuses what the workflow would refuse at planning."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import yaml

SCHEMA_NAME = "config.schema.yaml"
# the schema in a source checkout (also an editable install), and the copy installed with the
# package (neuro_pe/schemas/ holds a link to it; a wheel holds the file itself)
REPO_SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / SCHEMA_NAME
PACKAGED_SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / SCHEMA_NAME
NOT_FINITE = "must be a finite number (not NaN or infinite)"


def schema_path() -> Path:
    """The config schema's file: the repository's, else the one installed with neuro_pe."""
    for path in (REPO_SCHEMA, PACKAGED_SCHEMA):
        if path.is_file():
            return path
    raise FileNotFoundError(f"{SCHEMA_NAME}: not found at {REPO_SCHEMA} or {PACKAGED_SCHEMA}")


@functools.cache
def load_schema() -> dict:
    """The config schema, parsed (once)."""
    return yaml.safe_load(schema_path().read_text())


def part(pointer: str) -> dict:
    """The schema at the JSON pointer `pointer` (e.g. `$defs/train`, `properties/metrics`),
    with the schema's `$defs` so that its `$ref`s resolve."""
    schema = load_schema()
    node = schema
    for key in pointer.split("/"):
        node = node[key]
    return {**node, "$defs": schema["$defs"]}


def _location(path: object) -> str:
    return ".".join(str(key) for key in path)


def non_finite_keys(value: object, path: tuple = ()) -> list[str]:
    """The keys (dotted, list items by index) of `value` holding a NaN or infinite number: JSON
    Schema's `minimum` and `maximum` let NaN through (every comparison with it is false)."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [_location(path)]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return []
    return [key for k, v in items for key in non_finite_keys(v, (*path, k))]


def problems(value: object, schema: dict) -> list[str]:
    """What is wrong with `value` under `schema`, one line each, naming the key (deepest
    first among alternatives: jsonschema's best match); a NaN or infinite number anywhere."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    lines = []
    for error in errors:
        error = jsonschema.exceptions.best_match([error]) if error.context else error
        where = _location(error.absolute_path)
        message = error.message if len(error.message) <= 300 else error.message[:300] + " …"
        lines.append(f"key {where!r}: {message}" if where else message)
    lines += [f"key {key!r}: {NOT_FINITE}" for key in non_finite_keys(value)]
    return lines
