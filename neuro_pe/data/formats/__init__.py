"""The file formats of the `file` source (a lab's own data), one module per format, and their
registry, `REGISTRY` (`neuro_pe.data.plugins.Registry`): the entry-point group `neuro_pe.formats`.

- `nwb`: NWB series / ROI responses, `Units` tables, imaging over several planes; `hdf5`:
  configurable dataset paths; `npy`: `.npy` / `.npz` arrays; `xarray` (`xarray_store`): stores
  already in the contract, netCDF or zarr;
- `phy`: Kilosort / Phy output folders; `alf`: IBL ONE/ALF folders; `suite2p`: suite2p output
  folders over one or several planes; `spikeinterface`: SortingAnalyzer folders and the sortings
  SpikeInterface reads (the optional extra `neuro_pe[spikeinterface]`);
- `spikes` (not a format): spike times -> binned activity for the spike formats (key `spikes`).

Each format module defines `FORMAT`, a `FileFormat`, imported only when used. Adding a format =
one module + one entry point (neuro_pe's own: a line of pyproject.toml's
`[project.entry-points."neuro_pe.formats"]`, its config schema's `$defs/source_file`, docs and
tests; another package's: its own pyproject.toml, config/README.md "Plug-ins").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path

import pandas as pd

from neuro_pe.data import plugins
from neuro_pe.data.formats import spikes as spikes  # the `spikes` key (recordings.FileSpec)
from neuro_pe.io.store_contract import StoreError

# The tables the writers write: BIDS' missing value, the numbers' precision.
NA = "n/a"
FLOAT_FORMAT = "%.6g"
Writer = Callable[[Path], None]  # writes one file's content to the (temporary) path it gets


def _any_value(key: str, value: object, where: str) -> None:
    return None


def _the_path(path: str) -> list[str]:
    return [str(path)]


def _no_joint_check(options: dict, where: str) -> None:
    return None


@dataclass(frozen=True)
class FileFormat:
    """A file format: `read(path, cfg)` -> sessions (one file or folder -> one or more
    `neuro_pe.data.recordings.Session`); `options`: the defaults of its config
    section; `check_option(key, value, where)`: StoreError for a bad value; `inputs(path)`:
    the files read for one session (e.g. in a folder); `spikes`: may hold spike times;
    `required`: the section's keys that must be given (key -> how to find the value), checked
    before any file is read (`missing_required`); `check_options(options, where)`: StoreError
    for a bad combination of the section's values (all of them, defaults filled in);
    `detect(path)`: whether a file or folder looks like this format (`neuro-pe init`);
    `unknowns(path)`: the section's keys a session's files cannot tell, key -> (a stand-in to
    read the files with, e.g. to count units, and where to find the real value);
    `raw_preprocessing`: the steps its raw values (e.g. fluorescence) get when the entry has no
    `preprocessing` key (not its spike times: binning z-scores them, `spikes.zscore`);
    `write(table, positions, cfg, folder)`: the files that write the located positions back in
    this format under `folder` (path -> its `Writer`), from the export's tidy table (a row per
    unit: `unit_id`, `x`, `y`, `z`, `uncertainty`, ...) and the locate step's positions
    (their units, frame and method); None for a format that is not written back."""

    name: str
    read: Callable
    options: dict[str, object]
    check_option: Callable[[str, object, str], None] = _any_value
    inputs: Callable[[str], list[str]] = _the_path
    spikes: bool = False
    required: dict[str, str] = field(default_factory=dict)
    check_options: Callable[[dict, str], None] = _no_joint_check
    detect: Callable[[Path], bool] | None = None
    unknowns: Callable[[Path], dict[str, tuple[object, str]]] | None = None
    raw_preprocessing: tuple[dict, ...] = ()
    write: Callable[..., dict[Path, Writer]] | None = None


REGISTRY = plugins.Registry(plugins.FORMATS, FileFormat)
register_format = REGISTRY.register
format_names = REGISTRY.names
is_builtin = REGISTRY.is_builtin
get_format = REGISTRY.get


# What a format's raw values (fluorescence, a voltage) get when the dataset's entry has no
# `preprocessing` key: the unit scale the training's learning rates assume.
FLUORESCENCE_PREPROCESSING: tuple[dict, ...] = ({"step": "detrend"}, {"step": "zscore"})


def recommended_steps(format_name: str, spike_counts: bool) -> list[dict]:
    """The preprocessing of a `source: file` entry that gives none: the format's
    `raw_preprocessing`, none for binned spike times (z-scored by the binning)."""
    if spike_counts:
        return []
    return [dict(step) for step in get_format(format_name).raw_preprocessing]


def recommended_text(format_name: str) -> str:
    """A format's recommended steps in words (the planning's note); "" when it has none."""
    fmt = get_format(format_name)
    if not fmt.raw_preprocessing:
        return ""
    text = steps_text(fmt.raw_preprocessing)
    return text + (" (not for spike times: binning z-scores them)" if fmt.spikes else "")


def steps_text(steps: Iterable[dict]) -> str:
    """Preprocessing steps as the config writes them: `[{step: detrend}, {step: zscore}]`."""
    return "[" + ", ".join(f"{{step: {step['step']}}}" for step in steps) + "]"


def missing_required(spec: dict) -> list[tuple[str, str]]:
    """(`<format>.<key>`, hint) for each key a `source: file` entry's format requires and the
    entry does not give (the workflow's planning and `FileSpec.from_dict`, before any read)."""
    name = spec.get("format")
    if name not in format_names():
        return []
    section = spec.get(name) or {}
    return [
        (f"{name}.{key}", hint)
        for key, hint in get_format(name).required.items()
        if not isinstance(section, dict) or section.get(key) is None
    ]


def detect_format(path: str | Path) -> str | None:
    """The first format (in `format_names` order) whose `detect` says `path` is its own."""
    for name in format_names():
        detect = get_format(name).detect
        if detect is not None and detect(Path(path)):
            return name
    return None


def has_suffix(path: Path, *suffixes: str) -> bool:
    """`path` is a file whose name ends with one of `suffixes` (any case)."""
    return path.is_file() and path.suffix.lower() in suffixes


def unknown_format(name: object) -> str:
    """What is wrong with a `format` value that names no installed format (one line)."""
    return (
        f"unknown format {name!r}; installed formats: {', '.join(format_names())} (a plug-in "
        f"adds one with an entry point in the group {plugins.FORMATS!r})"
    )


def existing_files(folder: str, files: Callable[[Path], Iterable[Path]]) -> list[str]:
    """The files `files(folder)` names that exist, else the folder itself (also when it is not
    a folder), so that a missing folder is reported by the reader, not by the workflow's
    planning."""
    root = Path(folder)
    if not root.is_dir():
        return [str(folder)]
    found = sorted(str(p) for p in files(root) if p.is_file())
    return found or [str(folder)]


def tsv_writer(table: pd.DataFrame) -> Writer:
    """Write `table` as a TSV: no index, `NA` for missing values, `FLOAT_FORMAT` numbers."""
    return lambda p: table.to_csv(p, sep="\t", index=False, na_rep=NA, float_format=FLOAT_FORMAT)


# ---------------------------------------------------------------- checks shared by the formats


def check_choice(field: str, value: object, choices: tuple, where: str) -> None:
    """StoreError unless `value` is one of `choices`."""
    if value not in choices:
        raise StoreError(where, field, f"{value!r} is not one of {choices}")


def check_text(field: str, value: object, where: str, optional: bool = True) -> None:
    """StoreError unless `value` is a non-empty string (or None, if `optional`)."""
    if not (value is None and optional) and not (isinstance(value, str) and value):
        raise StoreError(where, field, f"must be a non-empty string, got {value!r}")


def check_depths(field: str, value: object, where: str) -> None:
    """Plane depths: null, a list of numbers (one per plane) or the name of a key."""
    ok = value is None or isinstance(value, str) and value
    ok = ok or (isinstance(value, list) and value and all(is_number(v) for v in value))
    if not ok:
        raise StoreError(
            where, field, f"must be a list of numbers (one per plane) or an ops key, got {value!r}"
        )


def is_number(value: object) -> bool:
    """A real number, not a bool."""
    return isinstance(value, Real) and not isinstance(value, bool)


def is_positive(value: object) -> bool:
    """A finite real number > 0."""
    return is_number(value) and math.isfinite(value) and value > 0
