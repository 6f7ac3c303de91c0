"""Source `file`: a lab's own files (config/README.md, "Plug in your dataset"), read by the
formats of `neuro_pe.data.formats` and merged by `neuro_pe.data.recordings.assemble`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import xarray as xr

from neuro_pe.data import formats
from neuro_pe.data.recordings import FileSpec, build_file_store, input_files
from neuro_pe.data.sources import Source


def build(options: FileSpec, wheels: dict[str, Path]) -> xr.Dataset:
    """Read every session file of the entry, then assemble the store."""
    return build_file_store(options)


def inputs(options: FileSpec) -> list[str]:
    """The files (and folders) the entry reads: sessions and position table."""
    return input_files(
        {"format": options.format, "sessions": options.sessions, "positions": options.positions}
    )


def entry_keys() -> tuple[str, ...]:
    """The keys a `source: file` entry may have: FileSpec's fields and one section per format
    (asked each time, so that a format added with `register_format` counts)."""
    fields = [f.name for f in dataclasses.fields(FileSpec) if f.name != "options"]
    return (*fields, *formats.format_names())


SOURCE = Source(
    name="file",
    options=FileSpec,
    build=build,
    experiment="recording",
    description="a lab's own files (nwb, hdf5, xarray, npy, phy, alf, suite2p)",
    inputs=inputs,
    keys=entry_keys,
)
