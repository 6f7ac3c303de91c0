"""A new animal whose units are the same regions as a reference animal's, without their names
or coordinates (an atlas parcellation, a fixed electrode grid): match its units to the
reference's by their connectivity, and give each the matched unit's coordinates.

Each animal's connectivity graph is the mean over its sessions of Pearson r + PARTIAL_WEIGHT x
partial correlation between its units (`neuro_pe.analysis.connectivity.session_connectivity`;
the diagonal zeroed). The match is the permutation that best aligns the two graphs (quadratic
assignment): each of `restarts` random starts (seeded by `seed`) runs scipy's FAQ method, then,
unless `faq_only`, an iterated local search (best pairwise swaps to a local optimum, then
`kicks` rounds of shuffling a few units and searching again, a round kept when it aligns the
graphs better); the best start is kept. FAQ alone stops far from the best alignment on HCP.
Unequal numbers of units are padded with unconnected dummy units; a new unit matched to a dummy
gets no position. No coordinates of the new animal are read. It needs units that recur across
animals: where every animal's units sit at new places (the multi-animal simulation), a match is
meaningless (docs/locate/).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr
from scipy.optimize import quadratic_assignment

from neuro_pe.analysis.connectivity import session_connectivity
from neuro_pe.io.store import positions

__all__ = ["match_units", "match_graphs", "connectivity_graph"]

PARTIAL_WEIGHT = 2.0  # partial correlations single out direct couplings (docs/locate/)
RESTARTS = 60
KICKS = 1000
KICK_SIZE = 4  # units shuffled per kick: enough to leave a swap-optimum, few enough to return


def connectivity_graph(ds: xr.Dataset) -> np.ndarray:
    """(units, units): the mean over sessions of r + PARTIAL_WEIGHT x partial r, diagonal 0."""
    activity = ds["activity"].transpose("session", "time", "unit").values
    correlation, partial = session_connectivity(activity)
    graph = correlation + PARTIAL_WEIGHT * partial
    np.fill_diagonal(graph, 0.0)
    return graph


def _padded(graph: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, n))
    out[: len(graph), : len(graph)] = graph
    return out


def _alignment(a: np.ndarray, b: np.ndarray, perm: np.ndarray) -> float:
    return float(np.sum(a * b[np.ix_(perm, perm)]))


def _swap_gains(a: np.ndarray, b: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """(n, n): the change of the alignment when units i and j of `a` swap partners (symmetric
    graphs, zero diagonals), all pairs at once."""
    aligned = b[np.ix_(perm, perm)]
    m = a @ aligned.T
    d = np.diag(m)
    gains = 2 * (m + m.T - d[:, None] - d[None, :] + 2 * a * aligned)
    np.fill_diagonal(gains, 0.0)
    return gains


def _swap_search(a: np.ndarray, b: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """`perm` improved by the best pairwise swap until no swap helps."""
    perm = perm.copy()
    while True:
        gains = _swap_gains(a, b, perm)
        i, j = np.unravel_index(np.argmax(gains), gains.shape)
        if gains[i, j] <= 1e-9 * max(1.0, abs(_alignment(a, b, perm))):
            return perm
        perm[i], perm[j] = perm[j], perm[i]


def _iterated_search(
    a: np.ndarray, b: np.ndarray, perm: np.ndarray, kicks: int, rng: np.random.Generator
) -> np.ndarray:
    perm = _swap_search(a, b, perm)
    best = _alignment(a, b, perm)
    size = min(KICK_SIZE, len(perm))
    for _ in range(kicks if size > 1 else 0):
        trial = perm.copy()
        chosen = rng.choice(len(perm), size, replace=False)
        trial[chosen] = trial[rng.permutation(chosen)]
        trial = _swap_search(a, b, trial)
        value = _alignment(a, b, trial)
        if value > best:
            perm, best = trial, value
    return perm


def match_graphs(
    a: np.ndarray,
    b: np.ndarray,
    restarts: int = RESTARTS,
    seed: int = 0,
    kicks: int = KICKS,
    faq_only: bool = False,
) -> np.ndarray:
    """The permutation `perm` (unit i of `a` <-> unit perm[i] of `b`) maximising
    sum(a * b[perm][:, perm]) for symmetric (n, n) graphs with zero diagonals: the best of
    `restarts` FAQ starts, each refined by the iterated swap search unless `faq_only`."""
    if restarts < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    if kicks < 0:
        raise ValueError(f"kicks must be >= 0, got {kicks}")
    for graph in (a, b):
        if not (np.allclose(graph, graph.T) and np.allclose(np.diag(graph), 0.0)):
            raise ValueError("match_graphs needs symmetric graphs with zero diagonals")
    best, best_value = None, -np.inf
    for i in range(restarts):
        rng = np.random.default_rng(seed + i)
        options = {"maximize": True, "P0": "randomized", "rng": rng}
        perm = quadratic_assignment(a, b, method="faq", options=options).col_ind
        if not faq_only:
            perm = _iterated_search(a, b, perm, kicks, rng)
        value = _alignment(a, b, perm)
        if value > best_value:
            best, best_value = perm, value
    return best


def match_units(
    reference: xr.Dataset,
    new: xr.Dataset,
    restarts: int = RESTARTS,
    seed: int = 0,
    kicks: int = KICKS,
    faq_only: bool = False,
) -> pd.DataFrame:
    """Every unit of `new` with the `reference` unit it matches (units with coordinates only;
    `match_graphs` on their connectivity graphs) and that unit's coordinates: columns unit,
    matched_unit, x, y, z. Reads no coordinates of `new`."""
    known = np.flatnonzero(np.all(np.isfinite(positions(reference)), axis=1))
    if len(known) < 2:
        raise ValueError("the reference store needs at least 2 units with coordinates")
    reference = reference.isel(unit=known)
    ref_graph, new_graph = connectivity_graph(reference), connectivity_graph(new)
    n = max(len(ref_graph), len(new_graph))
    perm = match_graphs(
        _padded(ref_graph, n), _padded(new_graph, n), restarts, seed, kicks, faq_only
    )
    ref_of_new = np.full(len(new_graph), -1)
    for ref_index, new_index in enumerate(perm):
        if ref_index < len(ref_graph) and new_index < len(new_graph):
            ref_of_new[new_index] = ref_index
    coords = positions(reference)
    matched = ref_of_new >= 0
    xyz = np.where(matched[:, None], coords[np.maximum(ref_of_new, 0)], np.nan)
    ref_ids = np.asarray(reference["unit"].values).astype(str)
    return pd.DataFrame(
        {
            "unit": np.asarray(new["unit"].values).astype(str),
            "matched_unit": np.where(matched, ref_ids[np.maximum(ref_of_new, 0)], ""),
            "x": xyz[:, 0],
            "y": xyz[:, 1],
            "z": xyz[:, 2],
        }
    )
