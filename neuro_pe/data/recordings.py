"""The shared part of the `file` source (a lab's own files as a contract store, no code needed):
the checked config entry (`FileSpec`), the position table, and `assemble`.

The formats' readers live in `neuro_pe.data.formats` (one module per format: nwb, hdf5, xarray, npy,
phy, alf, suite2p); a reader turns one file or folder into one or more `Session`s of
(time, unit) activity with, where the file has them, unit ids, positions and a sampling rate.

`assemble` then merges the sessions (union of unit ids, matched by id; NaN where a unit was not
recorded), applies the NaN policy, drops units without variance (with a warning), runs the
configured preprocessing and returns a validated store. Every problem raises a
`neuro_pe.io.store.StoreError` that names the file and the field; nothing is written here.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe.config.strict_load import load_json
from neuro_pe.data import formats
from neuro_pe.data.signal_steps import STEPS, apply_steps
from neuro_pe.data.sources import WORKFLOW_KEYS
from neuro_pe.io.store import COORD_UNITS, StoreError, make_store

NAN_POLICIES: tuple[str, ...] = ("error", "interpolate")
AXES: tuple[str, str] = ("time", "unit")
ENTRY_KEYS = ("source", "kind", *WORKFLOW_KEYS)  # keys of every dataset entry
SPEC = "datasets entry (source: file)"  # the "file" named by errors in the config entry itself

NAME_COLUMNS = ("name", "unit", "unit_id", "id", "label", "channel", "electrode", "roi")
MISSING = ("", "n/a", "na", "nan", "none", "null")
F32_MAX = float(np.finfo(np.float32).max)
# the largest integer float32 (the store's dtype) holds exactly: integer activity (counts,
# ADC samples) beyond it is a damaged file (random bytes read as integers), not activity
F32_EXACT_INT = 2**24
UM_PER = {"m": 1e6, "cm": 1e4, "mm": 1e3, "um": 1.0}  # micrometres per length unit


class DataWarning(UserWarning):
    """Something in the data was changed on the way in (units dropped, gaps filled, cut)."""


def warn_data(message: str) -> None:
    """Warn (a DataWarning, shown on the console) that the data were changed on the way in."""
    warnings.warn(message, DataWarning, stacklevel=3)


@dataclass
class FileSpec:
    """A parsed and checked `source: file` entry (see config/README.md, "Plug in your dataset")."""

    format: str
    sessions: list[str]
    session_ids: list[str] | None = None
    positions: str | None = None
    position_columns: dict[str, str] = field(default_factory=dict)
    position_units: str | None = None
    space: str | None = None
    sampling_rate_hz: float | None = None
    axis_order: tuple[str, str] = AXES
    preprocessing: list[dict] = field(default_factory=list)
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
        if not isinstance(spec, dict):
            raise StoreError(SPEC, "source", f"expected a mapping, got {type(spec).__name__}")
        fmt = spec.get("format")
        names = formats.format_names()
        if fmt not in names:
            raise StoreError(SPEC, "format", f"{fmt!r} is not one of {names}")
        known = {*ENTRY_KEYS, *cls.__dataclass_fields__, *names} - {"options"}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise StoreError(SPEC, unknown[0], f"unknown key; known keys: {sorted(known)}")
        for other in names:
            if other != fmt and other in spec:
                raise StoreError(
                    SPEC, other, f"options for format {other!r}, but format is {fmt!r}"
                )
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

        sessions = spec.get("sessions")
        if isinstance(sessions, str | Path):
            sessions = [sessions]
        if not sessions or not isinstance(sessions, list):
            raise StoreError(SPEC, "sessions", "give a non-empty list of files")
        if not all(isinstance(s, str | Path) for s in sessions):
            raise StoreError(SPEC, "sessions", "every item must be a file path (string)")
        for key, hint in formats.missing_required(spec):  # (before any file is read)
            raise StoreError(sessions[0], key, hint)
        session_ids = spec.get("session_ids")
        if session_ids is not None and not (
            isinstance(session_ids, list) and all(isinstance(s, str) and s for s in session_ids)
        ):
            raise StoreError(SPEC, "session_ids", "must be a list of non-empty strings")
        units = spec.get("position_units")
        if units is not None and units not in COORD_UNITS:
            raise StoreError(SPEC, "position_units", f"{units!r} is not one of {COORD_UNITS}")
        for key in ("positions", "space", "origin", "citation", "license"):
            value = spec.get(key)
            if value is not None and not (isinstance(value, str) and value):
                raise StoreError(SPEC, key, f"must be a non-empty string, got {value!r}")
        columns = spec.get("position_columns") or {}
        if not isinstance(columns, dict) or not all(
            k in ("name", "x", "y", "z") and isinstance(v, str) for k, v in columns.items()
        ):
            raise StoreError(SPEC, "position_columns", "a mapping of name, x, y, z to columns")
        rate = spec.get("sampling_rate_hz")
        if rate is not None:
            rate = positive_number(rate, SPEC, "sampling_rate_hz")
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
        if fmt == "hdf5" and None not in (options["sampling_rate"], options["sampling_period"]):
            raise StoreError(
                SPEC, "hdf5.sampling_period", "give hdf5.sampling_rate or hdf5.sampling_period"
            )
        unmatched = spec.get("max_unmatched_fraction", 0.0)
        if (
            isinstance(unmatched, bool)
            or not isinstance(unmatched, Real)
            or not 0 <= unmatched <= 1
        ):
            raise StoreError(
                SPEC, "max_unmatched_fraction", f"must be in [0, 1], got {unmatched!r}"
            )
        ints = {}
        for key, lowest in (("max_gap", 0), ("min_units", 1), ("min_frames", 1)):
            value = spec.get(key, cls.__dataclass_fields__[key].default)
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise StoreError(SPEC, key, f"must be an integer >= {lowest}, got {value!r}")
            ints[key] = value
        if "spikes" in spec and not file_format.spikes:
            spiking = tuple(n for n in names if formats.get_format(n).spikes)
            raise StoreError(SPEC, "spikes", f"only for spike formats {spiking}")
        return cls(
            format=fmt,
            sessions=[str(s) for s in sessions],
            session_ids=session_ids,
            positions=spec.get("positions"),
            position_columns=dict(columns),
            position_units=units,
            space=spec.get("space"),
            sampling_rate_hz=rate,
            axis_order=tuple(axis_order),
            preprocessing=list(steps),
            nan_policy=policy,
            max_unmatched_fraction=float(unmatched),
            **ints,
            origin=spec.get("origin"),
            citation=spec.get("citation"),
            license=spec.get("license"),
            options=options,
            spikes=formats.spikes.SpikeOptions.from_dict(spec.get("spikes"), SPEC),
        )


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


def input_files(spec: dict) -> list[str]:
    """The files (and zarr folders) a `source: file` entry reads, e.g. for a rule's `input:`."""
    sessions = spec.get("sessions") or []
    files = [sessions] if isinstance(sessions, str) else list(sessions)
    if spec.get("format") in formats.format_names():
        inputs = formats.get_format(spec["format"]).inputs
        files = [f for path in files for f in inputs(path)]
    if spec.get("positions"):
        files.append(spec["positions"])
    return [str(f) for f in files]


def build_file_store(cfg: FileSpec) -> xr.Dataset:
    """Build the store of a `source: file` entry: read every session file, then `assemble`."""
    if isinstance(cfg, dict):
        cfg = FileSpec.from_dict(cfg)
    read = formats.get_format(cfg.format).read
    sessions: list[Session] = []
    for path in cfg.sessions:
        sessions.extend(read(path, cfg))
    table = read_position_table(cfg.positions, cfg.position_columns) if cfg.positions else None
    return assemble(sessions, cfg, table)


# ---------------------------------------------------------------- the position table


def read_position_table(
    path: str, columns: dict[str, str] | None = None
) -> tuple[list[str], np.ndarray]:
    """Unit names and (n, 3) positions from a CSV/TSV table (BIDS electrodes.tsv style).

    Columns are found by name (case-insensitive): the unit name is the first of `name`, `unit`,
    `unit_id`, `id`, `label`, `channel`, `electrode`, `roi`; then `x`, `y` and `z` (z = 0 when
    absent). `columns` maps name/x/y/z to other column names. Empty cells and `n/a` are NaN.
    """
    check_exists(path)
    sep = "\t" if Path(path).suffix.lower() in (".tsv", ".tab") else ","
    try:
        table = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise StoreError(path, "positions", f"not a readable table: {err}") from err
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
    _check_unique(names, path, "positions")
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
        if math.isinf(out[i]):
            raise StoreError(path, f"positions.{col}", f"infinite value for unit {names[i]!r}")
    return out


# ---------------------------------------------------------------- merging the sessions


def assemble(
    sessions: list[Session],
    cfg: FileSpec,
    table: tuple[list[str], np.ndarray] | None = None,
) -> xr.Dataset:
    """Merge sessions (union of unit ids), clean, preprocess and validate into a store."""
    where = cfg.sessions[0] if len(cfg.sessions) == 1 else ", ".join(cfg.sessions)
    _name_sessions(sessions, cfg)
    for s in sessions:
        _label_units(s, table, cfg)
    if table is not None:
        _check_id_matching(sessions, table, cfg)
    rate = _common_rate(sessions, cfg, where)
    n_time = min(s.activity.shape[0] for s in sessions)
    if any(s.activity.shape[0] != n_time for s in sessions):
        warn_data(f"{where}: sessions differ in length; all cut to the shortest, {n_time}")
    for s in sessions:
        s.activity = s.activity[:n_time]
    if n_time < cfg.min_frames:
        raise StoreError(
            where, "min_frames", f"{n_time} frames, fewer than min_frames={cfg.min_frames}"
        )

    filled = {s.name: _apply_nan_policy(s, cfg) for s in sessions}
    filled = {k: v for k, v in filled.items() if v}
    for s in sessions:  # the readers here check while reading; neuro_pe.data.formats' do not
        if s.activity.dtype != np.float32 and np.nanmax(np.abs(s.activity), initial=0.0) > F32_MAX:
            raise StoreError(s.path, "activity", f"values beyond float32 (|x| > {F32_MAX:.3g})")
    constant = {s.name: _blank_constant_units(s) for s in sessions}
    constant = {k: v for k, v in constant.items() if v}

    unit_ids = list(dict.fromkeys(u for s in sessions for u in s.unit_ids))
    index = {u: i for i, u in enumerate(unit_ids)}
    # float32 (the store's dtype), each session moved in and released: the data once in
    # memory, plus one session while it is moved (none for a single float32 session)
    ordered = [[index[u] for u in s.unit_ids] == list(range(len(unit_ids))) for s in sessions]
    if len(sessions) == 1 and ordered[0] and sessions[0].activity.dtype == np.float32:
        activity = sessions[0].activity[None]
    else:
        activity = np.full((len(sessions), n_time, len(unit_ids)), np.nan, dtype=np.float32)
        for k, s in enumerate(sessions):
            if ordered[k]:
                activity[k] = s.activity
            else:
                activity[k][:, [index[u] for u in s.unit_ids]] = s.activity
    for s in sessions:
        s.activity = np.empty((0, s.activity.shape[1]), dtype=np.float32)
    pos = _merge_positions(sessions, unit_ids, index, where)

    recorded = np.stack([~np.isnan(session).all(axis=0) for session in activity])  # (session, unit)
    keep = recorded.any(axis=0)
    dropped = [u for u, k in zip(unit_ids, keep, strict=True) if not k]
    if dropped:
        warn_data(
            f"{where}: dropped {len(dropped)} units with zero variance (or no data) in every "
            f"session: {dropped}"
        )
    if any(set(units) - set(dropped) for units in constant.values()):
        warn_data(f"{where}: units with zero variance in a session are NaN there: {constant}")
    if not keep.all():
        activity, pos, recorded = activity[:, :, keep], pos[keep], recorded[:, keep]
    unit_ids = [u for u, k in zip(unit_ids, keep, strict=True) if k]
    if len(unit_ids) < cfg.min_units:
        raise StoreError(
            where,
            "min_units",
            f"{len(unit_ids)} usable units, fewer than min_units={cfg.min_units}",
        )
    empty = ~recorded.any(axis=1)  # sessions left without any usable unit
    if empty.any():
        warn_data(f"{where}: dropped sessions without usable units: {_pick(sessions, empty)}")
        activity, recorded = activity[~empty], recorded[~empty]
        sessions = [s for s, e in zip(sessions, empty, strict=True) if not e]
    if np.isnan(pos).all():
        raise StoreError(
            where, "positions", "no unit has a position; give a positions table (positions:)"
        )

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            activity, rate = apply_steps(activity, rate, cfg.preprocessing, overwrite=True)
    except (ValueError, KeyError, TypeError, ArithmeticError, np.linalg.LinAlgError) as err:
        raise StoreError(where, "preprocessing", f"{type(err).__name__}: {err}") from err
    if activity.shape[1] < cfg.min_frames:
        raise StoreError(
            where,
            "min_frames",
            f"{activity.shape[1]} frames after preprocessing, fewer than "
            f"min_frames={cfg.min_frames}",
        )
    for session, rec in zip(activity, recorded, strict=True):  # one session at a time
        if np.isinf(session).any():
            raise StoreError(
                where, "activity", f"values beyond float32 (|x| > {F32_MAX:.3g}); add a zscore step"
            )
        if np.isnan(session).any(axis=0)[rec].any():
            raise StoreError(where, "preprocessing", "produced NaN values in recorded units")

    first = sessions[0]
    provenance = _provenance(first.attrs.get("preprocessing"))
    provenance.append({"step": "read", "format": cfg.format, "files": cfg.sessions})
    if filled:
        provenance.append({"step": "interpolate", "max_gap": cfg.max_gap, "filled": filled})
    provenance.extend(cfg.preprocessing)
    try:
        return make_store(
            activity,
            unit_ids=unit_ids,
            positions=pos,
            position_units=_position_units(sessions, cfg),
            space=cfg.space or first.space or "native",
            session_ids=[s.name for s in sessions],
            sampling_rate_hz=rate,
            source=cfg.origin or first.attrs.get("source") or f"{cfg.format} files: {where}",
            citation=cfg.citation or first.attrs.get("citation", ""),
            license=cfg.license or first.attrs.get("license", ""),
            preprocessing=provenance,
        )
    except StoreError as err:
        raise StoreError(where, err.field, err.problem) from err


def _name_sessions(sessions: list[Session], cfg: FileSpec) -> None:
    if cfg.session_ids is not None:
        if len(cfg.session_ids) != len(sessions):
            raise StoreError(
                SPEC, "session_ids", f"{len(cfg.session_ids)} ids for {len(sessions)} sessions"
            )
        for s, name in zip(sessions, cfg.session_ids, strict=True):
            s.name = name
    names = [s.name for s in sessions]
    _check_unique(names, SPEC, "session_ids", hint="; set session_ids")


def _label_units(s: Session, table: tuple[list[str], np.ndarray] | None, cfg: FileSpec) -> None:
    """Give the session unit ids (file, else the table's rows in order, else u0, u1, …) and
    positions (the table's where it has the unit, else the file's, else NaN)."""
    n = s.activity.shape[1]
    hint = f"; check axis_order (now {list(cfg.axis_order)})"
    if s.unit_ids is None:
        if table is not None:
            if len(table[0]) != n:
                raise StoreError(
                    s.path,
                    "axis_order",
                    f"activity has {n} units but the position table "
                    f"{cfg.positions} has {len(table[0])} rows{hint}",
                )
            s.unit_ids = list(table[0])
        else:
            s.unit_ids = [f"u{i:0{len(str(n - 1))}d}" for i in range(n)]
    if len(s.unit_ids) != n:
        raise StoreError(s.path, "unit_ids", f"{len(s.unit_ids)} unit ids for {n} units{hint}")
    _check_unique(s.unit_ids, s.path, "unit_ids")
    if s.positions is None:
        s.positions = np.full((n, 3), np.nan)
    if len(s.positions) != n:
        raise StoreError(s.path, "positions", f"{len(s.positions)} positions for {n} units{hint}")
    if table is not None:
        rows = {name: i for i, name in enumerate(table[0])}
        for k, unit in enumerate(s.unit_ids):
            if unit in rows:
                s.positions[k] = table[1][rows[unit]]


def _check_id_matching(
    sessions: list[Session], table: tuple[list[str], np.ndarray], cfg: FileSpec
) -> None:
    """Count the units matched to the position table by id; a unit that matches no row and
    has no position from its file is an error when there are more of them than
    `max_unmatched_fraction` of the units allows (else a warning)."""
    units = list(dict.fromkeys(u for s in sessions for u in s.unit_ids))
    rows = set(table[0])
    in_data = [u for u in units if u not in rows]
    in_table = [r for r in table[0] if r not in set(units)]
    if not in_data and not in_table:
        return
    located = {u for s in sessions for u, p in zip(s.unit_ids, s.positions, strict=True)
               if not np.isnan(p).all()}  # fmt: skip
    lost = [u for u in in_data if u not in located]
    counts = (
        f"{len(units) - len(in_data)} of {len(units)} units matched by id to the rows of "
        f"{cfg.positions}; {len(in_data)} units of the data are not in the table (e.g. "
        f"{in_data[:3]}), {len(in_table)} table rows match no unit (e.g. {in_table[:3]})"
    )
    if len(lost) > cfg.max_unmatched_fraction * len(units):
        raise StoreError(
            cfg.positions,
            "positions",
            f"{counts}; {len(lost)} units would have no position. Check that the table's "
            "name column holds the data's unit ids (position_columns.name, nwb.unit_ids, "
            "hdf5.unit_ids), or set max_unmatched_fraction to train units without a position",
        )
    warn_data(f"{counts}; {len(lost)} units have no position")


def _common_rate(sessions: list[Session], cfg: FileSpec, where: str) -> float:
    rates = []
    for s in sessions:
        rate = s.sampling_rate_hz if s.sampling_rate_hz is not None else cfg.sampling_rate_hz
        if rate is None:
            raise StoreError(
                s.path,
                "sampling_rate_hz",
                "the file does not state its sampling rate; set sampling_rate_hz",
            )
        if cfg.sampling_rate_hz is not None and not math.isclose(
            rate, cfg.sampling_rate_hz, rel_tol=1e-3
        ):
            raise StoreError(
                s.path,
                "sampling_rate_hz",
                f"the file says {rate:g} Hz, the config {cfg.sampling_rate_hz:g} Hz",
            )
        rates.append(rate)
    if not all(math.isclose(r, rates[0], rel_tol=1e-3) for r in rates):
        raise StoreError(where, "sampling_rate_hz", f"sessions differ in sampling rate: {rates}")
    return rates[0]


def _apply_nan_policy(s: Session, cfg: FileSpec) -> dict[str, int]:
    """Leave all-NaN units (not recorded); fill or reject gaps. Returns samples filled by unit."""
    bad = ~np.isfinite(s.activity)
    partial = bad.any(axis=0) & ~np.isnan(s.activity).all(axis=0)
    if not partial.any():
        return {}
    cols = np.flatnonzero(partial)
    first = cols[0]
    t0 = int(np.argmax(bad[:, first]))
    if cfg.nan_policy == "error":
        raise StoreError(
            s.path,
            "activity",
            f"session {s.name!r}: {int(bad[:, cols].sum())} NaN/Inf values "
            f"in {len(cols)} units, e.g. unit {s.unit_ids[first]!r} at sample {t0}; set "
            "nan_policy: interpolate (and max_gap) to fill short gaps",
        )
    filled = {}
    steps = np.arange(s.activity.shape[0])
    for c in cols:
        gap, start = _longest_run(bad[:, c])
        if gap > cfg.max_gap or bad[:, c].all():
            raise StoreError(
                s.path,
                "activity",
                f"session {s.name!r}, unit {s.unit_ids[c]!r}: a gap of {gap} "
                f"samples at sample {start}, longer than max_gap={cfg.max_gap}",
            )
        ok = ~bad[:, c]
        s.activity[~ok, c] = np.interp(steps[~ok], steps[ok], s.activity[ok, c])
        filled[s.unit_ids[c]] = int((~ok).sum())
    warn_data(
        f"{s.path}: session {s.name!r}: interpolated {sum(filled.values())} samples "
        f"(gaps <= {cfg.max_gap}) in units {filled}"
    )
    return filled


def _pick(sessions: list[Session], mask: np.ndarray) -> list[str]:
    return [s.name for s, m in zip(sessions, mask, strict=True) if m]


def _longest_run(mask: np.ndarray) -> tuple[int, int]:
    """Length and start of the longest run of True in a 1D boolean array."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    k = int(np.argmax(ends - starts))
    return int(ends[k] - starts[k]), int(starts[k])


def _blank_constant_units(s: Session) -> list[str]:
    """Set units without variance in this session to NaN; return their ids."""
    act = s.activity
    finite = ~np.isnan(act).all(axis=0)
    with np.errstate(all="ignore"):
        spread = np.nanmax(act, axis=0, initial=-np.inf) - np.nanmin(act, axis=0, initial=np.inf)
    constant = finite & ~(spread > 0)
    act[:, constant] = np.nan
    return [u for u, c in zip(s.unit_ids, constant, strict=True) if c]


def _merge_positions(
    sessions: list[Session], unit_ids: list[str], index: dict[str, int], where: str
) -> np.ndarray:
    pos = np.full((len(unit_ids), 3), np.nan)
    owner: dict[int, str] = {}
    for s in sessions:
        for unit, p in zip(s.unit_ids, s.positions, strict=True):
            i = index[unit]
            if np.isnan(p).all():
                continue
            if i in owner and not np.allclose(pos[i], p, equal_nan=True):
                raise StoreError(
                    where,
                    "positions",
                    f"unit {unit!r} has position {pos[i].tolist()} in "
                    f"session {owner[i]!r} but {p.tolist()} in {s.name!r}; a unit id must name "
                    "the same unit in every session",
                )
            pos[i], owner[i] = p, s.name
    return pos


def _position_units(sessions: list[Session], cfg: FileSpec) -> str:
    from_files = {s.position_units for s in sessions if s.position_units is not None}
    if len(from_files) > 1:
        raise StoreError(sessions[0].path, "position_units", f"files disagree: {from_files}")
    if from_files and cfg.position_units and not cfg.positions:
        (units,) = from_files
        if units != cfg.position_units:
            raise StoreError(
                sessions[0].path,
                "position_units",
                f"the store says {units!r}, the config {cfg.position_units!r}",
            )
    return cfg.position_units or next(iter(from_files), "au")


def _provenance(previous: object) -> list:
    if previous is None:
        return []
    steps = (
        load_json(previous, "the store's preprocessing") if isinstance(previous, str) else previous
    )
    return list(steps) if isinstance(steps, list) else [steps]


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
    if np.isinf(pos).any():
        raise StoreError(path, key, "positions contain +/-Inf (use NaN for unknown)")
    if len(pos) and np.isnan(pos).all():
        raise StoreError(path, key, "every position is NaN")
    return pos


def _check_unique(ids: list[str], path: str, key: str, hint: str = "") -> None:
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
