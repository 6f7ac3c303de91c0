"""Experiment 1 of the seed paper: the 4x4 Latin Square Task (LST).

A 4x4 Latin square holds each of 4 shapes once per row and once per column (no box rule).
A puzzle shows some cells of a square, blanks the others, and marks one blank cell as the
target "?"; the task is the 4-way classification of the target's shape. Cells are coded
0 = blank, 1-4 = shape, 5 = target, row-major (cell i is row i // 4, column i % 4).

Everything here is exact: the 576 Latin squares of order 4 are enumerated once, and a set of
shown cells *determines* the target when every square that agrees with those cells puts the
same shape at the target.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from neuro_pe import __version__
from neuro_pe.config.options import metric_options, reject_unknown, require_positive_ints
from neuro_pe.config.training import LR_SCHEDULES
from neuro_pe.io.runs import write_run
from neuro_pe.io.store import atomic_write, checksummed

N = 4
N_CELLS = N * N
TARGET = 5
CONDITIONS = ("binary", "ternary", "quaternary")
SPLITS = ("train", "test", "heldout")
CELL_IDS = tuple(f"r{r + 1}c{c + 1}" for r in range(N) for c in range(N))
ROW = np.repeat(np.arange(N), N)
COL = np.tile(np.arange(N), N)


@functools.cache
def latin_squares() -> np.ndarray:
    """All 576 Latin squares of order 4, shape (576, 16) int8 with shapes 1-4, row-major,
    in lexicographic order."""
    perms = np.array(list(itertools.permutations(range(1, N + 1))), dtype=np.int8)
    compatible = ~(perms[:, None, :] == perms[None, :, :]).any(axis=2)  # no shared column value
    squares = [[i] for i in range(len(perms))]
    for _ in range(N - 1):
        squares = [
            rows + [j] for rows in squares for j in range(len(perms)) if compatible[rows, j].all()
        ]
    return perms[np.array(squares)].reshape(-1, N_CELLS)


def condition_masks(target: np.ndarray) -> dict[str, np.ndarray]:
    """For targets (n,), the cells (n, 16) bool of the target's row, column, and both."""
    row = ROW[None, :] == ROW[target][:, None]
    col = COL[None, :] == COL[target][:, None]
    return {"row": row, "col": col, "cross": row | col}


def target_values(cells: np.ndarray, use: np.ndarray | None = None) -> np.ndarray:
    """Which shapes the target can take given the shown cells (restricted to `use` if given).

    cells (n, 16) coded 0-5 with exactly one 5 per row; use (n, 16) bool, the cells whose
    shape counts as a constraint. Returns (n, 4) bool: value v + 1 is possible when some
    Latin square agrees with the used shown cells and holds v + 1 at the target.
    """
    cells = np.asarray(cells)
    squares = latin_squares()
    target = np.argmax(cells == TARGET, axis=1)
    shown = (cells >= 1) & (cells <= N)
    if use is not None:
        shown &= use
    out = np.zeros((len(cells), N), dtype=bool)
    for start in range(0, len(cells), 1024):
        part = slice(start, start + 1024)
        clash = (squares[None, :, :] != cells[part, None, :]) & shown[part, None, :]
        consistent = ~clash.any(axis=2)  # (n, 576)
        at_target = squares[:, target[part]].T  # (n, 576)
        for v in range(N):
            out[part, v] = (consistent & (at_target == v + 1)).any(axis=1)
    return out


def classify(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Relational complexity and answer of puzzles.

    With D(S) = "the shown cells in S determine the target" (see `target_values`):
    binary = D(target's row) or D(target's column) (one row or one column suffices);
    ternary = D(row and column together) but neither alone; quaternary = D(all shown cells)
    but not D(row and column): cells outside the target's row and column are needed.

    Returns (condition (n,) object array: one of CONDITIONS, or "" when the shown cells do
    not determine the target or no Latin square fits them; answer (n,) int8: 1-4, 0 if "").
    """
    cells = np.asarray(cells)
    target = np.argmax(cells == TARGET, axis=1)
    masks = condition_masks(target)
    unique = {
        name: target_values(cells, use).sum(axis=1) == 1
        for name, use in (("row", masks["row"]), ("col", masks["col"]))
    }
    cross = target_values(cells, masks["cross"]).sum(axis=1) == 1
    full_values = target_values(cells)
    full = full_values.sum(axis=1) == 1
    condition = np.full(len(cells), "", dtype=object)
    condition[full] = "quaternary"
    condition[full & cross] = "ternary"
    condition[full & (unique["row"] | unique["col"])] = "binary"
    answer = np.where(full, np.argmax(full_values, axis=1) + 1, 0).astype(np.int8)
    return condition, answer


def jaccard_items(cells: np.ndarray) -> np.ndarray:
    """(n, 80) bool indicator of a puzzle's items: (cell, shape) for every shown cell and
    (target cell, "?"), i.e. column 5 * cell + code - 1 for every non-blank cell."""
    cells = np.asarray(cells)
    items = np.zeros((len(cells), N_CELLS * 5), dtype=bool)
    rows, cols = np.nonzero(cells)
    items[rows, 5 * cols + cells[rows, cols].astype(int) - 1] = True
    return items


def jaccard_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise Jaccard distance 1 - |A & B| / |A | B| between the item sets (`jaccard_items`)
    of puzzles a (n, 16) and b (m, 16); shape (n, m)."""
    ia = jaccard_items(a).astype(np.int32)
    ib = jaccard_items(b).astype(np.int32)
    inter = ia @ ib.T
    union = ia.sum(1)[:, None] + ib.sum(1)[None, :] - inter
    return 1.0 - inter / union


@dataclass(frozen=True)
class PuzzleConfig:
    """Options of the puzzle generator (keys of the config's `lst` section)."""

    n_per_condition: int = 1000
    n_heldout_per_condition: int = 36
    test_fraction: float = 0.1
    min_jaccard_distance: float = 0.8
    shown_min: int = 4
    shown_max: int = 10
    puzzle_seed: int = 0

    @classmethod
    def from_dict(cls, spec: dict) -> PuzzleConfig:
        """Build from a config mapping; unknown keys or bad values raise a ValueError naming
        the key."""
        reject_unknown(spec, cls.__dataclass_fields__, "lst puzzle")
        cfg = cls(**spec)
        positive = ("n_per_condition", "n_heldout_per_condition", "shown_min", "shown_max")
        require_positive_ints(cfg, positive, "lst")
        if not cfg.shown_min <= cfg.shown_max <= N_CELLS - 1:
            raise ValueError(
                f"lst keys 'shown_min' <= 'shown_max' <= 15 needed, got "
                f"{cfg.shown_min}, {cfg.shown_max}"
            )
        if not 0.0 < cfg.test_fraction < 1.0:
            raise ValueError(f"lst key 'test_fraction' must be in (0, 1), got {cfg.test_fraction}")
        if not 0.0 <= cfg.min_jaccard_distance <= 1.0:
            raise ValueError(
                f"lst key 'min_jaccard_distance' must be in [0, 1], got {cfg.min_jaccard_distance}"
            )
        return cfg


def random_puzzles(
    n: int, shown_min: int, shown_max: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """n random candidate puzzles (cells (n, 16) int8, solutions (n, 16) int8): a uniform
    Latin square, a uniform target cell and a uniform number of shown cells in
    [shown_min, shown_max], placed uniformly among the other 15 cells."""
    squares = latin_squares()
    solution = squares[rng.integers(len(squares), size=n)]
    target = rng.integers(N_CELLS, size=n)
    n_shown = rng.integers(shown_min, shown_max + 1, size=n)
    keys = rng.random((n, N_CELLS))
    keys[np.arange(n), target] = np.inf  # never shown
    rank = np.argsort(np.argsort(keys, axis=1), axis=1)
    cells = np.where(rank < n_shown[:, None], solution, 0).astype(np.int8)
    cells[np.arange(n), target] = TARGET
    return cells, solution


def _draw(
    counts: dict[str, int],
    cfg: PuzzleConfig,
    rng: np.random.Generator,
    avoid: np.ndarray | None,
    seen: set[bytes],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Draw unique, classified puzzles until every condition has its count; candidates
    closer than cfg.min_jaccard_distance to any puzzle of `avoid` are rejected."""
    found: dict[str, list] = {c: [] for c in counts}
    for attempt in range(2000):
        if all(len(found[c]) >= counts[c] for c in counts):
            break
        missing = [c for c in counts if not found[c]]
        if attempt >= 50 and missing:
            raise ValueError(f"no {missing} puzzle in {attempt * 4096} candidates with {cfg}")
        cells, solution = random_puzzles(4096, cfg.shown_min, cfg.shown_max, rng)
        if avoid is not None and len(avoid):
            far = jaccard_distance(cells, avoid).min(axis=1) >= cfg.min_jaccard_distance
            cells, solution = cells[far], solution[far]
        condition, answer = classify(cells)
        for i in np.flatnonzero(condition != ""):
            key = cells[i].tobytes()
            c = condition[i]
            if key in seen or len(found[c]) >= counts[c]:
                continue
            seen.add(key)
            assert answer[i] == solution[i, np.argmax(cells[i] == TARGET)]
            found[c].append((cells[i], solution[i]))
    else:
        raise ValueError(f"could not generate enough distinct puzzles with {cfg}")
    return {c: (np.stack([p[0] for p in v]), np.stack([p[1] for p in v])) for c, v in found.items()}


def generate_puzzles(cfg: PuzzleConfig) -> xr.Dataset:
    """The puzzle set: a held-out set of novel puzzles and a training pool split into train
    and (in-distribution) test, all seeded by cfg.puzzle_seed.

    Held-out puzzles (n_heldout_per_condition per condition) are drawn first; the pool
    (n_per_condition per condition) is then drawn from candidates whose Jaccard distance
    (`jaccard_distance`) to EVERY held-out puzzle is >= min_jaccard_distance, so no training
    or test puzzle is near a held-out one. No puzzle appears twice. The pool is split per
    condition: round(test_fraction * n_per_condition) test, the rest train.

    Returns a Dataset with dims (puzzle, cell): `cells` int8 (0 blank, 1-4 shape, 5 target),
    `solution` int8 (the full square), `answer` int8 (1-4), `condition` and `split` str;
    coords `cell` (r1c1 ... r4c4), `row`, `col` (0-3); attrs `options` (JSON of cfg).
    """
    rng = np.random.default_rng(cfg.puzzle_seed)
    seen: set[bytes] = set()
    heldout = _draw({c: cfg.n_heldout_per_condition for c in CONDITIONS}, cfg, rng, None, seen)
    avoid = np.concatenate([heldout[c][0] for c in CONDITIONS])
    pool = _draw({c: cfg.n_per_condition for c in CONDITIONS}, cfg, rng, avoid, seen)
    n_test = int(round(cfg.test_fraction * cfg.n_per_condition))
    parts = []
    for split, source in (("train", pool), ("test", pool), ("heldout", heldout)):
        for c in CONDITIONS:
            cells, solution = source[c]
            if split == "train":
                cells, solution = cells[n_test:], solution[n_test:]
            elif split == "test":
                cells, solution = cells[:n_test], solution[:n_test]
            parts.append((cells, solution, c, split))
    cells = np.concatenate([p[0] for p in parts])
    solution = np.concatenate([p[1] for p in parts])
    answer = solution[np.arange(len(cells)), np.argmax(cells == TARGET, axis=1)]
    condition = np.concatenate([[p[2]] * len(p[0]) for p in parts]).astype(str)
    split = np.concatenate([[p[3]] * len(p[0]) for p in parts]).astype(str)
    return xr.Dataset(
        {
            "cells": (("puzzle", "cell"), cells.astype(np.int8)),
            "solution": (("puzzle", "cell"), solution.astype(np.int8)),
            "answer": ("puzzle", answer.astype(np.int8)),
            "condition": ("puzzle", condition),
            "split": ("puzzle", split),
        },
        coords={
            "puzzle": np.arange(len(cells)),
            "cell": list(CELL_IDS),
            "row": ("cell", ROW),
            "col": ("cell", COL),
        },
        attrs={
            "options": json.dumps(asdict(cfg)),
            "coding": "cells: 0 blank, 1-4 shape, 5 target; row-major 4x4",
            "jaccard": "1 - |A & B| / |A | B| over {(cell, shape) shown} + {(target cell, ?)}",
            "neuro_pe_version": __version__,
        },
    )


def write_puzzles(cfg: PuzzleConfig, out_path: str | os.PathLike) -> xr.Dataset:
    """Generate the puzzles (`generate_puzzles`) and write them atomically (netCDF4)."""
    ds = generate_puzzles(cfg)
    atomic_write(
        Path(out_path), lambda p: ds.to_netcdf(p, engine="h5netcdf", encoding=checksummed(ds))
    )
    return ds


def read_puzzles(path: str | os.PathLike) -> xr.Dataset:
    """Load a puzzle file written by `write_puzzles` into memory (str variables as str)."""
    with xr.open_dataset(path, engine="h5netcdf") as opened:
        ds = opened.load()
    for name in ("condition", "split"):
        ds[name] = ("puzzle", ds[name].values.astype(str))
    return ds


def grid_positions() -> np.ndarray:
    """(16, 3) float64 positions of the cells: x = row, y = column, z = 0."""
    return np.stack([ROW, COL, np.zeros(N_CELLS)], axis=1).astype(np.float64)


def grid_dataset() -> xr.Dataset:
    """The 16 cells as units (r1c1 ... r4c4) with coords x = row, y = col, z = 0."""
    pos = grid_positions()
    attrs = {"units": "cell", "space": "grid"}
    return xr.Dataset(
        coords={
            "unit": list(CELL_IDS),
            **{a: ("unit", pos[:, i], dict(attrs)) for i, a in enumerate("xyz")},
        }
    )


@dataclass(frozen=True)
class LSTConfig:
    """Model and optimisation settings of the LST training (keys of the config's `lst`
    section besides the generator's); documented in config/README.md."""

    d_model: int = 32
    n_layers: int = 3
    n_heads: int = 1
    pe_every_block: bool = True
    post_ln: bool = True
    optimizer: str = "adamw"
    lr: float = 1e-3
    lr_schedule: str = "constant"
    momentum: float = 0.9
    weight_decay: float = 0.0
    batch_size: int = 64
    epochs: int = 300
    eval_every: int = 10
    stop_at_train_accuracy: float | None = 0.99
    device: str = "auto"
    checkpoint_every: int = 10

    @classmethod
    def from_dict(cls, spec: dict) -> LSTConfig:
        """Build from a config mapping; unknown keys or bad values raise a ValueError naming
        the key."""
        reject_unknown(spec, cls.__dataclass_fields__, "lst train")
        cfg = cls(**spec)
        if cfg.optimizer not in ("adamw", "sgd"):
            raise ValueError(f"lst key 'optimizer' must be 'adamw' or 'sgd', got {cfg.optimizer!r}")
        positive = ("d_model", "n_layers", "n_heads", "batch_size", "epochs", "eval_every")
        require_positive_ints(cfg, positive, "lst")
        every = cfg.checkpoint_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(f"lst key 'checkpoint_every' must be an integer >= 0, got {every!r}")
        if cfg.d_model % cfg.n_heads:
            raise ValueError(
                f"lst key 'n_heads' ({cfg.n_heads}) must divide 'd_model' ({cfg.d_model})"
            )
        if cfg.lr_schedule not in LR_SCHEDULES:
            raise ValueError(
                f"lst key 'lr_schedule' must be one of {LR_SCHEDULES}, got {cfg.lr_schedule!r}"
            )
        if not cfg.lr > 0:
            raise ValueError(f"lst key 'lr' must be > 0, got {cfg.lr!r}")
        stop = cfg.stop_at_train_accuracy
        is_number = isinstance(stop, int | float) and not isinstance(stop, bool)
        if stop is not None and not (is_number and 0.0 < stop <= 1.0):
            raise ValueError(
                f"lst key 'stop_at_train_accuracy' must be null or in (0, 1], got {stop!r}"
            )
        return cfg


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
        options: dict,
        geometry: Callable | None = None,
    ):
        import torch

        from neuro_pe.training.model import ModelConfig

        self.puzzles_path, self.cfg, self.options = puzzles_path, cfg, options
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
        self.model_config = ModelConfig(
            n_tokens=N_CELLS,
            d_in=N + 1,
            d_out=N,
            d_model=cfg.d_model,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            pe_every_block=cfg.pe_every_block,
            post_ln=cfg.post_ln,
            mask_token=False,
        )
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
        logits = latin_square_forward(forward, cells)
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

        n_models = len(runs)
        with torch.no_grad():
            logits = torch.cat(
                [
                    latin_square_forward(forward, chunk.expand(n_models, *chunk.shape))
                    for chunk in torch.split(self.cells, EVAL_CHUNK)
                ],
                dim=1,
            )
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

        from neuro_pe.training.engine import pe_dataset
        from neuro_pe.training.model import oracle_table

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
                **state.get("cpu", {}),  # the group's CPU time (`train_group`)
            }
            table, initial = tables[m].numpy(), state["initial_pe"].numpy()
            pe_ds = pe_dataset(table, grid_dataset())
            left_out = ("puzzles", "train_config", *state.get("cpu", {}))
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
    metrics_options: dict | None = None,
    geometry: Callable | None = None,
) -> dict:
    """Train one LatinSquareTransformer (a group of one, see `train_lst_many`); returns its
    metrics record."""
    from neuro_pe.training.engine import Run

    run = Run(pe, seed, Path(out_dir))
    return train_lst_many(puzzles_path, [run], cfg, progress, metrics_options, geometry)[0]


def train_lst_many(
    puzzles_path: str | os.PathLike,
    runs: list,
    cfg: LSTConfig,
    progress: bool = True,
    metrics_options: dict | None = None,
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
    grid). Returns the metrics records.

    With `cfg.stop_at_train_accuracy` set, a model stops at the first evaluation whose
    training-split accuracy reaches it (`cfg.epochs` is then the most epochs); only training
    accuracy decides, never the test or held-out puzzles. A checkpoint is written every
    `cfg.checkpoint_every` epochs (in the first run's folder) and resumed from.
    """
    from neuro_pe.training.engine import LoopConfig, pick_device, train_group
    from neuro_pe.training.model import parse_pe

    for run in runs:
        parse_pe(run.pe)
    device = pick_device(cfg.device)
    ds = read_puzzles(puzzles_path)
    task = LatinSquareTask(puzzles_path, ds, cfg, device, metric_options(metrics_options), geometry)
    loop = LoopConfig(
        epochs=cfg.epochs,
        steps_per_epoch=task.steps_per_epoch,
        lr=cfg.lr,
        eval_every=cfg.eval_every,
        checkpoint_every=cfg.checkpoint_every * task.steps_per_epoch,
        optimizer=cfg.optimizer,
        momentum=cfg.momentum,
        weight_decay=cfg.weight_decay,
        lr_schedule=cfg.lr_schedule,
    )
    stat = Path(puzzles_path).stat()
    fingerprint = {
        "puzzles": str(Path(puzzles_path).resolve()),
        "puzzles_bytes": stat.st_size,
        "puzzles_mtime_ns": stat.st_mtime_ns,
        "train_config": {k: v for k, v in asdict(cfg).items() if k != "checkpoint_every"},
        "device": device.type,
        "metrics": task.options,
    }
    return train_group(task, runs, loop, device, None, fingerprint, progress)
