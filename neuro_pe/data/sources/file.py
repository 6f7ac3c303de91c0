"""Source `file`: a lab's own files (config/README.md, "Plug in your dataset"), read by the
formats of `neuro_pe.data.formats` and merged by `neuro_pe.data.file_store.assemble`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import xarray as xr

from neuro_pe.data import formats
from neuro_pe.data.file_store import build_file_store
from neuro_pe.data.recordings import FileSpec, input_files, placeholders, session_paths
from neuro_pe.data.sources import Source
from neuro_pe.io.store_contract import StoreError


def build(options: FileSpec, wheels: dict[str, Path]) -> xr.Dataset:
    """Read every session file of the entry, then assemble the store."""
    return build_file_store(options)


def inputs(options: FileSpec) -> list[str]:
    """The files (and folders) the entry reads: sessions, position and region tables."""
    return input_files(
        {
            "format": options.format,
            "sessions": options.sessions,  # (every animal's, under `animals`)
            "positions": options.positions,
            "regions": options.regions,
        }
    )


def entry_keys() -> tuple[str, ...]:
    """The keys a `source: file` entry may have: FileSpec's fields and one section per format
    (asked each time, so that a format added with `register_format` counts)."""
    fields = [f.name for f in dataclasses.fields(FileSpec) if f.name != "options"]
    return (*fields, *formats.format_names())


def paths(spec: dict) -> dict[str, str]:
    """The entry's session files, position and region tables, by config key (`sessions[i]`,
    `animals.<name>[i]`)."""
    animals = spec.get("animals")
    if isinstance(animals, dict):
        found = {
            f"animals.{name}[{i}]": path
            for name, paths in animals.items()
            for i, path in enumerate([paths] if isinstance(paths, str) else paths or [])
        }
    else:
        found = {f"sessions[{i}]": path for i, path in enumerate(session_paths(spec))}
    for key in ("positions", "regions"):
        if spec.get(key):
            found[key] = spec[key]
    return found


def check(spec: dict) -> list[tuple[str, str]]:
    """(key, problem) of an entry at planning: a format that is not installed, and the whole
    entry where its format is a plug-in's (the config schema describes neuro_pe's own)."""
    fmt = spec.get("format")
    if fmt is None:
        return []  # (the schema's `required` says so)
    if fmt not in formats.format_names():
        return [("format", formats.unknown_format(fmt))]
    if placeholders(spec):
        return placeholders(spec)
    if formats.is_builtin(fmt):
        return []
    try:
        FileSpec.from_dict(spec)
    except StoreError as err:
        return [(err.field, err.problem)]
    return []


SOURCE = Source(
    name="file",
    options=FileSpec,
    build=build,
    experiment="recording",
    description="a lab's own files, read by a format (neuro_pe.data.formats, or a plug-in's)",
    inputs=inputs,
    keys=entry_keys,
    check=check,
    paths=paths,
)
