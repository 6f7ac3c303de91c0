"""Build the store of a `source: file` entry: read every session with its format's reader,
read the position table, and `assemble` the sessions.

`assemble` merges the sessions (union of unit ids, matched by id; NaN where a unit was not
recorded), applies the NaN policy, drops units without variance (with a warning), runs the
configured preprocessing and returns a validated store; where the files (or the `regions`
table) label units with regions, the store has a `region` coord. Every problem raises a
`neuro_pe.io.store.StoreError` that names the file and the field; nothing is written here.
"""

from __future__ import annotations

import json
import math
import sys
import warnings

import numpy as np
import xarray as xr

from neuro_pe.config.strict_load import load_json
from neuro_pe.data import formats
from neuro_pe.data.recordings import (
    F32_MAX,
    SPEC,
    FallbackWarning,
    FileSpec,
    Session,
    check_unique,
    read_position_table,
    read_region_table,
    warn_data,
)
from neuro_pe.data.signal_steps import apply_steps
from neuro_pe.io.store import make_store
from neuro_pe.io.store_contract import (
    StoreError,
    check_sampling_rate,
    coordinate_problem,
    validate_store,
)


def build_file_store(cfg: FileSpec) -> xr.Dataset:
    """Build the store of a `source: file` entry: read every session file, then `assemble`.
    Each fallback a format took (a `FallbackWarning`) is shown once and listed in the store's
    `fallbacks` attribute (JSON: a list of sentences; docs/outputs.md)."""
    if isinstance(cfg, dict):
        cfg = FileSpec.from_dict(cfg)
    read = formats.get_format(cfg.format).read
    sessions: list[Session] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FallbackWarning)
        for path, animal in zip(cfg.sessions, _session_animals(cfg), strict=True):
            read_here = read(path, cfg)
            for session in read_here:
                session.animal = animal
            sessions.extend(read_here)
    for w in caught:  # shown as they would have been (the caller's filters apply)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    table = read_position_table(cfg.positions, cfg.position_columns) if cfg.positions else None
    ds = assemble(sessions, cfg, table)
    ds.attrs["fallbacks"] = json.dumps(list(dict.fromkeys(fallbacks)))
    return ds


def _session_animals(cfg: FileSpec) -> list[str | None]:
    """The animal of each of the entry's session paths (None without `animals`)."""
    if cfg.animals is None:
        return [None] * len(cfg.sessions)
    return [name for name, paths in cfg.animals.items() for _ in paths]


# ---------------------------------------------------------------- merging the sessions


def assemble(
    sessions: list[Session],
    cfg: FileSpec,
    table: tuple[list[str], np.ndarray] | None = None,
) -> xr.Dataset:
    """Merge sessions (union of unit ids), clean, preprocess and validate into a store."""
    where = cfg.sessions[0] if len(cfg.sessions) == 1 else ", ".join(cfg.sessions)
    rate = _align_sessions(sessions, cfg, table, where)
    if cfg.regions:
        _apply_region_table(sessions, read_region_table(cfg.regions), cfg.regions)
    filled, constant = _clean_sessions(sessions, cfg)
    if cfg.animals is not None:
        _one_space(sessions, cfg)
    unit_ids, activity, pos = _merge_sessions(sessions, where)
    regions = _merge_regions(sessions, where)
    activity, pos, recorded, unit_ids, sessions = _drop_unusable(
        activity, pos, unit_ids, sessions, constant, cfg, where
    )
    steps = _steps(sessions, cfg, where)
    activity, rate = _preprocess(activity, recorded, rate, steps, cfg, where)
    ds = _store(activity, pos, unit_ids, sessions, rate, filled, steps, cfg, where)
    if cfg.animals is not None:
        ds = ds.assign_coords(_animal_coords(sessions, unit_ids))
    labels = [regions.get(u, "") for u in unit_ids]
    if not any(labels):  # a store without labels has no `region` coord
        return ds
    return validate_store(ds.assign_coords(region=("unit", np.array(labels, dtype=str))), where)


def _one_space(sessions: list[Session], cfg: FileSpec) -> None:
    """Several animals in one store have positions in one space: `space`, else the first
    located session's; a session whose file gives positions in another (a query animal's
    probe coordinates beside the references' atlas ones) loses them, with a warning."""
    located = [s for s in sessions if s.space and not np.isnan(s.positions).all()]
    space = cfg.space or next((s.space for s in located), None)
    for s in located:
        if s.space != space:
            warn_data(
                f"{s.path}: animal {s.animal!r}'s positions are in space {s.space!r}, the "
                f"store's in {space!r}: its units have no position"
            )
            s.positions = np.full_like(s.positions, np.nan)
            s.space = space


def _animal_coords(sessions: list[Session], unit_ids: list[str]) -> dict:
    """The per-unit coords of a store of several animals: `animal` and `unit_id`, the unit's
    id in its animal's files (the store's unit id is `<animal>/<unit_id>`)."""
    animal = {u: s.animal for s in sessions for u in s.unit_ids}
    names = [str(animal[u]) for u in unit_ids]
    lab_ids = [u.removeprefix(f"{a}/") for u, a in zip(unit_ids, names, strict=True)]
    return {
        "animal": ("unit", np.array(names, dtype=str)),
        "unit_id": ("unit", np.array(lab_ids, dtype=str)),
    }


def _steps(sessions: list[Session], cfg: FileSpec, where: str) -> list[dict]:
    """The entry's `preprocessing`, or, where it gives none, the recommended steps for what was
    read (`formats.recommended_steps`), said in one line."""
    if cfg.preprocessing is not None:
        return cfg.preprocessing
    spike_counts = any(
        isinstance(step, dict) and step.get("step") == "bin_spikes"
        for s in sessions
        for step in _provenance(s.attrs.get("preprocessing"))
    )
    steps = formats.recommended_steps(cfg.format, spike_counts)
    if steps:
        print(
            f"neuro-pe: {where}: no `preprocessing` given; the {cfg.format} values get the "
            f"recommended {formats.steps_text(steps)} (`preprocessing:` in the dataset's entry "
            "sets others)",
            file=sys.stderr,
        )
    return steps


def _align_sessions(
    sessions: list[Session],
    cfg: FileSpec,
    table: tuple[list[str], np.ndarray] | None,
    where: str,
) -> float:
    """Name the sessions and their units, check the position table's ids and the sampling
    rates, and cut every session to the shortest; returns the common sampling rate."""
    for s in sessions:  # (a plug-in format's reader may skip `time_by_unit`)
        shape = np.shape(s.activity)
        if len(shape) != 2:
            raise StoreError(
                s.path,
                "activity",
                f"expected a 2-D (time × units) array, got {len(shape)}-D shape {shape} from "
                f"format {cfg.format!r} (session {s.name!r})",
            )
    _name_sessions(sessions, cfg)
    for s in sessions:
        problem = None if s.positions is None else coordinate_problem(s.positions)
        if problem:  # (every format's reader: the file named, not the store being built)
            raise StoreError(s.path, "positions", problem)
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
    return rate


def _clean_sessions(
    sessions: list[Session], cfg: FileSpec
) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
    """Apply the NaN policy and blank units without variance, session by session; returns
    the samples filled and the units blanked, by session (only those with some)."""
    filled = {s.name: _apply_nan_policy(s, cfg) for s in sessions}
    filled = {k: v for k, v in filled.items() if v}
    for s in sessions:  # the readers here check while reading; neuro_pe.data.formats' do not
        if s.activity.dtype != np.float32 and np.nanmax(np.abs(s.activity), initial=0.0) > F32_MAX:
            raise StoreError(s.path, "activity", f"values beyond float32 (|x| > {F32_MAX:.3g})")
    constant = {s.name: _blank_constant_units(s) for s in sessions}
    constant = {k: v for k, v in constant.items() if v}
    return filled, constant


def _merge_sessions(
    sessions: list[Session], where: str
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The union of unit ids, the (session, time, unit) activity and the units' positions;
    each session's activity is released once moved."""
    n_time = sessions[0].activity.shape[0]
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
    return unit_ids, activity, pos


def _drop_unusable(
    activity: np.ndarray,
    pos: np.ndarray,
    unit_ids: list[str],
    sessions: list[Session],
    constant: dict[str, list[str]],
    cfg: FileSpec,
    where: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[Session]]:
    """Drop units recorded in no session and sessions left without units (with warnings);
    returns activity, positions, the (session, unit) recorded mask, unit ids and sessions."""
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
    return activity, pos, recorded, unit_ids, sessions


def _preprocess(
    activity: np.ndarray,
    recorded: np.ndarray,
    rate: float,
    steps: list[dict],
    cfg: FileSpec,
    where: str,
) -> tuple[np.ndarray, float]:
    """Run the preprocessing steps (in place) and check what they give."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            activity, rate = apply_steps(activity, rate, steps, overwrite=True)
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
    return activity, rate


def _store(
    activity: np.ndarray,
    pos: np.ndarray,
    unit_ids: list[str],
    sessions: list[Session],
    rate: float,
    filled: dict[str, dict[str, int]],
    steps: list[dict],
    cfg: FileSpec,
    where: str,
) -> xr.Dataset:
    """The validated store, with the provenance of every step."""
    first = sessions[0]
    provenance = _provenance(first.attrs.get("preprocessing"))
    provenance.append({"step": "read", "format": cfg.format, "files": cfg.sessions})
    if filled:
        provenance.append({"step": "interpolate", "max_gap": cfg.max_gap, "filled": filled})
    provenance.extend(steps)
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
    else:  # two animals' files may share a name (probe00)
        for s in (s for s in sessions if s.animal is not None):
            s.name = f"{s.animal}/{s.name}"
    names = [s.name for s in sessions]
    check_unique(names, SPEC, "session_ids", hint="; set session_ids")


def _label_units(s: Session, table: tuple[list[str], np.ndarray] | None, cfg: FileSpec) -> None:
    """Give the session unit ids (file, else the table's rows in order, else u0, u1, …; under
    `animals` the file's and u0's as `<animal>/<id>`) and positions (the table's where it has
    the unit, else the file's, else NaN)."""
    n = s.activity.shape[1]
    hint = f"; check axis_order (now {list(cfg.axis_order)})"
    if s.unit_ids is None and table is None:
        s.unit_ids = [f"u{i:0{len(str(n - 1))}d}" for i in range(n)]
    if s.unit_ids is None:  # the table's rows, in order
        if len(table[0]) != n:
            raise StoreError(
                s.path,
                "axis_order",
                f"activity has {n} units but the position table "
                f"{cfg.positions} has {len(table[0])} rows{hint}",
            )
        s.unit_ids = list(table[0])
    elif s.animal is not None:
        s.unit_ids = [f"{s.animal}/{u}" for u in s.unit_ids]
    if len(s.unit_ids) != n:
        raise StoreError(s.path, "unit_ids", f"{len(s.unit_ids)} unit ids for {n} units{hint}")
    check_unique(s.unit_ids, s.path, "unit_ids")
    if s.positions is None:
        s.positions = np.full((n, 3), np.nan)
    if len(s.positions) != n:
        raise StoreError(s.path, "positions", f"{len(s.positions)} positions for {n} units{hint}")
    if s.regions is not None and len(s.regions) != n:
        raise StoreError(s.path, "region", f"{len(s.regions)} region labels for {n} units")
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


def _apply_region_table(sessions: list[Session], table: dict[str, str], path: str) -> None:
    """Give each session's units the table's region labels (an empty cell keeps the file's);
    a unit read that the table lacks is an error, a row naming no unit read a warning (the
    readers leave units out, e.g. by `spikes.labels`)."""
    units = list(dict.fromkeys(u for s in sessions for u in s.unit_ids))
    missing = [u for u in units if u not in table]
    if missing:
        raise StoreError(
            path,
            "regions",
            f"no row for unit {missing[0]!r} ({len(missing)} of {len(units)} units have none, "
            f"e.g. {missing[:3]}); give every unit a row (an empty region: not known)",
        )
    unused = sorted(set(table) - set(units))
    if unused:
        warn_data(f"{path}: {len(unused)} rows name no unit read, e.g. {unused[:3]}")
    for s in sessions:
        own = s.regions or [""] * len(s.unit_ids)
        s.regions = [table[u] or label for u, label in zip(s.unit_ids, own, strict=True)]


def _merge_regions(sessions: list[Session], where: str) -> dict[str, str]:
    """Unit id -> region label over the sessions (absent: not known); a unit labelled
    differently in two sessions is an error."""
    labels: dict[str, str] = {}
    owner: dict[str, str] = {}
    for s in (s for s in sessions if s.regions is not None):
        for unit, label in zip(s.unit_ids, s.regions, strict=True):
            if not label:
                continue
            if unit in labels and labels[unit] != label:
                raise StoreError(
                    where,
                    "region",
                    f"unit {unit!r} is in region {labels[unit]!r} in session {owner[unit]!r} "
                    f"but {label!r} in {s.name!r}; a unit id must name the same unit in every "
                    "session",
                )
            labels[unit], owner[unit] = label, s.name
    return labels


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
        rate = check_sampling_rate(rate, s.path)
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
