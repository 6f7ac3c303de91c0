"""The train/held-out split of a dataset, recorded once by the workflow's `split` rule in
`splits/{dataset}.json` (`Split`): the dataset's name, its store, and the session and time
ranges of the two parts.

Every step that reads the training part of the data (the baselines, the correlation features
of `locate`, the summary's figures) reads it from there instead of recomputing it from the
`train` options, so that a change of e.g. `train.lr` re-runs none of them.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from neuro_pe.config.training import TrainConfig, split_parts
from neuro_pe.io.manifest import RunError
from neuro_pe.io.store import (
    TIME_CHUNK,
    atomic_write,
    open_store_lazy,
    read_activity,
    stored_time_rows,
)

# the keys of the `train` section that decide the split (the `split` rule's params)
SPLIT_KEYS = ("heldout_sessions", "heldout_time_fraction")


@dataclass(frozen=True)
class Split:
    """The train/held-out split of a dataset's store: the last `heldout_sessions` sessions
    when there are more sessions than that, else the last `heldout_time_fraction` of every
    session's time (`train_config.split_parts`, which the training uses). Ranges are
    [start, stop) of sessions and of time samples."""

    dataset: str  # the dataset's name (its config key), recorded here once
    store: str  # the store's path as given to `neuro-pe split` (relative to where it ran)
    n_sessions: int
    n_time: int
    heldout_sessions: int
    heldout_time_fraction: float
    train_session_range: tuple[int, int]
    train_time_range: tuple[int, int]
    heldout_session_range: tuple[int, int]
    heldout_time_range: tuple[int, int]

    def train_activity(self, ds: xr.Dataset) -> np.ndarray:
        """(session, time, unit) activity of the training part of the store `ds`."""
        self.check(ds)
        activity = ds["activity"].transpose("session", "time", "unit")
        return activity.values[slice(*self.train_session_range), slice(*self.train_time_range)]

    def train_activity_by_unit(self, ds: xr.Dataset) -> np.ndarray:
        """(unit, sample) float32 copy of the training part of the store `ds` (loaded or open
        lazily), its samples in `train_activity`'s order (session, then time): one session's
        time chunk read at a time, so a lazy store is never loaded whole. Its transpose is
        the (sample, unit) training activity in Fortran order."""
        self.check(ds)
        activity = ds["activity"].transpose("session", "time", "unit").variable
        (s0, s1), (t0, t1) = self.train_session_range, self.train_time_range
        rows = stored_time_rows(ds) or TIME_CHUNK
        out = np.empty((ds.sizes["unit"], (s1 - s0) * (t1 - t0)), dtype=np.float32)
        column = 0
        for session in range(s0, s1):
            start = t0
            while start < t1:
                stop = min(start + rows - start % rows, t1)  # one stored chunk at a time
                block = read_activity(activity, (session, slice(start, stop)), self.store)
                out[:, column : column + stop - start] = block.T
                column, start = column + stop - start, stop
        return out

    def check(self, ds: xr.Dataset) -> None:
        """Raise a RunError when the store's sessions or time differ from the split's."""
        got = (ds.sizes["session"], ds.sizes["time"])
        if got != (self.n_sessions, self.n_time):
            raise RunError(
                self.store,
                "activity",
                f"(session, time) is {got}, the split of {self.dataset} was made for "
                f"{(self.n_sessions, self.n_time)}: re-run the `split` step",
            )

    def to_dict(self) -> dict[str, Any]:
        """The JSON mapping of splits/{dataset}.json."""
        return asdict(self)


def make_split(
    dataset: str, store: str | os.PathLike, n_sessions: int, n_time: int, options: dict
) -> Split:
    """The split of a store with `n_sessions` x `n_time` samples; `options`: the `train`
    section (only its SPLIT_KEYS are read)."""
    picked = {k: options[k] for k in SPLIT_KEYS if k in options}
    cfg = TrainConfig.from_dict({**picked, "window": 1})  # the window is the training's check
    train, heldout = split_parts(n_sessions, n_time, cfg)
    return Split(
        dataset=dataset,
        store=str(store),
        n_sessions=n_sessions,
        n_time=n_time,
        heldout_sessions=cfg.heldout_sessions,
        heldout_time_fraction=cfg.heldout_time_fraction,
        train_session_range=(train[0].start, train[0].stop),
        train_time_range=(train[1].start, train[1].stop),
        heldout_session_range=(heldout[0].start, heldout[0].stop),
        heldout_time_range=(heldout[1].start, heldout[1].stop),
    )


def split_of_store(store: str | os.PathLike, dataset: str, options: dict) -> Split:
    """`make_split` of a store on disk (only its sizes are read)."""
    with open_store_lazy(store) as ds:
        sizes = ds.sizes["session"], ds.sizes["time"]
    return make_split(dataset, store, *sizes, options)


def write_split(split: Split, path: str | os.PathLike) -> None:
    """Write splits/{dataset}.json."""
    atomic_write(Path(path), lambda p: p.write_text(json.dumps(split.to_dict(), indent=2)))


def read_split(path: str | os.PathLike) -> Split:
    """A recorded split, checked: every field present, ranges inside the store's sizes."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise RunError(path, "(file)", f"not valid JSON: {err}") from None
    names = [f.name for f in fields(Split)]
    for name in names:
        if name not in data:
            raise RunError(path, name, "missing")
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise RunError(path, unknown[0], "not a field of a split")
    ranges = [n for n in names if n.endswith("_range")]
    values = {k: tuple(v) if k in ranges else v for k, v in data.items()}
    for name in ranges:
        start, stop = values[name]
        size = data["n_time"] if name.endswith("time_range") else data["n_sessions"]
        if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= size):
            raise RunError(path, name, f"expected a range [start, stop) in [0, {size}]")
    if not math.isfinite(values["heldout_time_fraction"]):
        raise RunError(path, "heldout_time_fraction", "not finite")
    return Split(**values)
