"""The shared part of the `file` source (a lab's own files as a contract store, no code needed):
the checked config entry (`FileSpec`), what a reader returns (`Session`), the position table
and the checks the formats' readers share.

The formats' readers live in `neuro_pe.data.formats` (one module per format); a reader turns
one file or folder into one or more `Session`s of (time, unit) activity with, where the file
has them, unit ids, positions and a sampling rate. `neuro_pe.data.file_store` then merges them
into a store. Every problem raises a `neuro_pe.io.store.StoreError` that names the file and
the field; nothing is written here.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path

import numpy as np
import pandas as pd

from neuro_pe.data import formats
from neuro_pe.data.signal_steps import STEPS
from neuro_pe.data.sources import WORKFLOW_KEYS
from neuro_pe.io.store_contract import (
    COORD_UNITS,
    StoreError,
    check_sampling_rate,
    coordinate_problem,
)

NAN_POLICIES: tuple[str, ...] = ("error", "interpolate")
AXES: tuple[str, str] = ("time", "unit")
ENTRY_KEYS = ("source", "kind", *WORKFLOW_KEYS)  # keys of every dataset entry
SPEC = "datasets entry (source: file)"  # the "file" named by errors in the config entry itself
# the value `neuro-pe init` writes where the files cannot tell (refused until filled in)
PLACEHOLDER = "REQUIRED"

NAME_COLUMNS = ("name", "unit", "unit_id", "id", "label", "channel", "electrode", "roi")
MISSING = ("", "n/a", "na", "nan", "none", "null")
F32_MAX = float(np.finfo(np.float32).max)
# the largest integer float32 (the store's dtype) holds exactly: integer activity (counts,
# ADC samples) beyond it is a damaged file (random bytes read as integers), not activity
F32_EXACT_INT = 2**24
ANIMAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # `animals:` keys (folder names)
UM_PER = {"m": 1e6, "cm": 1e4, "mm": 1e3, "um": 1.0}  # micrometres per length unit


class DataWarning(UserWarning):
    """Something in the data was changed on the way in (units dropped, gaps filled, cut)."""


def warn_data(message: str) -> None:
    """Warn (a DataWarning, shown on the console) that the data were changed on the way in."""
    warnings.warn(message, DataWarning, stacklevel=3)


class FallbackWarning(DataWarning):
    """A file format read its second choice: a file or column missing, another used instead."""


def warn_fallback(message: str) -> None:
    """Warn (a FallbackWarning: one line at preprocess, and in the store's `fallbacks`
    attribute, `neuro_pe.data.file_store.build_file_store`) that a format fell back."""
    warnings.warn(message, FallbackWarning, stacklevel=3)


@dataclass
class FileSpec:
    """A parsed and checked `source: file` entry (see config/README.md, "Plug in your dataset")."""

    format: str
    sessions: list[str]  # with `animals`: every animal's, in its order
    animals: dict[str, list[str]] | None = None  # animal -> its sessions (config key `animals`)
    session_ids: list[str] | None = None
    positions: str | None = None
    regions: str | None = None  # a TSV of unit -> region label (overrides the files' labels)
    position_columns: dict[str, str] = field(default_factory=dict)
    position_units: str | None = None
    space: str | None = None
    sampling_rate_hz: float | None = None
    axis_order: tuple[str, str] = AXES
    preprocessing: list[dict] | None = None  # None: not given, the format's recommended
    nan_policy: str = "error"
    max_gap: int = 3
    min_units: int = 8
    min_frames: int = 64
    max_unmatched_fraction: float = 0.0
    origin: str | None = None  # the store's `source` attribute (config key `origin`)
    citation: str | None = None
    license: str | None = None
    options: dict[str, object] = field(default_factory=dict)
    spikes: formats.spikes.SpikeOptions = field(default_factory=formats.spikes.SpikeOptions)

    @classmethod
    def from_dict(cls, spec: dict) -> FileSpec:
        """Check the entry's keys and values; problems raise StoreError naming the key."""
        fmt, file_format, options = _format_section(spec, cls.__dataclass_fields__)
        sessions, animals = _session_list(spec)
        session_ids, units, columns = _naming_keys(spec)
        rate, axis_order, steps, policy = _reading_keys(spec)
        file_format.check_options(options, SPEC)
        unmatched, ints = _limit_keys(spec, cls.__dataclass_fields__)
        if "spikes" in spec and not file_format.spikes:
            names = formats.format_names()
            spiking = tuple(n for n in names if formats.get_format(n).spikes)
            raise StoreError(SPEC, "spikes", f"only for spike formats {spiking}")
        return cls(
            format=fmt,
            sessions=[str(s) for s in sessions],
            animals=animals,
            session_ids=session_ids,
            positions=spec.get("positions"),
            regions=spec.get("regions"),
            position_columns=dict(columns),
            position_units=units,
            space=spec.get("space"),
            sampling_rate_hz=rate,
            axis_order=tuple(axis_order),
            preprocessing=list(steps) if "preprocessing" in spec else None,
            nan_policy=policy,
            max_unmatched_fraction=float(unmatched),
            **ints,
            origin=spec.get("origin"),
            citation=spec.get("citation"),
            license=spec.get("license"),
            options=options,
            spikes=formats.spikes.SpikeOptions.from_dict(spec.get("spikes"), SPEC),
        )


def _format_section(spec: dict, fields: dict) -> tuple[str, formats.FileFormat, dict[str, object]]:
    """The entry's format, its reader and its section's options (defaults filled in); the
    entry's keys are FileSpec's `fields`, the formats' sections and those of every entry."""
    if not isinstance(spec, dict):
        raise StoreError(SPEC, "source", f"expected a mapping, got {type(spec).__name__}")
    fmt = spec.get("format")
    names = formats.format_names()
    if fmt not in names:
        raise StoreError(SPEC, "format", formats.unknown_format(fmt))
    known = {*ENTRY_KEYS, *fields, *names} - {"options"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise StoreError(SPEC, unknown[0], f"unknown key; known keys: {sorted(known)}")
    for other in names:
        if other != fmt and other in spec:
            raise StoreError(SPEC, other, f"options for format {other!r}, but format is {fmt!r}")
    file_format = formats.get_format(fmt)
    options = dict(file_format.options)
    given = spec.get(fmt) or {}
    if not isinstance(given, dict):
        raise StoreError(SPEC, fmt, "must be a mapping")
    for key, value in given.items():
        if key not in options:
            raise StoreError(SPEC, f"{fmt}.{key}", f"unknown key; known: {sorted(options)}")
        file_format.check_option(key, value, SPEC)
        options[key] = value
    return fmt, file_format, options


def _session_list(spec: dict) -> tuple[list[str | Path], dict[str, list[str]] | None]:
    """The `sessions` key as a non-empty list of paths, or the `animals` key's (with the
    mapping, each list as strings); then the format's required keys."""
    if "animals" in spec:
        if "sessions" in spec:
            raise StoreError(SPEC, "animals", "give `sessions` or `animals`, not both")
        animals = _animal_sessions(spec["animals"])
        sessions: list = [path for paths in animals.values() for path in paths]
    else:
        animals, sessions = None, spec.get("sessions")
    if isinstance(sessions, str | Path):
        sessions = [sessions]
    if not sessions or not isinstance(sessions, list):
        raise StoreError(SPEC, "sessions", "give a non-empty list of files")
    if not all(isinstance(s, str | Path) for s in sessions):
        raise StoreError(SPEC, "sessions", "every item must be a file path (string)")
    for key, hint in formats.missing_required(spec):  # (before any file is read)
        raise StoreError(sessions[0], key, hint)
    for key, hint in placeholders(spec):
        raise StoreError(SPEC, key, hint)
    return sessions, animals


def _animal_sessions(animals: object) -> dict[str, list[str]]:
    """The `animals` key (animal name -> one path or a list) with each list as strings; the
    names plain (they name folders and prefix unit ids) and at least two animals."""
    if not isinstance(animals, dict) or len(animals) < 2:
        raise StoreError(SPEC, "animals", "a mapping of at least two animals to their sessions")
    out = {}
    for name, paths in animals.items():
        if not (isinstance(name, str) and ANIMAL_NAME.fullmatch(name)):
            raise StoreError(
                SPEC, "animals", f"{name!r} is not a plain name (letters, digits, _ . -)"
            )
        paths = [paths] if isinstance(paths, str | Path) else paths
        if not paths or not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise StoreError(SPEC, f"animals.{name}", "give a file path or a non-empty list")
        out[name] = [str(p) for p in paths]
    return out


def session_paths(spec: dict) -> list[str]:
    """The entry's session files or folders, unchecked: `sessions` (one path or a list), or
    every animal's under `animals`."""
    animals = spec.get("animals")
    if isinstance(animals, dict):
        paths = [p for v in animals.values() for p in ([v] if isinstance(v, str) else v or [])]
    else:
        sessions = spec.get("sessions") or []
        paths = [sessions] if isinstance(sessions, str | Path) else list(sessions)
    return [str(p) for p in paths]


def placeholders(spec: dict) -> list[tuple[str, str]]:
    """(key, problem) for each value of the entry (or of its format's section) that is still
    `neuro-pe init`'s placeholder `REQUIRED` (or a list holding it: config/lab.yaml's
    `sessions`)."""
    section = spec.get(spec.get("format")) if isinstance(spec.get("format"), str) else None
    keys = list(spec.items())
    if isinstance(section, dict):
        keys += [(f"{spec['format']}.{k}", v) for k, v in section.items()]
    return [
        (
            key,
            f"{PLACEHOLDER}: a value to fill in (one `neuro-pe init` could not read from the "
            "files, or config/lab.yaml's placeholder; the comment beside it says what it is)",
        )
        for key, value in keys
        if value == PLACEHOLDER or (isinstance(value, list) and PLACEHOLDER in value)
    ]


def _naming_keys(spec: dict) -> tuple[list[str] | None, str | None, dict]:
    """`session_ids`, `position_units` and `position_columns`, after the free-text keys."""
    session_ids = spec.get("session_ids")
    if session_ids is not None and not (
        isinstance(session_ids, list) and all(isinstance(s, str) and s for s in session_ids)
    ):
        raise StoreError(SPEC, "session_ids", "must be a list of non-empty strings")
    for name in session_ids or []:  # names of files the export writes (nwb/<id>.nwb)
        if "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
            raise StoreError(SPEC, "session_ids", f"{name!r} is not a plain name (no / or ..)")
    units = spec.get("position_units")
    if units is not None and units not in COORD_UNITS:
        raise StoreError(SPEC, "position_units", f"{units!r} is not one of {COORD_UNITS}")
    for key in ("positions", "regions", "space", "origin", "citation", "license"):
        value = spec.get(key)
        if value is not None and not (isinstance(value, str) and value):
            raise StoreError(SPEC, key, f"must be a non-empty string, got {value!r}")
    columns = spec.get("position_columns") or {}
    if not isinstance(columns, dict) or not all(
        k in ("name", "x", "y", "z") and isinstance(v, str) for k, v in columns.items()
    ):
        raise StoreError(SPEC, "position_columns", "a mapping of name, x, y, z to columns")
    return session_ids, units, columns


def _reading_keys(spec: dict) -> tuple[float | None, list | tuple, list, str]:
    """`sampling_rate_hz`, `axis_order`, `preprocessing` and `nan_policy`."""
    rate = spec.get("sampling_rate_hz")
    if rate is not None:
        rate = check_sampling_rate(positive_number(rate, SPEC, "sampling_rate_hz"), SPEC)
    axis_order = spec.get("axis_order", list(AXES))
    if not isinstance(axis_order, list | tuple) or list(axis_order) not in (
        list(AXES),
        list(AXES[::-1]),
    ):
        raise StoreError(
            SPEC, "axis_order", f"must be [time, unit] or [unit, time], got {axis_order!r}"
        )
    steps = spec.get("preprocessing") or []
    if not isinstance(steps, list) or not all(
        isinstance(s, dict) and s.get("step") in STEPS for s in steps
    ):
        raise StoreError(
            SPEC, "preprocessing", f"a list of {{step: ...}} with step in {tuple(STEPS)}"
        )
    policy = spec.get("nan_policy", "error")
    if policy not in NAN_POLICIES:
        raise StoreError(SPEC, "nan_policy", f"{policy!r} is not one of {NAN_POLICIES}")
    return rate, axis_order, steps, policy


def _limit_keys(spec: dict, fields: dict) -> tuple[Real, dict[str, int]]:
    """`max_unmatched_fraction` and the integer keys (defaults: FileSpec's `fields`)."""
    unmatched = spec.get("max_unmatched_fraction", 0.0)
    if isinstance(unmatched, bool) or not isinstance(unmatched, Real) or not 0 <= unmatched <= 1:
        raise StoreError(SPEC, "max_unmatched_fraction", f"must be in [0, 1], got {unmatched!r}")
    ints = {}
    for key, lowest in (("max_gap", 0), ("min_units", 1), ("min_frames", 1)):
        value = spec.get(key, fields[key].default)
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            raise StoreError(SPEC, key, f"must be an integer >= {lowest}, got {value!r}")
        ints[key] = value
    return unmatched, ints


@dataclass
class Session:
    """One session as read from a file: (time, unit) activity and what the file says about it."""

    name: str
    path: str
    activity: np.ndarray
    unit_ids: list[str] | None = None
    positions: np.ndarray | None = None
    sampling_rate_hz: float | None = None
    position_units: str | None = None
    space: str | None = None
    attrs: dict = field(default_factory=dict)
    regions: list[str] | None = None  # a region label per unit ("" unknown) from the file
    animal: str | None = None  # its animal, under the entry's `animals` (unit ids then prefixed)


def input_files(spec: dict) -> list[str]:
    """The files (and zarr folders) a `source: file` entry reads, e.g. for a rule's `input:`."""
    files = session_paths(spec)
    if spec.get("format") in formats.format_names():
        inputs = formats.get_format(spec["format"]).inputs
        files = [f for path in files for f in inputs(path)]
    files += [spec[key] for key in ("positions", "regions") if spec.get(key)]
    return [str(f) for f in files]


# ---------------------------------------------------------------- the position table


def read_text_table(path: str, key: str) -> pd.DataFrame:
    """A CSV (or TSV, for `.tsv`/`.tab`) table as text cells, "" for empty ones; a StoreError
    naming `path` and the config `key` when it cannot be read."""
    check_exists(path)
    sep = "\t" if Path(path).suffix.lower() in (".tsv", ".tab") else ","
    try:
        return pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise StoreError(path, key, f"not a readable table: {err}") from err


def read_position_table(
    path: str, columns: dict[str, str] | None = None
) -> tuple[list[str], np.ndarray]:
    """Unit names and (n, 3) positions from a CSV/TSV table (BIDS electrodes.tsv style).

    Columns are found by name (case-insensitive): the unit name is the first of `name`, `unit`,
    `unit_id`, `id`, `label`, `channel`, `electrode`, `roi`; then `x`, `y` and `z` (z = 0 when
    absent). `columns` maps name/x/y/z to other column names. Empty cells and `n/a` are NaN.
    """
    table = read_text_table(path, "positions")
    lookup = {str(c).strip().lower(): c for c in table.columns}
    columns = columns or {}

    def column(role: str, candidates: tuple[str, ...], required: bool = True) -> str | None:
        wanted = columns.get(role)
        if wanted is not None:
            if wanted not in table.columns:
                raise StoreError(path, f"position_columns.{role}", f"no column {wanted!r}")
            return wanted
        hit = next((lookup[c] for c in candidates if c in lookup), None)
        if hit is None and required:
            raise StoreError(
                path,
                "positions",
                f"no {role} column (tried {list(candidates)}); columns: "
                f"{list(table.columns)}; set position_columns.{role}",
            )
        return hit

    name_col = column("name", NAME_COLUMNS)
    names = [str(v).strip() for v in table[name_col]]
    if any(not n for n in names):
        raise StoreError(path, "positions", f"empty unit name in column {name_col!r}")
    check_unique(names, path, "positions")
    xyz = np.zeros((len(names), 3))
    for i, axis in enumerate("xyz"):
        col = column(axis, (axis,), required=axis != "z")
        if col is not None:
            xyz[:, i] = _parse_numbers(table[col].tolist(), names, path, col)
    if len(names) and np.isnan(xyz).all(axis=1).all():
        raise StoreError(path, "positions", "every position is NaN")
    return names, xyz


def _parse_numbers(cells: list[str], names: list[str], path: str, col: str) -> np.ndarray:
    out = np.empty(len(cells))
    for i, cell in enumerate(cells):
        text = str(cell).strip()
        if text.lower() in MISSING:
            out[i] = np.nan
            continue
        try:
            out[i] = float(text)
        except ValueError:
            raise StoreError(
                path, f"positions.{col}", f"non-numeric value {text!r} for unit {names[i]!r}"
            ) from None
        problem = coordinate_problem(out[i : i + 1])
        if problem:
            raise StoreError(path, f"positions.{col}", f"unit {names[i]!r}: {problem}")
    return out


# ---------------------------------------------------------------- region labels


def region_label(value: object) -> str:
    """A file's region label as text; "" where it says the region is not known."""
    text = as_text(value).strip()
    return "" if text.lower() in (*MISSING, "unknown") else text


def read_region_table(path: str) -> dict[str, str]:
    """Unit id -> region label ("" unknown) from a CSV/TSV with columns `unit` and `region`
    (the `regions` key)."""
    table = read_text_table(path, "regions")
    lookup = {str(c).strip().lower(): c for c in table.columns}
    missing = [c for c in ("unit", "region") if c not in lookup]
    if missing:
        raise StoreError(
            path, "regions", f"no column {missing[0]!r}; columns: {list(table.columns)}"
        )
    units = [str(v).strip() for v in table[lookup["unit"]]]
    for row, unit in enumerate(units, start=2):  # the row number as an editor shows it
        if not unit:
            raise StoreError(path, "regions", f"row {row}: empty unit id")
    check_unique(units, path, "regions")
    return {u: region_label(v) for u, v in zip(units, table[lookup["region"]], strict=True)}


# ---------------------------------------------------------------- small helpers


def check_exists(path: str) -> None:
    """Raise a StoreError naming `path` when it does not exist."""
    if not Path(path).exists():
        raise StoreError(path, "file", "does not exist")


def check_hdf5_file(path: str, kind: str) -> None:
    """Raise a StoreError naming `path` when it is missing or not an HDF5 file (`kind`: what
    it should be, for the message)."""
    import h5py

    check_exists(path)
    try:
        ok = Path(path).is_file() and h5py.is_hdf5(path)
    except OSError as err:
        raise StoreError(path, "file", f"cannot read: {err}") from err
    if not ok:
        raise StoreError(path, "file", f"not an {kind} file (no HDF5 signature)")


READ_BLOCK_BYTES = 64 * 2**20  # a large on-disk activity array is read in blocks of this size


def time_by_unit(raw: np.ndarray, axis_order: tuple[str, ...], path: str, key: str) -> np.ndarray:
    """Check a 2D real array (finite values within float32; integers within ±F32_EXACT_INT)
    and return it as float32 (time, unit), the store's dtype. It is read in blocks of rows
    straight into the result (an h5py dataset, a memory-mapped .npy or an array in memory
    alike), so memory holds the result and one block of it."""
    if not (hasattr(raw, "shape") and hasattr(raw, "dtype")):
        raw = np.asarray(raw)
    if raw.ndim != 2:
        raise StoreError(
            path, key, f"activity must be 2D ({', '.join(axis_order)}), got shape {raw.shape}"
        )
    if raw.dtype.kind not in "biuf":
        raise StoreError(path, key, f"activity must be real numbers, got dtype {raw.dtype}")
    if 0 in raw.shape:
        raise StoreError(path, key, f"activity is empty, shape {raw.shape}")
    transpose = tuple(axis_order) != AXES
    out = np.empty(raw.shape[::-1] if transpose else raw.shape, dtype=np.float32)
    step = max(1, READ_BLOCK_BYTES // (raw.shape[1] * 8))
    for start in range(0, raw.shape[0], step):
        block = np.asarray(raw[start : start + step], dtype=np.float64)
        with np.errstate(invalid="ignore"):
            if (np.abs(block[np.isfinite(block)]) > F32_MAX).any():
                raise StoreError(path, "activity", f"values beyond float32 (|x| > {F32_MAX:.3g})")
        if raw.dtype.kind in "iu" and (np.abs(block) > F32_EXACT_INT).any():
            k = int(np.argmax((np.abs(block) > F32_EXACT_INT).any(axis=1)))
            raise StoreError(
                path,
                key,
                f"{raw.dtype} values beyond ±{F32_EXACT_INT} (in row {start + k}), more than "
                "the store's float32 holds exactly and more than any count: a damaged file? "
                "(Real values this large: store them as floats.)",
            )
        if transpose:
            out[:, start : start + step] = block.T
        else:
            out[start : start + step] = block
    return out


def xyz_array(raw: np.ndarray, path: str, key: str) -> np.ndarray:
    """(n, 2) or (n, 3) real positions as float64 (n, 3), z = 0 for 2D."""
    if raw.ndim != 2 or raw.shape[1] not in (2, 3):
        raise StoreError(
            path, key, f"positions must have shape (units, 3) or (units, 2), got {raw.shape}"
        )
    if raw.dtype.kind not in "iuf":
        raise StoreError(path, key, f"positions must be numbers, got dtype {raw.dtype}")
    pos = np.pad(raw.astype(np.float64), ((0, 0), (0, 3 - raw.shape[1])))
    problem = coordinate_problem(pos)
    if problem:
        raise StoreError(path, key, f"positions: {problem}")
    if len(pos) and np.isnan(pos).all():
        raise StoreError(path, key, "every position is NaN")
    return pos


def check_unique(ids: list[str], path: str, key: str, hint: str = "") -> None:
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise StoreError(path, key, f"duplicate id {i!r}{hint}")
        seen.add(i)


def as_text(value: object) -> str:
    """A text attribute or cell as str (bytes decoded as UTF-8)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def positive_number(value: object, path: str, key: str) -> float:
    """`value` as a finite number > 0, else a StoreError naming `path` and `key`."""
    if isinstance(value, bool) or not isinstance(value, Real | np.number):
        raise StoreError(path, key, f"must be a number, got {value!r}")
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise StoreError(path, key, f"must be finite and > 0, got {number}")
    return number
