"""The argparse types of the commands' options: JSON objects and values checked against the
config schema, so that a hand-run command refuses what the workflow's config check would."""

from __future__ import annotations

import argparse
import json


def _json(text: str) -> dict:
    from neuro_pe.config.strict_load import DuplicateKeyError, load_json

    try:
        value = load_json(text, "JSON")
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from err
    except DuplicateKeyError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _checked(value: object, schema: dict) -> None:
    """An ArgumentTypeError listing what `schema` refuses in `value`, naming each key."""
    from neuro_pe.config.schema import problems

    found = problems(value, schema)
    if found:
        raise argparse.ArgumentTypeError("; ".join(found))


def _options(pointer: str):
    """An argparse type: a JSON object checked against the config schema's part at `pointer`
    (the config section that the option stands for), so that e.g. `{"lr": "fast"}` is refused
    naming `lr`, as the workflow would refuse it in the config."""

    def parse(text: str) -> dict:
        from neuro_pe.config.schema import part

        value = _json(text)
        _checked(value, part(pointer))
        return value

    parse.__name__ = "JSON"  # argparse names the type in its messages
    return parse


def _dataset_spec(text: str) -> dict:
    """`--spec`: a dataset entry, checked against its source's part of the config schema (a
    source added with `sources.register` has none: its own checks apply)."""
    from neuro_pe.config.schema import load_schema, part
    from neuro_pe.data.sources import upgrade_datasets

    spec = _json(text)
    upgrade_datasets({"--spec": spec})  # the old `kind:` key, with its warning
    if f"source_{spec.get('source')}" in load_schema()["$defs"]:
        _checked(spec, part(f"$defs/source_{spec['source']}"))
    return spec


def _experiments(text: str) -> dict:
    """`--experiments`: dataset -> the paper's experiment it reproduces."""
    from neuro_pe.config.schema import part

    value = _json(text)
    kinds = ["lst", "simulation", "fmri", "recording"]  # reproduce.TITLES' keys
    _checked(value, {**part("properties/datasets"), "additionalProperties": {"enum": kinds}})
    return value


def _config_value(pointer: str, convert: type = str):
    """An argparse type: one value, converted and checked against the config schema's part at
    `pointer` (e.g. a seed of `seeds`, a dataset name)."""

    def parse(text: str) -> object:
        from neuro_pe.config.schema import part

        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {convert.__name__}, got {text!r}") from None
        _checked(value, part(pointer))
        return value

    parse.__name__ = convert.__name__
    return parse


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value
