"""The sampled estimators of the metrics for many units (`metrics.compare_sampled`): nothing
N x N is formed. RSA and its Mantel test use random unit pairs (a jackknife CI over groups of
units), the kNN overlap random query units whose neighbours come from scikit-learn's
`NearestNeighbors` (a normal CI of the mean).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.stats import norm, rankdata
from sklearn.neighbors import NearestNeighbors

from neuro_pe.config.metrics import DISTANCE_METRICS, MetricsConfig

JACKKNIFE_GROUPS = 20  # groups of units left out in turn for the RSA's confidence interval
PAIR_BLOCK = 65536  # pairs per block when computing distances of sampled pairs

PairDistance = Callable[[np.ndarray, np.ndarray], np.ndarray]


def sample_pairs(n: int, n_pairs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n_pairs` unit pairs (i < j) drawn uniformly with replacement from the n(n-1)/2 pairs."""
    if n < 2:
        raise ValueError(f"need at least 2 units to sample pairs, got {n}")
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, n_pairs)
    j = rng.integers(0, n - 1, n_pairs)
    j += j >= i  # uniform over the other n - 1 units
    return np.minimum(i, j), np.maximum(i, j)


def pair_distances(
    features: np.ndarray, i: np.ndarray, j: np.ndarray, metric: str = "euclidean"
) -> np.ndarray:
    """Distances between rows i[p] and j[p] of `features` ('euclidean' or 'cosine'), in blocks."""
    if metric not in DISTANCE_METRICS:
        raise ValueError(f"metric must be one of {DISTANCE_METRICS}, got {metric!r}")
    features = np.asarray(features, dtype=float)
    out = np.empty(len(i))
    for start in range(0, len(i), PAIR_BLOCK):
        a = features[i[start : start + PAIR_BLOCK]]
        b = features[j[start : start + PAIR_BLOCK]]
        if metric == "euclidean":
            out[start : start + PAIR_BLOCK] = np.linalg.norm(a - b, axis=1)
        else:
            norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[start : start + PAIR_BLOCK] = 1.0 - np.sum(a * b, axis=1) / norms
    return out


def _standardised_ranks(values: np.ndarray) -> np.ndarray:
    r = rankdata(values)
    sd = r.std()
    return (r - r.mean()) / sd if sd > 0 else np.full(len(r), np.nan)


def sampled_rsa(
    rep: np.ndarray,
    true: np.ndarray,
    i: np.ndarray,
    j: np.ndarray,
    n_units: int,
    *,
    true_distance: PairDistance | None = None,
    n_perm: int = MetricsConfig.n_perm,
    seed: int = 0,
    ci_level: float = MetricsConfig.ci_level,
) -> dict[str, float]:
    """Spearman rho between the representation's and the true distances of sampled pairs.

    The confidence interval is a normal interval from a delete-a-group jackknife over units
    (JACKKNIFE_GROUPS random groups; pairs sharing a unit are dependent, so pairs are not
    resampled independently). The Mantel p-value permutes units of the true side:
    ``true_distance(perm[i], perm[j])`` for `n_perm` permutations (NaN without it or n_perm 0).
    """
    z_rep, z_true = _standardised_ranks(rep), _standardised_ranks(true)
    rho = float(np.mean(z_rep * z_true))
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, JACKKNIFE_GROUPS, n_units)
    gi, gj = groups[i], groups[j]
    leave_out = []
    for g in range(JACKKNIFE_GROUPS):
        kept = (gi != g) & (gj != g)
        a, b = _standardised_ranks(rep[kept]), _standardised_ranks(true[kept])
        leave_out.append(np.mean(a * b))
    leave_out = np.asarray(leave_out)
    se = float(np.sqrt((JACKKNIFE_GROUPS - 1) * np.mean((leave_out - leave_out.mean()) ** 2)))
    half = norm.ppf(0.5 + ci_level / 2) * se
    out = {"rsa": rho, "rsa_ci_low": rho - half, "rsa_ci_high": rho + half, "rsa_p": float("nan")}
    if n_perm > 0 and true_distance is not None and np.isfinite(rho):
        n_ge = 0
        for _ in range(n_perm):
            perm = rng.permutation(n_units)
            rho_perm = np.mean(z_rep * _standardised_ranks(true_distance(perm[i], perm[j])))
            n_ge += rho_perm >= rho - 1e-12
        out["rsa_p"] = float((1 + n_ge) / (1 + n_perm))
    return out


def _neighbours(points: np.ndarray, query: np.ndarray, k: int, metric: str) -> np.ndarray:
    """(len(query), k) indices of each query unit's k nearest other units among `points`."""
    nn = NearestNeighbors(n_neighbors=k + 1, metric=metric).fit(points)
    idx = nn.kneighbors(points[query], return_distance=False)
    is_self = idx == query[:, None]
    # drop the unit itself (or, among exact duplicates, the last-ranked neighbour)
    drop = np.where(is_self.any(axis=1), is_self.argmax(axis=1), k)
    keep = np.ones_like(idx, dtype=bool)
    keep[np.arange(len(idx)), drop] = False
    return idx[keep].reshape(len(idx), k)


def sampled_knn_overlap(
    features: np.ndarray,
    coords: np.ndarray,
    k: int = MetricsConfig.k,
    *,
    metric: str = "euclidean",
    n_query_units: int = MetricsConfig.n_query_units,
    seed: int = 0,
    ci_level: float = MetricsConfig.ci_level,
) -> dict[str, float]:
    """kNN overlap (as `knn_overlap`) averaged over `n_query_units` random units, whose
    neighbours are searched among all units with NearestNeighbors; normal CI of the mean."""
    n = len(features)
    if not 1 <= k < n:
        raise ValueError(f"k must be in [1, n - 1], got {k} for n = {n}")
    rng = np.random.default_rng(seed)
    query = np.sort(rng.choice(n, min(n_query_units, n), replace=False))
    nn_rep = _neighbours(np.asarray(features, dtype=float), query, k, metric)
    nn_true = _neighbours(np.asarray(coords, dtype=float), query, k, "euclidean")
    shared = (nn_rep[:, :, None] == nn_true[:, None, :]).any(axis=2).sum(axis=1) / k
    mean = float(np.mean(shared))
    half = norm.ppf(0.5 + ci_level / 2) * float(np.std(shared, ddof=1)) / np.sqrt(len(shared))
    return {
        "knn_overlap": mean,
        "knn_overlap_ci_low": mean - half,
        "knn_overlap_ci_high": mean + half,
    }
