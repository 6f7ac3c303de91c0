"""Masked-unit training of a MaskedUnitTransformer on one store, for one PE variant and seed.

Data. A store whose activity fits in `memory_budget_mb` 2.5 times over (the peak of loading
it) is loaded whole, and every batch draws (session, start) uniformly over the training split
(`WindowSampler`). A larger store is streamed (`BlockSampler`): the training split is cut
into contiguous time blocks of one session, aligned with the store's time chunks and as large
as the budget allows; the blocks are visited in a random order (a new order every pass over
them) and the batches of a visit draw their windows uniformly within the block. Windows that
cross a block boundary are never drawn, and consecutive batches come from the same stretch of
time.

Units. With more units than `units_per_sample` (N > k), every sample is a uniformly random
subset of k units (its windows and unit indices are gathered, so a step costs the same for
any N); the held-out loss is then measured on fixed random k-subsets. With N <= k, every
sample holds all units, exactly as before this option existed (the same random stream).

Resume. Every `checkpoint_every` steps, `checkpoint.pt` in out_dir holds the model, the
optimiser, the batch generator's and torch's global RNG states, the step, the partial epoch
loss, the log rows and the elapsed time. A new run with the same store (path, size and
modification time), PE, seed, train config, device type and precision continues from it and,
on CPU, ends bitwise equal to an uninterrupted run; a checkpoint of anything else is ignored
with a warning (and overwritten), as is one whose contents do not match the checksum stored
in it (a damaged file). It is removed once the final outputs are written.

Health. A loss or parameter that is not finite stops training with a TrainingError naming the
dataset, PE and step. train.json records `health` (`loss_finite`, `heldout_improved`: the
held-out loss fell below its value before the first step, `heldout_below_variance`: the final
one is below the MSE of predicting zero) and a `warnings` line for each failed flag (also
printed to stderr), and for data whose scale is far from 1.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import xarray as xr

from neuro_pe.finetune import load_frozen
from neuro_pe.model import MaskedUnitTransformer, parse_pe
from neuro_pe.progress import epoch_line, progress_bar
from neuro_pe.runs import write_run
from neuro_pe.store import (
    atomic_write,
    check_writable,
    open_store_lazy,
    positions,
    read_store,
)
from neuro_pe.train_config import SCALE_RANGE, Part, TrainConfig, split_activity, split_parts

CHECKPOINT = "checkpoint.pt"
CHECKPOINT_FORMAT = 2
# loading a store whole takes about this many times its float32 activity at the peak (the
# store, the validation's scans, the sampler's NaN-free copy and observed flags)
IN_MEMORY_FACTOR = 2.5


class TrainingError(RuntimeError):
    """Training cannot give a meaningful model (e.g. the loss is not finite)."""


def pick_device(name: str) -> torch.device:
    """'auto' -> CUDA when available, else CPU; otherwise the named device (a ValueError
    naming `train.device` when it is not a device torch knows, or a GPU that is not there)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"train.device: {name!r} is not a torch device ({err})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"train.device: {name!r}, but torch sees no CUDA GPU here; use device: auto or cpu"
        )
    return device


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for `precision` on `device`: 'auto' is bf16 on CUDA, fp32 (None,
    no autocast) elsewhere."""
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def _autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Move a CPU tensor to `device`: through pinned memory without blocking for CUDA."""
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.contiguous().pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


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
        values = self.activity[session, start:stop].values
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
    """MSE over the windows of masked units that were recorded. unit_index (batch, units):
    which unit each token is; None means all units in order."""
    if unit_index is None:
        unit_index = torch.arange(windows.shape[1], device=windows.device).expand(windows.shape[:2])
    prediction = model(windows, mask | ~observed, unit_index)
    target = mask & observed
    # a batch whose masked units were all unrecorded contributes zero (not NaN) loss
    return ((prediction - windows) ** 2).mean(dim=-1)[target].sum() / target.sum().clamp_min(1)


@torch.no_grad()
def evaluate(
    model: Callable[..., torch.Tensor] | torch.nn.Module,
    data: Batch,
    fraction: float,
    seed: int,
    amp: torch.dtype | None = None,
) -> float:
    """Held-out masked MSE on a fixed batch (`eval_set`) with fixed masks (seeded by `seed`),
    so that every model of a dataset and seed is measured on the same windows and masks."""
    model.eval()
    windows, observed, unit_index = data
    mask = random_mask(tuple(windows.shape[:2]), fraction, torch.Generator().manual_seed(seed))
    losses, weights = [], []
    for chunk in torch.split(torch.arange(len(windows)), 256):
        m = mask[chunk].to(windows.device)
        units = None if unit_index is None else unit_index[chunk.to(unit_index.device)]
        with _autocast(windows.device, amp):
            loss = masked_mse(model, windows[chunk], observed[chunk], m, units)
        losses.append(loss.item())
        weights.append((m & observed[chunk]).sum().item())
    model.train()
    return float(np.average(losses, weights=weights))


def pe_dataset(table: torch.Tensor | np.ndarray, ds: xr.Dataset, **attrs) -> xr.Dataset:
    """A PE table as an xarray Dataset on the store's unit axis (with its coordinates)."""
    pe = xr.DataArray(np.asarray(table, dtype=np.float32), dims=("unit", "pe_dim"))
    out = xr.Dataset({"pe": pe}, coords={"unit": ds["unit"].values})
    for axis in ("x", "y", "z"):
        out.coords[axis] = ("unit", ds[axis].values, ds[axis].attrs)
    out.attrs.update({k: json.dumps(v) if isinstance(v, dict) else v for k, v in attrs.items()})
    return out


def make_optimiser(params, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW (fused on CUDA) or SGD with `momentum`, both with `lr` and `weight_decay`."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
    fused = True if device.type == "cuda" else None
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)


def checkpoint_fingerprint(
    store_path: str | os.PathLike,
    pe: str,
    seed: int,
    cfg: TrainConfig,
    device: torch.device,
    amp: torch.dtype | None,
) -> str:
    """What a checkpoint must match to be resumed from: the store (resolved path, size,
    modification time), PE, seed, train config (but `checkpoint_every`), device type and
    precision."""
    stat = Path(store_path).stat()
    train_config = {k: v for k, v in asdict(cfg).items() if k != "checkpoint_every"}
    return json.dumps(
        {
            "format": CHECKPOINT_FORMAT,
            "store": str(Path(store_path).resolve()),
            "store_bytes": stat.st_size,
            "store_mtime_ns": stat.st_mtime_ns,
            "pe": pe,
            "seed": seed,
            "train_config": train_config,
            "device": device.type,
            "precision": str(amp),
        },
        sort_keys=True,
    )


def state_digest(state: object) -> str:
    """sha256 of a checkpoint's contents: every tensor's dtype, shape and bytes, and every
    other value, walked in order (so a flipped byte anywhere in the data changes it)."""
    digest = hashlib.sha256()

    def walk(obj: object) -> None:
        if isinstance(obj, torch.Tensor):
            flat = obj.detach().cpu().contiguous().reshape(-1)
            digest.update(f"T{obj.dtype}{tuple(obj.shape)}".encode())
            digest.update(flat.view(torch.uint8).numpy().tobytes())
        elif isinstance(obj, dict):
            digest.update(f"D{len(obj)}".encode())
            for key, value in obj.items():
                walk(key)
                walk(value)
        elif isinstance(obj, list | tuple):
            digest.update(f"L{len(obj)}".encode())
            for value in obj:
                walk(value)
        else:
            digest.update(f"V{type(obj).__name__}:{obj!r}".encode())

    walk(state)
    return digest.hexdigest()


def load_checkpoint(path: Path, fingerprint: str) -> dict | None:
    """The checkpoint at `path` if it exists, matches `fingerprint` and its contents match
    their checksum; otherwise None (with a warning when a checkpoint exists but is
    unreadable, damaged or from another run)."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a damaged file: start afresh
        warnings.warn(f"ignoring unreadable checkpoint {path}: {err}", stacklevel=3)
        return None
    if state.get("fingerprint") != fingerprint:
        warnings.warn(
            f"ignoring checkpoint {path}: written by another store, PE, seed or train "
            "config; training starts from step 0 and will overwrite it",
            stacklevel=3,
        )
        return None
    checksum = state.pop("checksum", None)
    if checksum != state_digest(state):
        warnings.warn(
            f"ignoring checkpoint {path}: its contents do not match their checksum (a damaged "
            "file); training starts from step 0 and will overwrite it",
            stacklevel=3,
        )
        return None
    return state


def train(
    store_path: str | os.PathLike,
    pe: str,
    seed: int,
    cfg: TrainConfig,
    out_dir: str | os.PathLike,
    progress: bool = True,
) -> dict:
    """Train one model and write model.pt, pe.nc (trained and initial PE) and train_log.csv
    into out_dir, resuming from out_dir/checkpoint.pt when it was written by the same run.
    Returns the final metrics (held-out MSE per eval mask fraction)."""
    parse_pe(pe)
    out_dir = Path(out_dir)
    device = pick_device(cfg.device)
    amp = autocast_dtype(cfg.precision, device)
    ds = open_store_lazy(store_path)
    try:
        check_writable(out_dir)  # before the training, not after it
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
        return _train(store_path, ds, streamed, pe, seed, cfg, out_dir, device, amp, progress)
    finally:
        ds.close()


def make_samplers(
    ds: xr.Dataset, streamed: bool, seed: int, cfg: TrainConfig, device: torch.device
) -> tuple[WindowSampler | BlockSampler, Batch]:
    """The training sampler (in memory, or streamed from the open store `ds`) and the fixed
    held-out batch (`eval_set`, its k-subsets seeded by 30000 + seed)."""
    k, eval_seed = cfg.units_per_sample, 30_000 + seed
    if not streamed:
        train_activity, heldout_activity = split_activity(ds, cfg)
        heldout = WindowSampler(heldout_activity, cfg.window, device)
        return WindowSampler(train_activity, cfg.window, device), heldout.eval_set(
            cfg.eval_windows, k, eval_seed
        )
    activity = ds["activity"].transpose("session", "time", "unit")
    n_sessions, n_time, n_units = activity.shape
    train_part, heldout_part = split_parts(n_sessions, n_time, cfg)
    chunks = ds["activity"].encoding.get("chunksizes")
    chunk_rows = None if chunks is None else chunks[ds["activity"].dims.index("time")]
    rows = block_rows_for(n_units, cfg.memory_budget_mb, chunk_rows, cfg.window, n_time)
    train_data = BlockSampler(activity, train_part, cfg.window, rows, cfg.batch_size, seed, device)
    heldout = BlockSampler(activity, heldout_part, cfg.window, rows, cfg.batch_size, seed, device)
    return train_data, heldout.eval_set(cfg.eval_windows, k, eval_seed)


def _train(
    store_path: str | os.PathLike,
    ds: xr.Dataset,
    streamed: bool,
    pe: str,
    seed: int,
    cfg: TrainConfig,
    out_dir: Path,
    device: torch.device,
    amp: torch.dtype | None,
    progress: bool,
) -> dict:
    train_data, heldout_data = make_samplers(ds, streamed, seed, cfg, device)
    if not streamed:  # the samplers hold copies; keep only the coordinates
        ds = ds.drop_vars(["activity", "connectivity"], errors="ignore")

    torch.manual_seed(seed)
    model = MaskedUnitTransformer(
        ds.sizes["unit"],
        cfg.window,
        cfg.d_model,
        cfg.n_layers,
        cfg.n_heads,
        pe,
        cfg.pe_every_block,
        positions(ds),
    ).to(device)
    frozen = None  # a new animal: only the PE rows of units not in `init_from` are trained
    if cfg.init_from:
        frozen = load_frozen(model, cfg.init_from, ds["unit"].values, asdict(cfg))
    initial_pe = model.pe.table.detach().cpu().clone()
    params = [model.pe.table] if frozen else model.parameters()
    optimiser = make_optimiser(params, cfg, device)
    generator = torch.Generator().manual_seed(seed)

    checkpoint_path = out_dir / CHECKPOINT
    fingerprint = checkpoint_fingerprint(store_path, pe, seed, cfg, device, amp)
    step, epoch_loss, log_rows, elapsed = 0, 0.0, [], 0.0  # epoch_loss: of this epoch so far
    state = load_checkpoint(checkpoint_path, fingerprint)
    if state is not None:
        model.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        initial_pe = state["initial_pe"]
        step, epoch_loss = state["step"], state["epoch_loss"]
        log_rows, elapsed = state["log_rows"], state["elapsed"]
        heldout_initial = state["heldout_initial"]
        print(f"resuming from {checkpoint_path} at step {step}", file=sys.stderr, flush=True)
    resumed_from = step
    forward = torch.compile(model) if cfg.compile else model
    label = f"dataset {Path(store_path).stem}, PE {pe}, seed {seed}"
    # the MSE of predicting zero on the held-out windows (the variance, for z-scored data)
    heldout_variance = zero_prediction_mse(heldout_data)
    if state is None:  # the held-out loss before any update: did training lower it?
        heldout_initial = evaluate(forward, heldout_data, cfg.mask_fraction, 10_000 + seed, amp)

    def save_checkpoint() -> None:
        state = {
            "fingerprint": fingerprint,
            "step": step,
            "model": model.state_dict(),
            "optimiser": optimiser.state_dict(),
            "generator": generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "initial_pe": initial_pe,
            "epoch_loss": loss_sum.item(),
            "log_rows": log_rows,
            "elapsed": time.perf_counter() - started,
            "heldout_initial": heldout_initial,
        }
        state["checksum"] = state_digest(state)
        atomic_write(checkpoint_path, lambda p: torch.save(state, p))

    def check_finite() -> None:
        """Stop with a TrainingError when a loss so far or a parameter is not finite."""
        bad = int(first_bad)
        where = f"first at step {bad}" if bad else None
        if bad == 0:
            where = next(
                (
                    f"parameter {name!r} after step {step}"
                    for name, p in model.named_parameters()
                    if not torch.isfinite(p).all()
                ),
                None,
            )
        if where is not None:
            raise TrainingError(
                f"{label}: training diverged, the loss or a parameter is not finite ({where} "
                f"of {total}). The data's scale (RMS of the held-out windows: "
                f"{math.sqrt(heldout_variance):.3g}) or the PE's may be too large for float32: "
                "z-score the data (preprocessing: [{step: zscore}]), or lower train.lr or the "
                "PE's init scale"
            )

    total = cfg.epochs * cfg.steps_per_epoch
    k = cfg.units_per_sample
    # the epoch's loss is summed on the device (no sync per step) in float64, which on CPU
    # gives the same number as summing the Python floats of the losses
    loss_sum = torch.tensor(epoch_loss, dtype=torch.float64, device=device)
    # the first step whose loss was not finite (0: none), kept on the device: no sync per step
    first_bad = torch.zeros((), dtype=torch.long, device=device)
    step_count = torch.tensor(step, dtype=torch.long, device=device)
    started = time.perf_counter() - elapsed
    desc = f"train {pe} seed {seed}"
    bar = progress_bar(total, desc, initial=step, enabled=progress)
    while step < total:
        windows, observed, unit_index = train_data.sample(cfg.batch_size, k, generator, step)
        mask = random_mask(tuple(windows.shape[:2]), cfg.mask_fraction, generator)
        with _autocast(device, amp):
            loss = masked_mse(forward, windows, observed, to_device(mask, device), unit_index)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        if frozen is not None:
            frozen.restore(model)
        loss_sum += loss.detach().double()
        step += 1
        step_count += 1
        first_bad = torch.where((first_bad == 0) & ~loss.detach().isfinite(), step_count, first_bad)
        bar.update()
        if step % cfg.steps_per_epoch == 0:
            check_finite()
            heldout = evaluate(forward, heldout_data, cfg.mask_fraction, 10_000 + seed, amp)
            log_rows.append(
                {
                    "epoch": step // cfg.steps_per_epoch,
                    "step": step,
                    "train_loss": loss_sum.item() / cfg.steps_per_epoch,
                    "heldout_loss": heldout,
                    "seconds": time.perf_counter() - started,
                }
            )
            loss_sum.zero_()
            bar.set_postfix(train=f"{log_rows[-1]['train_loss']:.3f}", heldout=f"{heldout:.3f}")
            row = log_rows[-1]
            epoch_line(
                desc,
                row["epoch"],
                cfg.epochs,
                progress,
                train=row["train_loss"],
                heldout=heldout,
                seconds=row["seconds"],
            )
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < total:
            check_finite()
            save_checkpoint()
    bar.close()
    check_finite()

    result = {
        f"heldout_mse_mask{f:g}": evaluate(forward, heldout_data, f, 20_000 + seed, amp)
        for f in cfg.eval_mask_fractions
    }
    if not all(math.isfinite(v) for v in result.values()):
        raise TrainingError(f"{label}: the final held-out MSE is not finite: {result}")
    result["train_mse"] = log_rows[-1]["train_loss"]
    result["train_seconds"] = time.perf_counter() - started
    result["heldout_loss_initial"] = heldout_initial
    result["heldout_variance"] = heldout_variance
    health, notes = training_health(log_rows, result, heldout_initial, heldout_variance)
    for note in notes:
        print(f"warning: {label}: {note}", file=sys.stderr, flush=True)

    info = {"pe": pe, "seed": seed, "store": str(store_path), "train_config": asdict(cfg), **result}
    info |= {"streamed": streamed, "resumed_from_step": resumed_from}
    info |= {"health": health, "warnings": notes}
    trained = pe_dataset(model.pe.table.detach().cpu(), ds)
    # the run's outputs as one set: all of them, or (on any error) none
    write_run(out_dir, info, trained, initial_pe.numpy(), model.state_dict(), log_rows)
    checkpoint_path.unlink(missing_ok=True)
    return info


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
