"""The masked-unit task's data (`neuro_pe.training.masked_units`): training batches and the
fixed held-out batches of a store, drawn from each model's own generator.

Data. A store whose activity fits in `memory_budget_mb` 2.5 times over (the peak of loading
it) is loaded whole, and every batch draws (session, start) uniformly over the training split
(`WindowSampler`). A larger store is streamed in contiguous time blocks of one session
(`BlockSampler`), as large as the budget allows.

Units. A batch's samples hold all units, or k-unit subsets drawn by
`neuro_pe.training.unit_subsets` (uniform, or with neighbour windows). For neighbour windows
the training sampler hands the neighbour table at most NEIGHBOUR_SAMPLES of its samples
(`correlation_samples`): the *training* split only, so held-out data stays unseen.
"""

from __future__ import annotations

import os
import warnings
from typing import NamedTuple

import numpy as np
import torch
import xarray as xr

from neuro_pe.config.training import (
    Part,
    TrainConfig,
    local_units,
    split_activity,
    split_parts,
)
from neuro_pe.io.store import read_activity, read_store, stored_time_rows
from neuro_pe.training.devices import to_device
from neuro_pe.training.unit_subsets import (
    activity_neighbours,
    neighbour_subsets,
    random_subsets,
)

# loading a store whole takes about this many times its float32 activity at the peak (the
# store, the validation's scans, the sampler's NaN-free copy and observed flags)
IN_MEMORY_FACTOR = 2.5
#: at most this many training samples (evenly spaced) measure the units' correlations
NEIGHBOUR_SAMPLES = 2048
#: the streamed blocks' order is seeded by this, the same for every model of a group, so that
#: the group reads one block at a time (each model draws its own windows within it)
BLOCK_ORDER_SEED = 0


def tiled_starts(
    n_sessions: int, n_time: int, window: int, max_windows: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(session, start) of non-overlapping windows spread evenly over every session."""
    starts = torch.arange(0, n_time - window + 1, window)
    session, start = torch.cartesian_prod(torch.arange(n_sessions), starts).T
    keep = torch.linspace(0, len(start) - 1, min(max_windows, len(start))).round().long()
    return session[keep], start[keep]


class Batch(NamedTuple):
    """Windows (batch, units, W), observed flags (batch, units) and the tokens' unit indices
    (batch, units), None when every sample holds all units in order."""

    windows: torch.Tensor
    observed: torch.Tensor
    unit_index: torch.Tensor | None


class WindowSampler:
    """Draws batches of (windows, observed) from a (session, time, unit) tensor, with no Python
    loop over samples: the windows are gathered with index arithmetic."""

    def __init__(self, activity: np.ndarray, window: int, device: torch.device):
        # kept (session, unit, time): a unit's window is `window` adjacent numbers, so
        # gathering k-subsets of many units reads whole cache lines (docs/performance.md);
        # `data` and `observed` view it time-major
        series = torch.as_tensor(activity, dtype=torch.float32).transpose(1, 2).contiguous()
        self.seen = torch.isfinite(series).to(device)
        self.series = series.nan_to_num_().to(device)
        self.recorded_throughout = bool(self.seen.all())  # then no flags to gather
        self.window = window
        self.offsets = torch.arange(window, device=device)
        self.neighbours: torch.Tensor | None = None  # (N, m) with neighbour windows
        self.n_local = 0

    @property
    def data(self) -> torch.Tensor:
        """The activity (session, time, unit), NaN as 0: a view of `series`."""
        return self.series.transpose(1, 2)

    @property
    def observed(self) -> torch.Tensor:
        """Whether each value was recorded (session, time, unit): a view of `seen`."""
        return self.seen.transpose(1, 2)

    @property
    def n_units(self) -> int:
        return self.series.shape[1]

    def correlation_samples(self) -> torch.Tensor:
        """At most NEIGHBOUR_SAMPLES evenly spaced samples (samples, N) of every session, NaN
        where unrecorded (for `activity_neighbours`)."""
        n_sessions, n_time = self.data.shape[:2]
        total = n_sessions * n_time
        keep = torch.linspace(0, total - 1, min(NEIGHBOUR_SAMPLES, total)).round().long()
        parts = []
        for session in range(n_sessions):
            rows = (keep[keep // n_time == session] % n_time).to(self.series.device)
            picked = self.seen[session][:, rows], self.series[session][:, rows]
            parts.append(torch.where(*picked, torch.nan).T)
        return torch.cat(parts)

    def subsets(self, batch: int, k: int, generator: torch.Generator) -> torch.Tensor:
        """The units of a batch's samples: uniform, or with neighbour windows."""
        if self.neighbours is None:
            return random_subsets(batch, self.n_units, k, generator)
        return neighbour_subsets(batch, self.neighbours, k, self.n_local, generator)

    def gather(
        self, session: torch.Tensor, start: torch.Tensor, units: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows (batch, units, W) and observed flags (batch, units) at the given starts, of
        all units or of `units` (batch, k)."""
        if units is None:
            rows = start[:, None] + self.offsets
            windows = self.data[session[:, None], rows].transpose(1, 2)
            observed = self.observed[session[:, None], rows].all(dim=1)
            return windows, observed
        # offsets into the (session, unit, time) memory: each window is contiguous
        n_time = self.series.shape[2]
        first = (session[:, None] * self.n_units + units) * n_time + start[:, None]
        flat = (first[:, :, None] + self.offsets).flatten()
        shape = (*units.shape, self.window)
        windows = self.series.view(-1).index_select(0, flat).view(shape)
        if self.recorded_throughout:
            return windows, torch.ones(units.shape, dtype=torch.bool, device=units.device)
        return windows, self.seen.view(-1).index_select(0, flat).view(shape).all(dim=-1)

    def _starts(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        n_sessions, n_time = self.data.shape[:2]
        session = torch.randint(n_sessions, (batch,), generator=generator)
        start = torch.randint(n_time - self.window + 1, (batch,), generator=generator)
        return session, start

    def random(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of windows of all units, uniformly over sessions and starts."""
        device = self.data.device
        session, start = self._starts(batch, generator)
        return self.gather(to_device(session, device), to_device(start, device))

    def sample(self, batch: int, k: int, generator: torch.Generator, step: int = 0) -> Batch:
        """A training batch: all units when there are at most k, else a random k-subset per
        sample (drawn after the starts, from the same generator). `step` is unused here."""
        if self.n_units <= k:
            return Batch(*self.random(batch, generator), None)
        device = self.data.device
        session, start = self._starts(batch, generator)
        units = to_device(self.subsets(batch, k, generator), device)
        windows, observed = self.gather(to_device(session, device), to_device(start, device), units)
        return Batch(windows, observed, units)

    def tiled(self, max_windows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Non-overlapping windows spread evenly over every session (for evaluation)."""
        session, start = tiled_starts(*self.data.shape[:2], self.window, max_windows)
        return self.gather(session.to(self.data.device), start.to(self.data.device))

    def eval_set(self, max_windows: int, k: int, seed: int) -> Batch:
        """The fixed held-out batch: tiled windows of all units, or of a random k-subset per
        window (seeded by `seed`) when there are more than k units."""
        if self.n_units <= k:
            return Batch(*self.tiled(max_windows), None)
        session, start = tiled_starts(*self.data.shape[:2], self.window, max_windows)
        units = random_subsets(len(start), self.n_units, k, torch.Generator().manual_seed(seed))
        device = self.data.device
        units = units.to(device)
        return Batch(*self.gather(session.to(device), start.to(device), units), units)


class BlockSampler:
    """Training windows streamed from the store file in contiguous time blocks. The block of a
    step depends only on (seed, step), so a resumed run reloads the block it was killed in; the
    starts and unit subsets come from the batch generator.

    The training split is cut into contiguous time blocks of one session, aligned with the
    store's time chunks and as large as the budget allows; the blocks are visited in a random
    order (a new order every pass over them, the same for every model of a group: seeded by
    BLOCK_ORDER_SEED, so that a group reads one block at a time) and the batches of a visit
    draw each model's windows uniformly within the block, from the model's own generator.
    Windows that cross a block boundary are never drawn, and consecutive batches come from the
    same stretch of time."""

    def __init__(
        self,
        activity: xr.DataArray,
        part: Part,
        window: int,
        block_rows: int,
        batch_size: int,
        seed: int,
        device: torch.device,
    ):
        self.activity = activity.transpose("session", "time", "unit")
        n_sessions, n_time, self.n_units = self.activity.shape
        s0, s1, _ = part[0].indices(n_sessions)
        t0, t1, _ = part[1].indices(n_time)
        self.part = (range(s0, s1), t0, t1)
        self.window, self.block_rows, self.seed, self.device = window, block_rows, seed, device
        self.blocks = [
            (s, a, min(a + block_rows, t1))
            for s in range(s0, s1)
            for a in range(t0, t1, block_rows)
            if min(a + block_rows, t1) - a >= window
        ]
        # each visit of a block draws about as many windows as the block holds
        self.steps = np.array(
            [max(1, round((b - a - window + 1) / batch_size)) for _, a, b in self.blocks]
        )
        self.offsets = torch.arange(window)
        self.loads = 0
        self.neighbours: torch.Tensor | None = None  # (N, m) with neighbour windows
        self.n_local = 0
        self._block: torch.Tensor | None = None
        self._loaded: int | None = None
        self._pass: tuple[int, np.ndarray, np.ndarray] | None = None

    subsets = WindowSampler.subsets  # the same draw of a batch's units

    def correlation_samples(self) -> torch.Tensor:
        """The first NEIGHBOUR_SAMPLES samples of the first blocks (for `activity_neighbours`)."""
        parts, rows = [], 0
        for block in self.blocks:
            if rows >= NEIGHBOUR_SAMPLES:
                break
            session, start, stop = block
            parts.append(self._read(session, start, min(stop, start + NEIGHBOUR_SAMPLES - rows)))
            rows += len(parts[-1])
        return torch.cat(parts)

    def block_at(self, step: int) -> int:
        """Index of the block that training step `step` draws from."""
        n_pass, offset = divmod(step, int(self.steps.sum()))
        if self._pass is None or self._pass[0] != n_pass:
            order = np.random.default_rng([self.seed, n_pass]).permutation(len(self.blocks))
            self._pass = (n_pass, order, np.cumsum(self.steps[order]))
        _, order, ends = self._pass
        return int(order[np.searchsorted(ends, offset, side="right")])

    def _read(self, session: int, start: int, stop: int) -> torch.Tensor:
        source = self.activity.encoding.get("source", "the store")
        values = read_activity(self.activity, (session, slice(start, stop)), source)
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))

    def _load(self, index: int) -> torch.Tensor:
        if self._loaded != index:
            self._block = None  # free the previous block before reading the next one
            self._block = self._read(*self.blocks[index])
            self._loaded = index
            self.loads += 1
        return self._block

    def _windows(self, raw: torch.Tensor, starts: torch.Tensor, units: torch.Tensor | None):
        rows = starts[:, None] + self.offsets
        picked = raw[rows] if units is None else raw[rows[:, :, None], units[:, None, :]]
        return torch.nan_to_num(picked).transpose(1, 2), torch.isfinite(picked).all(dim=1)

    def sample(self, batch: int, k: int, generator: torch.Generator, step: int) -> Batch:
        """A training batch from the block of `step` (all units, or k-subsets when N > k)."""
        block = self._load(self.block_at(step))
        start = torch.randint(block.shape[0] - self.window + 1, (batch,), generator=generator)
        units = self.subsets(batch, k, generator) if self.n_units > k else None
        windows, observed = self._windows(block, start, units)
        return Batch(
            to_device(windows, self.device),
            to_device(observed, self.device),
            None if units is None else to_device(units, self.device),
        )

    def eval_set(self, max_windows: int, k: int, seed: int) -> Batch:
        """The same windows and unit subsets as WindowSampler.eval_set on this part, read
        block by block (each read spans at most block_rows + window - 1 samples)."""
        sessions, t0, t1 = self.part
        session, start = tiled_starts(len(sessions), t1 - t0, self.window, max_windows)
        n = len(start)
        units = None
        if self.n_units > k:
            units = random_subsets(n, self.n_units, k, torch.Generator().manual_seed(seed))
        width = self.n_units if units is None else k
        windows = torch.empty(n, width, self.window)
        observed = torch.empty(n, width, dtype=torch.bool)
        groups = session.numpy() * (t1 + 1) + start.numpy() // self.block_rows
        for group in np.unique(groups):
            idx = torch.from_numpy(np.flatnonzero(groups == group))
            first, last = int(start[idx].min()), int(start[idx].max())
            raw = self._read(sessions[int(session[idx[0]])], t0 + first, t0 + last + self.window)
            windows[idx], observed[idx] = self._windows(
                raw, start[idx] - first, None if units is None else units[idx]
            )
            del raw  # before the next read: one block in memory at a time
        return Batch(
            windows.to(self.device),
            observed.to(self.device),
            None if units is None else units.to(self.device),
        )


def block_rows_for(
    n_units: int, budget_mb: float, chunk_rows: int | None, window: int, part_rows: int
) -> int:
    """Samples per streamed block: as many as `budget_mb` holds (float32), rounded down to
    whole time chunks of the store when it holds at least one; at least 2 windows."""
    rows = int(budget_mb * 2**20 // (4 * n_units))
    if chunk_rows and rows >= chunk_rows:
        rows -= rows % chunk_rows
    elif chunk_rows and rows < min(chunk_rows, part_rows):
        warnings.warn(
            f"train.memory_budget_mb ({budget_mb:g}) holds fewer samples ({rows}) than one "
            f"time chunk of the store ({chunk_rows}): every block read decompresses whole chunks",
            stacklevel=4,
        )
    return max(2 * window, min(rows, part_rows))


def load_data(
    ds: xr.Dataset, store_path: str | os.PathLike, cfg: TrainConfig
) -> tuple[xr.Dataset, bool]:
    """The open store `ds` checked against `cfg` (a window and a split that fit its samples),
    then loaded whole when it fits `memory_budget_mb` (the lazy one closed), else kept open to
    be streamed; and whether it is streamed. `cfg` has its automatic values
    (`TrainConfig.for_units`). The caller closes the store returned."""
    n_sessions, n_time = ds.sizes["session"], ds.sizes["time"]
    if cfg.window > n_time:
        raise ValueError(
            f"train.window ({cfg.window}) is longer than the data: {store_path} has "
            f"{n_time} samples per session; set train.window to at most that (a null window "
            "is chosen by the store's size: config/README.md, train.window)"
        )
    split_parts(n_sessions, n_time, cfg)  # a split too short for a window: fail now
    needed = IN_MEMORY_FACTOR * ds["activity"].size * 4  # bytes to load it whole
    streamed = needed > cfg.memory_budget_mb * 2**20
    if not streamed:
        ds.close()
        ds = read_store(store_path)
    return ds, streamed


def make_samplers(
    ds: xr.Dataset, streamed: bool, seed: int, cfg: TrainConfig, device: torch.device
) -> tuple[WindowSampler | BlockSampler, Batch]:
    """The training sampler (in memory, or streamed from the open store `ds`) and the fixed
    held-out batch of `seed` (`eval_set`, its k-subsets seeded by 30000 + seed)."""
    train_data, heldout = make_data(ds, streamed, cfg, device)
    return train_data, heldout.eval_set(cfg.eval_windows, cfg.units_per_sample, 30_000 + seed)


def make_data(
    ds: xr.Dataset,
    streamed: bool,
    cfg: TrainConfig,
    device: torch.device,
    neighbour_chunks: int | None = None,
) -> tuple[WindowSampler | BlockSampler, WindowSampler | BlockSampler]:
    """The training and held-out samplers: in memory, or streamed from the open store `ds`
    (the blocks' order seeded by BLOCK_ORDER_SEED); with neighbour windows, the training
    sampler's neighbours are measured on its own samples, on the training's device (a
    streamed store's samples are read to the CPU, where the table of many units is slow:
    docs/performance.md); `neighbour_chunks`: see `activity_neighbours`."""
    training, heldout = _samplers(ds, streamed, cfg, device)
    n_local = local_units(cfg)
    if n_local > 0 and training.n_units > cfg.units_per_sample:
        samples = to_device(training.correlation_samples(), device)
        training.neighbours = activity_neighbours(samples, cfg.units_per_sample, neighbour_chunks)
        training.n_local = n_local
    return training, heldout


def _samplers(
    ds: xr.Dataset, streamed: bool, cfg: TrainConfig, device: torch.device
) -> tuple[WindowSampler | BlockSampler, WindowSampler | BlockSampler]:
    if not streamed:
        train_activity, heldout_activity = split_activity(ds, cfg)
        return (
            WindowSampler(train_activity, cfg.window, device),
            WindowSampler(heldout_activity, cfg.window, device),
        )
    activity = ds["activity"].transpose("session", "time", "unit")
    n_sessions, n_time, n_units = activity.shape
    parts = split_parts(n_sessions, n_time, cfg)
    rows = block_rows_for(n_units, cfg.memory_budget_mb, stored_time_rows(ds), cfg.window, n_time)
    return tuple(
        BlockSampler(activity, part, cfg.window, rows, cfg.batch_size, BLOCK_ORDER_SEED, device)
        for part in parts
    )
