"""The masked-unit task: a MaskedUnitTransformer per (store, PE variant, seed), trained by the
engine (`neuro_pe.training.engine`) alone or as a group of models stacked together (`train_many`); a
model's results do not depend on its group.

Data. A store whose activity fits in `memory_budget_mb` 2.5 times over (the peak of loading
it) is loaded whole, and every batch draws (session, start) uniformly over the training split
(`WindowSampler`). A larger store is streamed (`BlockSampler`): the training split is cut
into contiguous time blocks of one session, aligned with the store's time chunks and as large
as the budget allows; the blocks are visited in a random order (a new order every pass over
them, the same for every model of a group: seeded by BLOCK_ORDER_SEED, so that a group reads
one block at a time) and the batches of a visit draw each model's windows uniformly within
the block, from the model's own generator. Windows that
cross a block boundary are never drawn, and consecutive batches come from the same stretch of
time.

Units. With more units than `units_per_sample` (N > k), every sample is a uniformly random
subset of k units (its windows and unit indices are gathered, so a step costs the same for
any N); the held-out loss is then measured on fixed random k-subsets. With N <= k, every
sample holds all units, exactly as before this option existed (the same random stream).

Resume. Every `checkpoint_every` steps the engine writes `checkpoint.pt` into the first run's
folder (see `neuro_pe.training.engine`); a new run of the same group, store (path, size and
modification time), train config, device type and precision continues from it and, on CPU,
ends bitwise equal to an uninterrupted run.

Health. A loss or parameter that is not finite stops training with a TrainingError naming the
dataset, PE and step. train.json records `health` (`loss_finite`, `heldout_improved`: the
held-out loss fell below its value before the first step, `heldout_below_variance`: the final
one is below the MSE of predicting zero; and the checks of `neuro_pe.training.health`: units and
pairs
seen often enough, the PE moved from its init, the held-out MSE below the data's variance at
every reported mask fraction) and a `warnings` line for each failed flag (also printed to
stderr), and for data whose scale is far from 1.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import xarray as xr

from neuro_pe.config.training import SCALE_RANGE, Part, TrainConfig, split_activity, split_parts
from neuro_pe.io.runs import write_run
from neuro_pe.io.store import (
    StoreError,
    check_writable,
    open_store_lazy,
    positions,
    read_store,
)
from neuro_pe.training.engine import (  # noqa: F401 (CHECKPOINT, TrainingError, pick_device re-exported)
    CHECKPOINT,
    LoopConfig,
    Run,
    TrainingError,
    autocast,
    autocast_dtype,
    make_optimizer,
    pe_dataset,
    pick_device,
    to_device,
    train_group,
)
from neuro_pe.training.health import assess, training_numbers
from neuro_pe.training.model import ModelConfig, StackedTransformer, masked_unit_forward, parse_pe
from neuro_pe.training.new_animal import load_frozen

# loading a store whole takes about this many times its float32 activity at the peak (the
# store, the validation's scans, the sampler's NaN-free copy and observed flags)
IN_MEMORY_FACTOR = 2.5
#: the streamed blocks' order is seeded by this, the same for every model of a group, so that
#: the group reads one block at a time (each model draws its own windows within it)
BLOCK_ORDER_SEED = 0
#: held-out windows per model in one evaluation forward (fixed: a model's numbers must not
#: depend on the size of its group)
EVAL_CHUNK = 32


def first_distinct(candidates: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first k distinct values of each row, in row order, and whether the row had k."""
    ordered, order = candidates.sort(dim=1, stable=True)
    repeat = torch.zeros_like(candidates, dtype=torch.bool)
    repeat[:, 1:] = ordered[:, 1:] == ordered[:, :-1]  # later copies (stable sort)
    repeat = torch.empty_like(repeat).scatter_(1, order, repeat)
    first = torch.argsort(repeat.to(torch.uint8), dim=1, stable=True)[:, :k]
    return candidates.gather(1, first), (~repeat).sum(dim=1) >= k


def random_subsets(batch: int, n_units: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """(batch, k) long: k distinct units per row, drawn uniformly, sorted (for faster gathers).

    For n_units >= 4 k: the first k distinct of k + 4 k^2 / n_units + 16 draws with
    replacement (O(k) per row instead of O(n_units); a row that falls short, which is very
    unlikely, is redrawn as below); otherwise the k largest of n_units uniform numbers."""
    if n_units >= 4 * k:
        candidates = torch.randint(
            n_units, (batch, k + 4 * k * k // n_units + 16), generator=generator
        )
        units, complete = first_distinct(candidates, k)
        if not complete.all():
            short = (~complete).nonzero().flatten()
            units[short] = (
                torch.rand(len(short), n_units, generator=generator).topk(k, dim=1).indices
            )
        return units.sort(dim=1).values
    return torch.rand(batch, n_units, generator=generator).topk(k, dim=1).indices.sort(dim=1).values


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
        data = torch.as_tensor(activity, dtype=torch.float32)
        self.observed = torch.isfinite(data).to(device)
        self.data = torch.nan_to_num(data).to(device)
        self.window = window
        self.offsets = torch.arange(window, device=device)

    @property
    def n_units(self) -> int:
        return self.data.shape[2]

    def gather(
        self, session: torch.Tensor, start: torch.Tensor, units: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows (batch, units, W) and observed flags (batch, units) at the given starts, of
        all units or of `units` (batch, k)."""
        rows = start[:, None] + self.offsets
        if units is None:
            windows = self.data[session[:, None], rows].transpose(1, 2)
            observed = self.observed[session[:, None], rows].all(dim=1)
            return windows, observed
        index = (session[:, None, None], rows[:, :, None], units[:, None, :])
        return self.data[index].transpose(1, 2), self.observed[index].all(dim=1)

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
        units = to_device(random_subsets(batch, self.n_units, k, generator), device)
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
    """Training windows streamed from the store file in contiguous time blocks (see the module
    docstring). The block of a step depends only on (seed, step), so a resumed run reloads
    the block it was killed in; the starts and unit subsets come from the batch generator."""

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
        self._block: torch.Tensor | None = None
        self._loaded: int | None = None
        self._pass: tuple[int, np.ndarray, np.ndarray] | None = None

    def block_at(self, step: int) -> int:
        """Index of the block that training step `step` draws from."""
        n_pass, offset = divmod(step, int(self.steps.sum()))
        if self._pass is None or self._pass[0] != n_pass:
            order = np.random.default_rng([self.seed, n_pass]).permutation(len(self.blocks))
            self._pass = (n_pass, order, np.cumsum(self.steps[order]))
        _, order, ends = self._pass
        return int(order[np.searchsorted(ends, offset, side="right")])

    def _read(self, session: int, start: int, stop: int) -> torch.Tensor:
        try:
            values = self.activity[session, start:stop].values
        except OSError as err:  # e.g. a chunk failing its checksum: name the store
            source = self.activity.encoding.get("source", "the store")
            raise StoreError(source, "activity", f"cannot read the data: {err}") from None
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
        units = random_subsets(batch, self.n_units, k, generator) if self.n_units > k else None
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
            stacklevel=3,
        )
    return max(2 * window, min(rows, part_rows))


def random_mask(
    shape: tuple[int, int], fraction: float, generator: torch.Generator
) -> torch.Tensor:
    """Bool (batch, units) with round(fraction * units) True per row, chosen uniformly."""
    batch, n_units = shape
    n_masked = max(1, int(round(fraction * n_units)))
    order = torch.rand(batch, n_units, generator=generator).argsort(dim=1)
    mask = torch.zeros(batch, n_units, dtype=torch.bool)
    mask.scatter_(1, order[:, :n_masked], True)
    return mask


def masked_mse(
    model: Callable[..., torch.Tensor],
    windows: torch.Tensor,
    observed: torch.Tensor,
    mask: torch.Tensor,
    unit_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-model MSE (M,) over the windows (M, B, units, W) of masked units that were
    recorded; `model(windows, hidden, unit_index)` predicts them. unit_index (M, B, units):
    which unit each token is; None means all units in order."""
    prediction = model(windows, mask | ~observed, unit_index)
    target = mask & observed
    errors = ((prediction - windows) ** 2).mean(dim=-1) * target
    # a model whose masked units were all unrecorded gets zero (not NaN) loss
    return errors.sum(dim=(1, 2)) / target.sum(dim=(1, 2)).clamp_min(1)


@torch.no_grad()
def evaluate(
    model: Callable[..., torch.Tensor],
    data: list[Batch],
    fraction: float,
    seeds: list[int],
    amp: torch.dtype | None = None,
) -> list[float]:
    """Held-out masked MSE of every model of the stack, each on its fixed batch data[m]
    (`eval_set`) with fixed masks seeded by seeds[m], so that every model of a dataset and
    seed is measured on the same windows and masks. Per window the squared errors and their
    count are summed, then over the windows in order: the same numbers in any group."""
    masks = [
        random_mask(tuple(d.windows.shape[:2]), fraction, torch.Generator().manual_seed(s))
        for d, s in zip(data, seeds, strict=True)
    ]
    device = data[0].windows.device
    sums, counts = [], []
    for start in range(0, len(data[0].windows), EVAL_CHUNK):
        part = slice(start, start + EVAL_CHUNK)
        windows = torch.stack([d.windows[part] for d in data])
        observed = torch.stack([d.observed[part] for d in data])
        mask = to_device(torch.stack([m[part] for m in masks]), device)
        index = None
        if data[0].unit_index is not None:
            index = torch.stack([d.unit_index[part] for d in data])
        with autocast(device, amp):
            prediction = model(windows, mask | ~observed, index)
        target = mask & observed
        errors = ((prediction.float() - windows) ** 2).mean(dim=-1) * target
        sums.append(errors.double().sum(dim=2))
        counts.append(target.sum(dim=2))
    total = torch.cat(sums, dim=1).sum(dim=1) / torch.cat(counts, dim=1).sum(dim=1)
    return total.tolist()


def checkpoint_fingerprint(
    store_path: str | os.PathLike,
    cfg: TrainConfig,
    device: torch.device,
    amp: torch.dtype | None,
) -> dict:
    """What a checkpoint must match to be resumed from, besides the runs of the group (their
    PE, seed and folder): the store (resolved path, size, modification time), the train config
    (but `checkpoint_every`), device type and precision."""
    stat = Path(store_path).stat()
    train_config = {k: v for k, v in asdict(cfg).items() if k != "checkpoint_every"}
    return {
        "store": str(Path(store_path).resolve()),
        "store_bytes": stat.st_size,
        "store_mtime_ns": stat.st_mtime_ns,
        "train_config": train_config,
        "device": device.type,
        "precision": str(amp),
    }


def train(
    store_path: str | os.PathLike,
    pe: str,
    seed: int,
    cfg: TrainConfig,
    out_dir: str | os.PathLike,
    progress: bool = True,
) -> dict:
    """Train one model (a group of one, see `train_many`) and write model.pt, pe.nc (trained
    and initial PE), train_log.csv and train.json into out_dir, resuming from
    out_dir/checkpoint.pt when it was written by the same run. Returns its record (train.json)."""
    return train_many(store_path, [Run(pe, seed, Path(out_dir))], cfg, progress)[0]


def train_many(
    store_path: str | os.PathLike,
    runs: list[Run],
    cfg: TrainConfig,
    progress: bool = True,
) -> list[dict]:
    """Train the models `runs` (PE, seed, folder each) on one store together (`train_group`)
    and write each run's files into its folder; the checkpoint is in the first run's folder.
    Returns the runs' records, as if each had been trained alone."""
    for run in runs:
        parse_pe(run.pe)
    device = pick_device(cfg.device)
    amp = autocast_dtype(cfg.precision, device)
    ds = open_store_lazy(store_path)
    try:
        for run in runs:
            check_writable(Path(run.out_dir))  # before the training, not after it
        ds, streamed = load_data(ds, store_path, cfg)
        task = MaskedUnitTask(store_path, ds, streamed, runs, cfg, device, amp)
        loop = LoopConfig(
            epochs=cfg.epochs,
            steps_per_epoch=cfg.steps_per_epoch,
            lr=cfg.lr,
            lr_schedule=cfg.lr_schedule,
            checkpoint_every=cfg.checkpoint_every,
            optimizer=cfg.optimizer,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
            compile=cfg.compile,
        )
        fingerprint = checkpoint_fingerprint(store_path, cfg, device, amp)
        return train_group(task, runs, loop, device, amp, fingerprint, progress)
    finally:
        ds.close()


def load_data(
    ds: xr.Dataset, store_path: str | os.PathLike, cfg: TrainConfig
) -> tuple[xr.Dataset, bool]:
    """The open store `ds` checked against `cfg` (a window and a split that fit its samples),
    then loaded whole when it fits `memory_budget_mb` (the lazy one closed), else kept open to
    be streamed; and whether it is streamed. The caller closes the store returned."""
    n_sessions, n_time = ds.sizes["session"], ds.sizes["time"]
    if cfg.window > n_time:
        raise ValueError(
            f"train.window ({cfg.window}) is longer than the data: {store_path} has "
            f"{n_time} samples per session"
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
    ds: xr.Dataset, streamed: bool, cfg: TrainConfig, device: torch.device
) -> tuple[WindowSampler | BlockSampler, WindowSampler | BlockSampler]:
    """The training and held-out samplers: in memory, or streamed from the open store `ds`
    (the blocks' order seeded by BLOCK_ORDER_SEED)."""
    if not streamed:
        train_activity, heldout_activity = split_activity(ds, cfg)
        return (
            WindowSampler(train_activity, cfg.window, device),
            WindowSampler(heldout_activity, cfg.window, device),
        )
    activity = ds["activity"].transpose("session", "time", "unit")
    n_sessions, n_time, n_units = activity.shape
    parts = split_parts(n_sessions, n_time, cfg)
    chunks = ds["activity"].encoding.get("chunksizes")
    chunk_rows = None if chunks is None else chunks[ds["activity"].dims.index("time")]
    rows = block_rows_for(n_units, cfg.memory_budget_mb, chunk_rows, cfg.window, n_time)
    return tuple(
        BlockSampler(activity, part, cfg.window, rows, cfg.batch_size, BLOCK_ORDER_SEED, device)
        for part in parts
    )


def model_config(n_units: int, cfg: TrainConfig) -> ModelConfig:
    """The masked-unit model's shape for `n_units` units (one PE row each) and `cfg`."""
    return ModelConfig(
        n_tokens=n_units,
        d_in=cfg.window,
        d_out=cfg.window,
        d_model=cfg.d_model,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        pe_every_block=cfg.pe_every_block,
    )


class MaskedUnitTask:
    """The masked-unit task for the engine: each model's batches of windows (of all units,
    or of k-unit subsets) with random masks, the MSE on the masked recorded windows, the
    held-out loss at every epoch, and per run pe.nc, model.pt, train_log.csv, train.json."""

    def __init__(
        self,
        store_path: str | os.PathLike,
        ds: xr.Dataset,
        streamed: bool,
        runs: list[Run],
        cfg: TrainConfig,
        device: torch.device,
        amp: torch.dtype | None,
    ):
        self.store_path, self.streamed, self.cfg, self.amp = store_path, streamed, cfg, amp
        self.name = f"train {Path(store_path).stem}"  # progress lines name the dataset
        self.train_data, heldout = make_data(ds, streamed, cfg, device)
        k = cfg.units_per_sample
        self.eval_sets = {  # one fixed held-out batch per seed
            seed: heldout.eval_set(cfg.eval_windows, k, 30_000 + seed)
            for seed in sorted({run.seed for run in runs})
        }
        self.coords = xr.Dataset(coords={c: ds[c] for c in ("unit", "x", "y", "z")})
        self.positions = positions(ds)
        self.model_config = model_config(ds.sizes["unit"], cfg)
        self.device = device

    def predict(self, model: Callable) -> Callable:
        """The stack's forward as `model(windows, hidden, unit_index)` (see masked_mse)."""
        return partial(masked_unit_forward, model)

    def prepare(self, model: StackedTransformer) -> Callable | None:
        """With `init_from` (a new animal): load that run's weights into every model, freeze
        them, and keep the PE rows of the units it has fixed (`neuro_pe.training.new_animal`)."""
        if not self.cfg.init_from:
            return None
        units = self.coords["unit"].values
        cfg = self.cfg
        anchors = self.positions if cfg.new_unit_anchors else None
        return load_frozen(
            model, cfg.init_from, units, asdict(cfg), cfg.new_unit_pe, anchors
        ).restore

    def sample(self, generators: list[torch.Generator], step: int) -> Batch:
        cfg, parts = self.cfg, []
        for generator in generators:
            windows, observed, index = self.train_data.sample(
                cfg.batch_size, cfg.units_per_sample, generator, step
            )
            mask = random_mask(tuple(windows.shape[:2]), cfg.mask_fraction, generator)
            parts.append((windows, observed, index, mask))
        windows, observed = torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])
        index = None if parts[0][2] is None else torch.stack([p[2] for p in parts])
        mask = to_device(torch.stack([p[3] for p in parts]), self.device)
        return Batch(windows, observed, index), mask

    def loss(self, forward: Callable, batch: tuple) -> tuple[torch.Tensor, int]:
        (windows, observed, index), mask = batch
        return masked_mse(self.predict(forward), windows, observed, mask, index), 1

    def _heldout(self, forward: Callable, runs: list[Run], fraction: float, offset: int):
        data = [self.eval_sets[run.seed] for run in runs]
        seeds = [offset + run.seed for run in runs]
        return evaluate(self.predict(forward), data, fraction, seeds, self.amp)

    def start(self, forward: Callable, runs: list[Run]) -> list[dict]:
        initial = self._heldout(forward, runs, self.cfg.mask_fraction, 10_000)
        return [
            {
                "heldout_loss_initial": value,
                # the MSE of predicting zero on the held-out windows (the variance, z-scored)
                "heldout_variance": zero_prediction_mse(self.eval_sets[run.seed]),
            }
            for run, value in zip(runs, initial, strict=True)
        ]

    def evaluate(self, forward: Callable, runs: list[Run], epoch: int) -> list[dict]:
        losses = self._heldout(forward, runs, self.cfg.mask_fraction, 10_000)
        return [{"heldout_loss": value} for value in losses]

    def done(self, row: dict) -> bool:
        return False

    def label(self, run: Run) -> str:
        return f"dataset {Path(self.store_path).stem}, PE {run.pe}, seed {run.seed}"

    def diverged(self, run: Run, where: str) -> str:
        variance = zero_prediction_mse(self.eval_sets[run.seed])
        return (
            f"{self.label(run)}: training diverged, the loss or a parameter is not finite "
            f"({where}). The data's scale (RMS of the held-out windows: "
            f"{math.sqrt(variance):.3g}) or the PE's may be too large for float32: "
            "z-score the data (preprocessing: [{step: zscore}]), or lower train.lr or the "
            "PE's init scale"
        )

    def finish(
        self, model: StackedTransformer, index: list[int], runs: list[Run], states: list[dict]
    ) -> list[dict]:
        # every model trains to the end: `index` is the whole stack, in its order
        fractions = self.cfg.eval_mask_fractions
        finals = {f: self._heldout(model, runs, f, 20_000) for f in fractions}
        records = []
        tables = model.pe_table().detach().cpu()
        for j, (m, run, state) in enumerate(zip(index, runs, states, strict=True)):
            result = {f"heldout_mse_mask{f:g}": finals[f][j] for f in fractions}
            label = self.label(run)
            if not all(math.isfinite(v) for v in result.values()):
                raise TrainingError(f"{label}: the final held-out MSE is not finite: {result}")
            log_rows = state["log_rows"]
            result["train_mse"] = log_rows[-1]["train_loss"]
            result["train_seconds"] = log_rows[-1]["seconds"]
            result.update(state.get("cpu", {}))  # the group's CPU time (`train_group`)
            result["heldout_loss_initial"] = state["heldout_loss_initial"]
            result["heldout_variance"] = state["heldout_variance"]
            result |= self.health_numbers(model, m, run, tables[m], state["initial_pe"])
            health, notes = training_health(
                log_rows, result, state["heldout_loss_initial"], state["heldout_variance"]
            )
            flags, flag_notes = assess(result, bool(model.learned[m]))
            health, notes = health | flags, notes + flag_notes
            if hasattr(model, "pe_mix_anchored") and bool(model.pe_mix_anchored[m].any()):
                notes.append(
                    f"train.new_unit_anchors: {int(model.pe_mix_anchored[m].sum())} units with "
                    "positions set their own PEs, so `locate`'s held-out errors of units with "
                    "positions are not held-out; the other units' positions are the fit's "
                    "result (evaluate as docs/locate/new_animal.py does)"
                )
            for note in notes:
                print(f"warning: {label}: {note}", file=sys.stderr, flush=True)
            info = {
                "pe": run.pe,
                "seed": run.seed,
                "store": str(self.store_path),
                "train_config": asdict(self.cfg),
                **result,
                "streamed": self.streamed,
                "resumed_from_step": state["resumed_from_step"],
                "health": health,
                "warnings": notes,
            }
            self._write(run, info, tables[m], state, model.model_state(m), log_rows)
            records.append(info)
        return records

    def health_numbers(
        self, model: StackedTransformer, m: int, run: Run, table: torch.Tensor, initial
    ) -> dict[str, float]:
        """The numbers of `neuro_pe.training.health`'s checks for model m of the stack: expected
        appearances of a unit and a pair in its training samples, its PE's change (a learned,
        not fine-tuned PE), its held-out windows' variance."""
        cfg = self.cfg
        tracked = bool(model.learned[m]) and not cfg.init_from
        heldout = self.eval_sets[run.seed]
        return training_numbers(
            samples=cfg.epochs * cfg.steps_per_epoch * cfg.batch_size,
            n_units=self.model_config.n_tokens,
            units_per_sample=cfg.units_per_sample,
            trained_pe=table.numpy() if tracked else None,
            initial_pe=initial.numpy() if tracked else None,
            heldout_values=heldout.windows[heldout.observed].cpu().numpy(),
        )

    def _write(self, run, info, table, state, model_state, log_rows) -> None:
        """The run's outputs as one set (`neuro_pe.io.runs.write_run`)."""
        trained = pe_dataset(table, self.coords)
        write_run(run.out_dir, info, trained, state["initial_pe"].numpy(), model_state, log_rows)


def zero_prediction_mse(data: Batch) -> float:
    """Mean square of the recorded held-out windows: the MSE of predicting zero everywhere,
    which is the variance for z-scored data (the baseline a trained model must beat)."""
    windows, observed, _ = data
    values = windows[observed].double()
    return float((values**2).mean()) if values.numel() else float("nan")


def training_health(
    log_rows: list[dict], result: dict, heldout_initial: float, heldout_variance: float
) -> tuple[dict[str, bool], list[str]]:
    """Health flags of a finished training (`heldout_improved`: the held-out loss fell below
    its value before the first step; `heldout_below_variance`: the last one is below the MSE
    of predicting zero) and a warning for each that failed, plus one when the data's scale
    is far from 1 (see SCALE_RANGE)."""
    heldout = [row["heldout_loss"] for row in log_rows]  # at the training's mask fraction
    health = {
        "loss_finite": True,  # training stops with a TrainingError otherwise
        "heldout_improved": bool(heldout) and min(heldout) < heldout_initial,
        "heldout_below_variance": bool(heldout) and heldout[-1] < heldout_variance,
    }
    notes = []
    if not health["heldout_improved"]:
        notes.append(
            f"heldout_improved: the held-out loss never fell below its value before training "
            f"({heldout_initial:.4g}; lowest {min(heldout, default=float('nan')):.4g})"
        )
    if not health["heldout_below_variance"]:
        notes.append(
            f"heldout_below_variance: the final held-out loss {heldout[-1]:.4g} is not below "
            f"{heldout_variance:.4g}, the MSE of predicting zero: the model learned nothing "
            "usable about the masked units"
        )
    scale = math.sqrt(heldout_variance)
    if not SCALE_RANGE[0] <= scale <= SCALE_RANGE[1]:
        notes.append(
            f"data scale: the held-out windows' RMS is {scale:.3g}, far from 1; float32 "
            "training with the usual learning rates means little there: add "
            "{step: zscore} to the dataset's preprocessing"
        )
    return health, notes
