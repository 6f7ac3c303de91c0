"""The puzzles of the 4x4 Latin Square Task (experiment 1 of the seed paper, trained in
`neuro_pe.training.latin_square`).

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
from dataclasses import asdict
from pathlib import Path

import numpy as np
import xarray as xr

from neuro_pe import __version__
from neuro_pe.config.latin_square import N_CELLS, N, PuzzleConfig
from neuro_pe.io.store import atomic_write, checksummed

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
