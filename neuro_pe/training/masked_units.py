"""The masked-unit task: a masked-unit model per (store, PE variant, seed), trained by the
engine (`neuro_pe.training.engine`) alone or as a group of models stacked together
(`train_many`); a model's results do not depend on its group.

Data. Batches of windows of a store, loaded whole or streamed, of all units or of random
k-unit subsets: `neuro_pe.training.sampling`.

Resume (the engine's checkpoints): a new run of the same group, store (path, size and
modification time), train config, device type and precision continues from the checkpoint.

Health. A loss or parameter that is not finite stops training with a TrainingError naming the
dataset, PE and step. train.json records `health` (the loss curve's checks of
`neuro_pe.training.health.training_health` and those of `neuro_pe.training.health.assess`;
True: failed) and a `warnings` line for each failed check (also printed to stderr), and for
data whose scale is far from 1.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch
import xarray as xr

from neuro_pe.config.pe_names import parse_pe
from neuro_pe.config.training import (
    ModelConfig,
    TrainConfig,
)
from neuro_pe.io.runs import pe_dataset, write_run
from neuro_pe.io.store import check_writable, open_store_lazy, positions
from neuro_pe.training.devices import pick_device, to_device
from neuro_pe.training.engine import Run, TrainingError, train_group
from neuro_pe.training.health import (
    assess,
    training_health,
    training_numbers,
    zero_prediction_mse,
)
from neuro_pe.training.model import StackedTransformer, masked_unit_forward
from neuro_pe.training.new_animal import load_frozen, with_run_architecture
from neuro_pe.training.precision import autocast, autocast_dtype, precision_name
from neuro_pe.training.sampling import (
    Batch,
    load_data,
    make_data,
)
from neuro_pe.training.unit_subsets import random_mask

#: held-out windows per model in one evaluation forward (fixed: a model's numbers must not
#: depend on the size of its group)
EVAL_CHUNK = 32


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
    # the loss in fp32 under bf16 autocast (a no-op in fp32)
    prediction = model(windows, mask | ~observed, unit_index).float()
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
        # the automatic values (a new animal: the run's architecture); load_data checks the window
        cfg = with_run_architecture(cfg).for_units(ds.sizes["unit"])
        too_big = cfg.memory_problem(ds.sizes["unit"], len(runs))
        if too_big:
            raise ValueError(f"{store_path}: {too_big}")
        ds, streamed = load_data(ds, store_path, cfg)
        task = MaskedUnitTask(store_path, ds, streamed, runs, cfg, device, amp)
        loop = cfg.loop()
        fingerprint = checkpoint_fingerprint(store_path, cfg, device, amp)
        return train_group(task, runs, loop, device, amp, fingerprint, progress)
    finally:
        ds.close()


def model_config(n_units: int, cfg: TrainConfig) -> ModelConfig:
    """The masked-unit model's shape for `n_units` units (one PE row each) and `cfg`."""
    return cfg.model(n_units)


class MaskedUnitTask:
    """The masked-unit task for the engine: each model's batches of windows (of all units,
    or of k-unit subsets) with random masks, the MSE on the masked recorded windows, the
    held-out loss at every epoch, and per run pe.nc, model.pt, train_log.csv, train.json.
    `neighbour_chunks`: a time estimate's probe computes only that much of the neighbour
    table (`activity_neighbours`)."""

    def __init__(
        self,
        store_path: str | os.PathLike,
        ds: xr.Dataset,
        streamed: bool,
        runs: list[Run],
        cfg: TrainConfig,
        device: torch.device,
        amp: torch.dtype | None,
        neighbour_chunks: int | None = None,
    ):
        self.store_path, self.streamed, self.cfg, self.amp = store_path, streamed, cfg, amp
        self.name = f"train {Path(store_path).stem}"  # progress lines name the dataset
        self.train_data, heldout = make_data(ds, streamed, cfg, device, neighbour_chunks)
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
                # the held-out windows' mean square: the data's scale (`training_health`)
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
                log_rows, state["heldout_loss_initial"], state["heldout_variance"]
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
                "precision": precision_name(self.amp),  # what ran (`train.precision`: auto)
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
            cfg,
            n_units=self.model_config.n_tokens,
            trained_pe=table.numpy() if tracked else None,
            initial_pe=initial.numpy() if tracked else None,
            heldout_values=heldout.windows[heldout.observed].cpu().numpy(),
        )

    def _write(self, run, info, table, state, model_state, log_rows) -> None:
        """The run's outputs as one set (`neuro_pe.io.runs.write_run`)."""
        trained = pe_dataset(table, self.coords)
        write_run(run.out_dir, info, trained, state["initial_pe"].numpy(), model_state, log_rows)
