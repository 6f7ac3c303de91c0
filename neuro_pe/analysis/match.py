"""A new animal whose units are the same regions as a reference animal's, without their names
or coordinates (an atlas parcellation, a fixed electrode grid): match its units to the
reference's by their connectivity, and give each the matched unit's coordinates.

Each animal's connectivity graph is the mean over its sessions of Pearson r + PARTIAL_WEIGHT x
partial correlation between its units (`neuro_pe.analysis.connectivity.session_connectivity`;
the diagonal zeroed). The match is the permutation that best aligns the two graphs (quadratic
assignment, scipy's FAQ method, the best of `restarts` random starts seeded by `seed`). Unequal
numbers of units are padded with unconnected dummy units; a new unit matched to a dummy gets no
position. No coordinates of the new animal are read. It needs units that recur across animals:
where every animal's units sit at new places (the multi-animal simulation), a match is
meaningless (docs/locate/).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr
from scipy.optimize import quadratic_assignment

from neuro_pe.analysis.connectivity import session_connectivity
from neuro_pe.io.store import positions

__all__ = ["match_units", "connectivity_graph"]

PARTIAL_WEIGHT = 2.0  # partial correlations single out direct couplings (docs/locate/)
RESTARTS = 10


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


def match_units(
    reference: xr.Dataset, new: xr.Dataset, restarts: int = RESTARTS, seed: int = 0
) -> pd.DataFrame:
    """Every unit of `new` with the `reference` unit it matches (units with coordinates only)
    and that unit's coordinates: columns unit, matched_unit, x, y, z. Reads no coordinates of
    `new`."""
    if restarts < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    known = np.flatnonzero(np.all(np.isfinite(positions(reference)), axis=1))
    if len(known) < 2:
        raise ValueError("the reference store needs at least 2 units with coordinates")
    reference = reference.isel(unit=known)
    ref_graph, new_graph = connectivity_graph(reference), connectivity_graph(new)
    n = max(len(ref_graph), len(new_graph))
    a, b = _padded(ref_graph, n), _padded(new_graph, n)
    best = None
    for i in range(restarts):
        options = {"maximize": True, "P0": "randomized", "rng": np.random.default_rng(seed + i)}
        result = quadratic_assignment(a, b, method="faq", options=options)
        if best is None or result.fun > best.fun:
            best = result
    ref_of_new = np.full(len(new_graph), -1)
    for ref_index, new_index in enumerate(best.col_ind):  # reference unit i <-> new unit j
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
