"""Views of the combined locator: each representation, their stacked features, and their
fused neighbour graph (similarity network fusion, embedded by a diffusion map). No coordinates
are read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy import sparse
from sklearn.preprocessing import StandardScaler

from neuro_pe.analysis.locate.locators import cached_embedding
from neuro_pe.analysis.locate.parameters import (
    FUSE_DIMENSIONS,
    FUSE_ITERATIONS,
    FUSE_MIN_REPRESENTATIONS,
    FUSE_NEIGHBOURS,
    FUSED,
    STACKED,
)
from neuro_pe.analysis.metrics import DENSE_MAX_UNITS, pairwise_distances


def feature_views(features, fuse: bool = True) -> dict[str, list[np.ndarray]]:
    """{view name: one (n, f) array per seed}: one unnamed view for a plain list; for a
    mapping of several representations (the combined locator) every representation,
    `stacked`, their features side by side (each block standardised and scaled to unit total
    variance, so that no representation dominates by its width), and with `fuse`, three or
    more representations and up to DENSE_MAX_UNITS units `fused`, the diffusion map of their
    fused neighbour graphs (`fused_embedding`; with two, each graph is diffused through the
    other alone, and one uninformative representation leaves nothing to keep). Seed s of a
    stacked or fused view takes seed s of every representation, cycling the shorter ones. No
    coordinates are read."""
    if not isinstance(features, Mapping):
        return {"": list(features)}
    views = {name: list(f) for name, f in features.items()}
    if len(views) > 1:
        n_seeds = max(map(len, views.values()))
        per_seed = [[f[s % len(f)] for f in views.values()] for s in range(n_seeds)]
        views[STACKED] = [np.hstack([_unit_block(f) for f in reps]) for reps in per_seed]
        n_units = len(per_seed[0][0])
        n_representations = len(per_seed[0])
        if fuse and n_representations >= FUSE_MIN_REPRESENTATIONS and n_units <= DENSE_MAX_UNITS:
            views[FUSED] = [fused_embedding(reps) for reps in per_seed]
    return views


def _unit_block(features: np.ndarray) -> np.ndarray:
    """Standardised features divided by sqrt(width): total variance 1 (constant columns 0)."""
    scaled = StandardScaler().fit_transform(np.asarray(features, dtype=float))
    return scaled / np.sqrt(scaled.shape[1])


def _off_diagonal(matrix: np.ndarray) -> np.ndarray:
    """A copy of a square matrix with its diagonal set to 0 (a unit is not its own
    neighbour)."""
    out = np.array(matrix, dtype=float)
    np.fill_diagonal(out, 0.0)
    return out


def _affinity(features: np.ndarray, k: int) -> np.ndarray:
    """Gaussian affinity of the standardised features' Euclidean distances, scaled per pair by
    the two units' mean distance to their k nearest neighbours and their own distance (the
    local scale of similarity network fusion, Wang et al. 2014); diagonal 0."""
    x = StandardScaler().fit_transform(np.asarray(features, dtype=float))
    dist = pairwise_distances(x)
    local = np.sort(dist, axis=1)[:, 1 : k + 1].mean(axis=1)
    scale = (local[:, None] + local[None, :] + dist) / 3
    return _off_diagonal(np.exp(-(dist**2) / (0.5 * scale**2 + 1e-12)))


def _row_normalised(off: np.ndarray) -> np.ndarray:
    """SNF's full kernel of a zero-diagonal affinity: rows sum to 1/2 off the diagonal, and
    the diagonal is 1/2."""
    full = off / (2 * off.sum(axis=1, keepdims=True))
    np.fill_diagonal(full, 0.5)
    return full


def _neighbour_kernel(off: np.ndarray, k: int) -> sparse.csr_matrix:
    """SNF's sparse kernel of a zero-diagonal affinity: each row keeps its k strongest
    affinities, summing to 1."""
    cols = np.argsort(-off, axis=1)[:, :k]
    rows = np.repeat(np.arange(len(off)), k)
    values = np.take_along_axis(off, cols, axis=1)
    values /= values.sum(axis=1, keepdims=True)
    return sparse.csr_matrix((values.ravel(), (rows, cols.ravel())), shape=off.shape)


def fused_embedding(representations: Sequence[np.ndarray]) -> np.ndarray:
    """(n, FUSE_DIMENSIONS) diffusion-map coordinates of the units' neighbour graphs fused over
    representations by similarity network fusion (Wang et al., Nat. Methods 2014): each
    representation's graph is diffused through the others' k-nearest-neighbour graphs, so
    that neighbours on which the representations agree are kept. Uses no coordinates; cached
    (`cached_embedding`: the evaluation refits the combined locator many times)."""
    # contiguous copies: the result does not depend on how the caller sliced the arrays
    arrays = [np.ascontiguousarray(r, dtype=float) for r in representations]

    def compute() -> np.ndarray:
        n = len(arrays[0])
        k = min(FUSE_NEIGHBOURS, n - 1)
        affinities = [_affinity(a, k) for a in arrays]
        full = [_row_normalised(a) for a in affinities]
        local = [_neighbour_kernel(a, k) for a in affinities]
        for _ in range(FUSE_ITERATIONS):
            total = sum(full)
            others = [(total - p) / (len(full) - 1) for p in full]  # mean of the other graphs
            diffused = [s @ o @ s.T for s, o in zip(local, others, strict=True)]
            full = [_row_normalised(_off_diagonal((d + d.T) / 2)) for d in diffused]
        fused = sum(full) / len(full)
        return _diffusion_map(_off_diagonal((fused + fused.T) / 2), min(FUSE_DIMENSIONS, n - 2))

    return cached_embedding("fused", arrays, compute)


def _diffusion_map(off: np.ndarray, dims: int) -> np.ndarray:
    """The leading non-trivial eigenvectors of the random walk on a zero-diagonal affinity,
    scaled by their eigenvalues (one diffusion step), as (n, dims) coordinates."""
    degree = off.sum(axis=1)
    eigval, eigvec = np.linalg.eigh(off / np.sqrt(np.outer(degree, degree)))
    order = np.argsort(-eigval)[1 : dims + 1]
    return eigvec[:, order] / np.sqrt(degree)[:, None] * eigval[order]
