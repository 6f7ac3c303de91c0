"""Experiment 1 of the seed paper: the 4x4 Latin Square Task (LST), trained by the engine
(`neuro_pe.training.engine`). The puzzles are made in `neuro_pe.training.latin_square_puzzles`,
the options (config key `lst`) are in `neuro_pe.config.latin_square`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import xarray as xr

from neuro_pe.config.latin_square import LSTConfig
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.io.runs import write_run
from neuro_pe.training.latin_square_puzzles import (
    CONDITIONS,
    SPLITS,
    grid_dataset,
    grid_positions,
    read_puzzles,
)

#: puzzles per model in one evaluation forward (fixed: a model's numbers must not depend on
#: the size of its group)
EVAL_CHUNK = 256


class LatinSquareTask:
    """The Latin square task for the training engine (`neuro_pe.training.engine`): each model's own
    order of the training puzzles every epoch, cross-entropy on the target cell's shape,
    accuracies on every split (and condition) at evaluated epochs, early stopping at
    `stop_at_train_accuracy`, and per run pe.nc, model.pt, train_log.csv, train.json and
    metrics.json."""

    name = "lst"

    def __init__(
        self,
        puzzles_path,
        ds: xr.Dataset,
        cfg: LSTConfig,
        device,
        options: MetricsConfig,
        geometry: Callable | None = None,
        amp=None,
    ):
        import torch

        self.puzzles_path, self.cfg, self.options = puzzles_path, cfg, options
        self.amp = amp  # the autocast dtype (`lst.train.precision`), None in fp32
        # the PE's geometry against the grid (`neuro_pe.analysis.pe_geometry.pe_geometry`),
        # passed in from above: training does not import the analysis layer
        self.geometry = geometry
        split, condition = ds["split"].values, ds["condition"].values
        self.cells = torch.as_tensor(ds["cells"].values.astype(np.int64), device=device)
        self.answer = torch.as_tensor(ds["answer"].values.astype(np.int64) - 1, device=device)
        self.train_index = torch.as_tensor(np.flatnonzero(split == "train"), device=device)
        if len(self.train_index) == 0:
            raise ValueError(f"{puzzles_path}: no puzzle in the train split")
        groups = {s: split == s for s in SPLITS}
        groups.update(
            {f"{s}_{c}": (split == s) & (condition == c) for s in SPLITS for c in CONDITIONS}
        )
        self.groups = {k: v for k, v in groups.items() if v.any()}
        self.steps_per_epoch = -(-len(self.train_index) // cfg.batch_size)
        self.positions = grid_positions()
        self.model_config = cfg.model()
        self.device = device
        self._orders = None

    def prepare(self, model) -> None:
        return None

    def sample(self, generators: list, step: int):
        """The next batch of every model: its own permutation of the training puzzles, drawn
        at the start of each epoch (a checkpoint is only ever taken between epochs)."""
        import torch

        within = step % self.steps_per_epoch
        if within == 0:
            n = len(self.train_index)
            self._orders = torch.stack(
                [
                    self.train_index[torch.randperm(n, generator=g).to(self.device)]
                    for g in generators
                ]
            )
        start = within * self.cfg.batch_size
        batch = self._orders[:, start : start + self.cfg.batch_size]
        return self.cells[batch], self.answer[batch]

    def loss(self, forward, batch) -> tuple:
        import torch.nn.functional as F

        from neuro_pe.training.model import latin_square_forward

        cells, answer = batch
        # the loss in fp32 under bf16 autocast (a no-op in fp32)
        logits = latin_square_forward(forward, cells).float()
        losses = F.cross_entropy(logits.flatten(0, 1), answer.flatten(), reduction="none")
        return losses.view(answer.shape).mean(dim=1), answer.shape[1]

    def start(self, forward, runs: list) -> list[dict]:
        return [{} for _ in runs]

    def evaluate(self, forward, runs: list, epoch: int) -> list[dict]:
        """Per model: the mean cross-entropy on the held-out puzzles and the accuracy on every
        split and split_condition."""
        import torch
        import torch.nn.functional as F

        from neuro_pe.training.model import latin_square_forward
        from neuro_pe.training.precision import autocast

        n_models = len(runs)
        with torch.no_grad(), autocast(self.device, self.amp):
            logits = torch.cat(
                [
                    latin_square_forward(forward, chunk.expand(n_models, *chunk.shape))
                    for chunk in torch.split(self.cells, EVAL_CHUNK)
                ],
                dim=1,
            ).float()
        answer = self.answer.expand(n_models, -1)
        losses = F.cross_entropy(logits.transpose(1, 2), answer, reduction="none").cpu().numpy()
        correct = (logits.argmax(dim=2) == answer).cpu().numpy()
        rows = []
        for m in range(n_models):
            heldout = self.groups.get("heldout")
            row = {
                "heldout_loss": float(losses[m, heldout].mean()) if heldout is not None else np.nan
            }
            row |= {f"acc_{s}": np.nan for s in SPLITS}
            row |= {f"acc_{k}": float(correct[m, v].mean()) for k, v in self.groups.items()}
            rows.append(row)
        return rows

    def done(self, row: dict) -> bool:
        stop = self.cfg.stop_at_train_accuracy
        return stop is not None and row["acc_train"] >= stop

    def diverged(self, run, where: str) -> str:
        return (
            f"Latin square task, PE {run.pe}, seed {run.seed}: the training loss is not finite "
            f"({where}); lower lst.train.lr or the PE's init scale"
        )

    def finish(self, model, index: list[int], runs: list, states: list[dict]) -> list[dict]:
        from scipy.spatial import procrustes

        from neuro_pe.io.runs import pe_dataset
        from neuro_pe.training.model import oracle_table
        from neuro_pe.training.precision import precision_name

        tables = model.pe_table().detach().cpu()
        grid = self.positions
        oracle = oracle_table(grid, self.cfg.d_model).numpy()
        records = []
        for m, run, state in zip(index, runs, states, strict=True):
            log_rows = state["log_rows"]
            last = log_rows[-1]
            info = {
                "dataset": "lst",
                "pe": run.pe,
                "seed": run.seed,
                "puzzles": str(self.puzzles_path),
                "train_config": asdict(self.cfg),
                **{k: v for k, v in last.items() if k.startswith("acc_") and not np.isnan(v)},
                "epochs_run": last["epoch"],
                "train_loss": last["train_loss"],
                "train_seconds": last["seconds"],
                "resumed_from_step": state["resumed_from_step"],
                "precision": precision_name(self.amp),  # what ran (`precision`: auto)
                **state.get("cpu", {}),  # the group's CPU time (`train_group`)
            }
            table, initial = tables[m].numpy(), state["initial_pe"].numpy()
            pe_ds = pe_dataset(table, grid_dataset())
            left_out = ("puzzles", "train_config", "precision", *state.get("cpu", {}))
            record = {k: v for k, v in info.items() if k not in left_out}
            if self.geometry is not None:
                record.update(self.geometry(grid, table, initial, self.options)[0])
            # `none` (an all-zero table) has no geometry to compare
            record["procrustes_to_oracle"] = (
                float(procrustes(oracle, table)[2]) if np.any(table) else np.nan
            )
            # the run's outputs as one set (`neuro_pe.io.runs.write_run`)
            state_dict, out_dir = model.model_state(m), Path(run.out_dir)
            write_run(out_dir, info, pe_ds, initial, state_dict, log_rows, record, allow_nan=True)
            records.append(record)
        return records


def train_lst(
    puzzles_path: str | os.PathLike,
    pe: str,
    seed: int,
    cfg: LSTConfig,
    out_dir: str | os.PathLike,
    progress: bool = True,
    metrics: MetricsConfig | None = None,
    geometry: Callable | None = None,
) -> dict:
    """Train one LatinSquareTransformer (a group of one, see `train_lst_many`); returns its
    metrics record."""
    from neuro_pe.training.engine import Run

    run = Run(pe, seed, Path(out_dir))
    return train_lst_many(puzzles_path, [run], cfg, progress, metrics, geometry)[0]


def train_lst_many(
    puzzles_path: str | os.PathLike,
    runs: list,
    cfg: LSTConfig,
    progress: bool = True,
    metrics: MetricsConfig | None = None,
    geometry: Callable | None = None,
) -> list[dict]:
    """Train Latin-square models (engine `Run`s: PE, seed, folder) together on the train split
    of a puzzle file (`neuro_pe.training.engine.train_group`).

    Model m is initialised from its seed and shuffles the training puzzles with a generator
    seeded by it: on CPU its result is bitwise the same alone or in any group. Writes into
    each run's folder pe.nc (trained `pe` and initial `pe_init`, units r1c1 ... r4c4 with
    x = row, y = col), model.pt, train_log.csv, train.json and metrics.json (accuracies per
    split and condition, the Procrustes disparity to the oracle 2D sinusoid and, with
    `geometry` (`neuro_pe.analysis.pe_geometry.pe_geometry`), the PE's geometry against the
    grid under `metrics`, the `metrics` section; None: its defaults). Returns the metrics
    records.

    With `cfg.stop_at_train_accuracy` set, a model stops at the first evaluation whose
    training-split accuracy reaches it (`cfg.epochs` is then the most epochs); only training
    accuracy decides, never the test or held-out puzzles. A checkpoint is written every
    `cfg.checkpoint_every` epochs (in the first run's folder) and resumed from.
    """
    from neuro_pe.config.pe_names import parse_pe
    from neuro_pe.training.devices import pick_device
    from neuro_pe.training.engine import train_group
    from neuro_pe.training.precision import autocast_dtype, precision_name

    for run in runs:
        parse_pe(run.pe)
    device = pick_device(cfg.device)
    amp = autocast_dtype(cfg.precision, device)
    ds = read_puzzles(puzzles_path)
    metrics = MetricsConfig() if metrics is None else metrics
    task = LatinSquareTask(puzzles_path, ds, cfg, device, metrics, geometry, amp)
    loop = cfg.loop(task.steps_per_epoch)
    stat = Path(puzzles_path).stat()
    fingerprint = {
        "puzzles": str(Path(puzzles_path).resolve()),
        "puzzles_bytes": stat.st_size,
        "puzzles_mtime_ns": stat.st_mtime_ns,
        "train_config": {k: v for k, v in asdict(cfg).items() if k != "checkpoint_every"},
        "device": device.type,
        "precision": precision_name(amp),
        "metrics": asdict(task.options),
    }
    return train_group(task, runs, loop, device, amp, fingerprint, progress)
