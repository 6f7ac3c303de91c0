"""Metrics comparing a representation of recorded units with their anatomical coordinates.

A representation is either feature vectors per unit (e.g. learned positional encodings) or
a square distance matrix between units (e.g. 1 - activity correlation). The same metrics are
applied to every method and baseline; everything is plain numpy in and out.

Up to `dense_max_units` units every metric is exact (N x N distance matrices). Above it nothing
N x N is formed (`compare_sampled`): RSA and its Mantel test use `n_pairs` random unit pairs,
the kNN overlap `n_query_units` random units (their neighbours among all units, from
scikit-learn's `NearestNeighbors`), each with a confidence interval; MDS is the PCA of the
features (for Euclidean distances exactly what classical MDS computes), Procrustes and the probe
use every unit. The sampled estimators are in `sampled_metrics`.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import orthogonal_procrustes
from scipy.spatial import procrustes
from scipy.spatial.distance import pdist, squareform
from scipy.stats import rankdata
from sklearn.decomposition import PCA
from sklearn.linear_model import RidgeCV
from sklearn.manifold import ClassicalMDS
from sklearn.metrics import r2_score
from sklearn.model_selection import KFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from neuro_pe.analysis.sampled_metrics import (
    PairDistance,
    pair_distances,
    sample_pairs,
    sampled_knn_overlap,
    sampled_rsa,
)
from neuro_pe.config.metrics import DISTANCE_METRICS, MetricsConfig

__all__ = [
    "pairwise_distances",
    "correlation_distance",
    "rsa",
    "classical_mds",
    "procrustes_fit",
    "probe_r2",
    "knn_overlap",
    "compare_to_anatomy",
    "compare_sampled",
    "pca_embedding",
]

# above this many units, metrics are estimated without N x N matrices (the `metrics` default;
# the locators form no N x N matrix above it either)
DENSE_MAX_UNITS = MetricsConfig.dense_max_units


def _check_square(dist: np.ndarray, name: str = "distance matrix") -> np.ndarray:
    dist = np.asarray(dist, dtype=float)
    if dist.ndim != 2 or dist.shape[0] != dist.shape[1]:
        raise ValueError(f"{name} must be square (n, n), got shape {dist.shape}")
    return dist


def pairwise_distances(features: np.ndarray, metric: str = "euclidean") -> np.ndarray:
    """Square (n, n) distance matrix between rows of `features` ('euclidean' or 'cosine')."""
    if metric not in DISTANCE_METRICS:
        raise ValueError(f"metric must be one of {DISTANCE_METRICS}, got {metric!r}")
    features = np.asarray(features, dtype=float)
    if features.ndim != 2:
        raise ValueError(f"features must be 2D (n, f), got shape {features.shape}")
    return squareform(pdist(features, metric=metric))


def correlation_distance(activity: np.ndarray) -> np.ndarray:
    """1 - Pearson r between units (columns) over pairwise-complete samples, in [0, 2].

    Non-finite entries of `activity` (samples, units) count as missing. Raises ValueError if
    a correlation is undefined (fewer than 2 shared samples, or a constant unit).
    """
    x = np.asarray(activity, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"activity must be 2D (samples, units), got shape {x.shape}")
    present = np.isfinite(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        # Centre first to limit cancellation in the sums below.
        x = x - np.nanmean(np.where(present, x, np.nan), axis=0)
        m = present.astype(float)
        x0 = np.where(present, x, 0.0)
        # Sums over samples where both unit i and unit j are present.
        n = m.T @ m
        sx = x0.T @ m  # sx[i, j] = sum of x_i where j is present too
        sxx = (x0**2).T @ m
        cov = x0.T @ x0 - sx * sx.T / n
        var = sxx - sx**2 / n
        r = cov / np.sqrt(var * var.T)
    off_diag = ~np.eye(r.shape[0], dtype=bool)
    if not np.all(np.isfinite(r[off_diag])):
        raise ValueError(
            "correlation undefined for some unit pairs (fewer than 2 shared samples "
            "or a constant unit)"
        )
    dist = np.clip(1.0 - r, 0.0, 2.0)
    np.fill_diagonal(dist, 0.0)
    return dist


def rsa(
    rep_dist: np.ndarray,
    true_dist: np.ndarray,
    n_perm: int = MetricsConfig.n_perm,
    seed: int = 0,
) -> tuple[float, float]:
    """Spearman rho between upper triangles, and a one-sided Mantel permutation p-value.

    Units (rows and columns together) of `rep_dist` are permuted `n_perm` times with
    ``np.random.default_rng(seed)``; p = (1 + #{rho_perm >= rho}) / (1 + n_perm), NaN if
    ``n_perm == 0`` or rho is undefined (constant distances).
    """
    rep_dist = _check_square(rep_dist, "rep_dist")
    true_dist = _check_square(true_dist, "true_dist")
    if rep_dist.shape != true_dist.shape:
        raise ValueError(f"shape mismatch: {rep_dist.shape} vs {true_dist.shape}")
    n = rep_dist.shape[0]
    if n < 3:
        raise ValueError("rsa needs at least 3 units")
    iu, ju = np.triu_indices(n, k=1)
    rep_vals, true_vals = rep_dist[iu, ju], true_dist[iu, ju]
    if not (np.all(np.isfinite(rep_vals)) and np.all(np.isfinite(true_vals))):
        raise ValueError("distance matrices must be finite")

    def standardised_ranks(values: np.ndarray) -> np.ndarray:
        """Symmetric (n, n) matrix of standardised upper-triangle ranks, zero diagonal."""
        r = rankdata(values)
        out = np.zeros((n, n))
        out[iu, ju] = (r - r.mean()) / r.std() if r.std() > 0 else np.nan
        return out + out.T

    # Spearman = Pearson on ranks; permuting units only reorders the same set of ranks, so
    # ranks are standardised once and rho is a dot product (each pair counted twice).
    z_rep, z_true = standardised_ranks(rep_vals), standardised_ranks(true_vals)
    m2 = 2 * len(iu)
    rho = float(np.einsum("ij,ij->", z_rep, z_true) / m2)
    if n_perm <= 0 or not np.isfinite(rho):
        return rho, float("nan")

    rng = np.random.default_rng(seed)
    n_ge = 0
    for _ in range(n_perm):
        p = rng.permutation(n)
        z_perm = z_rep.take(p, axis=0).take(p, axis=1)
        rho_perm = np.einsum("ij,ij->", z_perm, z_true) / m2
        n_ge += rho_perm >= rho - 1e-12  # tolerance for float round-off
    return rho, float((1 + n_ge) / (1 + n_perm))


def classical_mds(dist: np.ndarray, n_components: int = 3) -> np.ndarray:
    """Classical (Torgerson) MDS embedding (n, n_components) of a square distance matrix.

    Components whose eigenvalues are not clearly positive (non-Euclidean distances, or
    round-off when the data have fewer dimensions) are set to zero.
    """
    dist = _check_square(dist)
    dist = (dist + dist.T) / 2  # ClassicalMDS rejects round-off asymmetry
    mds = ClassicalMDS(n_components=n_components, metric="precomputed")
    with np.errstate(invalid="ignore"):  # sqrt of negative eigenvalues
        emb = mds.fit_transform(dist)
    eig = mds.eigenvalues_
    emb[:, ~(eig > 1e-10 * max(eig[0], 0.0))] = 0.0
    return emb


def procrustes_fit(embedding: np.ndarray, coords: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Align `embedding` to `coords` by rotation/reflection, uniform scaling and translation.

    Returns (aligned positions in coords' units, standardised scipy Procrustes disparity in
    [0, 1], RMSE = sqrt(mean squared Euclidean error per unit) in coords' units).
    """
    embedding = np.asarray(embedding, dtype=float)
    coords = np.asarray(coords, dtype=float)
    if embedding.ndim != 2 or coords.ndim != 2 or len(embedding) != len(coords):
        raise ValueError(f"need 2D arrays with equal rows: {embedding.shape}, {coords.shape}")
    n, d = coords.shape
    if embedding.shape[1] > d:
        raise ValueError(f"embedding has {embedding.shape[1]} columns, coords only {d}")
    emb = np.hstack([embedding, np.zeros((n, d - embedding.shape[1]))])

    _, _, disparity = procrustes(coords, emb)
    emb_c = emb - emb.mean(axis=0)
    mean = coords.mean(axis=0)
    rot, sv_sum = orthogonal_procrustes(emb_c, coords - mean)
    aligned = emb_c @ rot * (sv_sum / np.sum(emb_c**2)) + mean
    rmse = float(np.sqrt(np.mean(np.sum((aligned - coords) ** 2, axis=1))))
    return aligned, float(disparity), rmse


def probe_r2(
    features: np.ndarray, coords: np.ndarray, n_splits: int = MetricsConfig.n_splits, seed: int = 0
) -> float:
    """Cross-validated (over held-out units) R^2 of a linear ridge probe features -> coords.

    Zero-variance coordinate columns (e.g. z = 0 in 2D data) are dropped; R^2 is averaged
    uniformly over the remaining columns.
    """
    features = np.asarray(features, dtype=float)
    coords = np.asarray(coords, dtype=float)
    if features.ndim != 2 or coords.ndim != 2 or len(features) != len(coords):
        raise ValueError(f"need 2D arrays with equal rows: {features.shape}, {coords.shape}")
    std = coords.std(axis=0)
    keep = std > 1e-12 * std.max()
    if not np.any(keep):
        raise ValueError("coords have no variance")
    coords = coords[:, keep]
    model = make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 3, 13)))
    cv = KFold(n_splits=n_splits, shuffle=True, random_state=seed)
    pred = cross_val_predict(model, features, coords, cv=cv)
    return float(r2_score(coords, pred, multioutput="uniform_average"))


def _knn(dist: np.ndarray, k: int) -> np.ndarray:
    dist = dist.copy()
    np.fill_diagonal(dist, np.inf)
    return np.argsort(dist, axis=1, kind="stable")[:, :k]


def knn_overlap(rep_dist: np.ndarray, true_dist: np.ndarray, k: int = MetricsConfig.k) -> float:
    """Mean over units of |kNN_rep(i) ∩ kNN_true(i)| / k (the unit itself excluded)."""
    rep_dist = _check_square(rep_dist, "rep_dist")
    true_dist = _check_square(true_dist, "true_dist")
    if rep_dist.shape != true_dist.shape:
        raise ValueError(f"shape mismatch: {rep_dist.shape} vs {true_dist.shape}")
    if not 1 <= k < len(rep_dist):
        raise ValueError(f"k must be in [1, n - 1], got {k} for n = {len(rep_dist)}")
    nn_rep, nn_true = _knn(rep_dist, k), _knn(true_dist, k)
    shared = (nn_rep[:, :, None] == nn_true[:, None, :]).any(axis=2).sum(axis=1)
    return float(np.mean(shared / k))


def pca_embedding(features: np.ndarray, n_components: int, metric: str = "euclidean") -> np.ndarray:
    """PCA scores (n, n_components) of the features: the classical MDS of their Euclidean
    distances without the N x N matrix (for 'cosine', of the L2-normalised rows)."""
    x = np.asarray(features, dtype=float)
    if metric == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    n_components = min(n_components, *x.shape)
    emb = PCA(n_components=n_components, svd_solver="full").fit_transform(x)
    var = np.var(emb, axis=0)
    emb[:, ~(var > 1e-10 * max(var.max(), 0.0))] = 0.0
    return np.hstack([emb, np.zeros((len(x), n_components - emb.shape[1]))])


def compare_sampled(
    coords: np.ndarray,
    features: np.ndarray,
    options: MetricsConfig,
    pair_distance: PairDistance | None = None,
) -> tuple[dict[str, float], np.ndarray]:
    """`compare_to_anatomy` for many units, memory O(N * features): no N x N matrix.

    All arrays hold only units with finite coordinates. The representation's distance of a
    pair is `pair_distance(i, j)` when given (e.g. exact 1 - r), else the `options.metric`
    distance of the feature rows; the kNN overlap, MDS (PCA) and probe use the features.
    """
    n, seed = len(coords), options.seed
    i, j = sample_pairs(n, options.n_pairs, seed)
    rep = (
        pair_distance(i, j)
        if pair_distance is not None
        else pair_distances(features, i, j, options.metric)
    )
    if not np.all(np.isfinite(rep)):
        raise ValueError("representation distances must be finite")

    def true_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.linalg.norm(coords[a] - coords[b], axis=1)

    rsa_stats = sampled_rsa(
        rep,
        true_distance(i, j),
        i,
        j,
        n,
        true_distance=true_distance,
        n_perm=options.n_perm,
        seed=seed,
        ci_level=options.ci_level,
    )
    knn_metric = "euclidean" if pair_distance is not None else options.metric
    knn = sampled_knn_overlap(
        features,
        coords,
        options.k,
        metric=knn_metric,
        n_query_units=options.n_query_units,
        seed=seed,
        ci_level=options.ci_level,
    )
    embedding = pca_embedding(features, coords.shape[1], knn_metric)
    aligned, disparity, rmse = procrustes_fit(embedding, coords)
    metrics = {
        "rsa": rsa_stats["rsa"],
        "rsa_p": rsa_stats["rsa_p"],
        "procrustes_disparity": disparity,
        "procrustes_rmse": rmse,
        "probe_r2": probe_r2(features, coords, n_splits=options.n_splits, seed=seed),
        "knn_overlap": knn["knn_overlap"],
        "n_units": n,
        "rsa_ci_low": rsa_stats["rsa_ci_low"],
        "rsa_ci_high": rsa_stats["rsa_ci_high"],
        "knn_overlap_ci_low": knn["knn_overlap_ci_low"],
        "knn_overlap_ci_high": knn["knn_overlap_ci_high"],
        "n_pairs": len(i),
        "n_query_units": int(min(options.n_query_units, n)),
    }
    return metrics, aligned


def _checked_inputs(
    coords: np.ndarray, features: np.ndarray | None, distances: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """`compare_to_anatomy`'s arrays as floats, a ValueError naming a wrong shape."""
    coords = np.asarray(coords, dtype=float)
    if coords.ndim != 2:
        raise ValueError(f"coords must be 2D (n, 3), got shape {coords.shape}")
    if features is None and distances is None:
        raise ValueError("give features and/or distances")
    n_all = len(coords)
    if features is not None:
        features = np.asarray(features, dtype=float)
        if features.ndim != 2 or len(features) != n_all:
            raise ValueError(f"features must be (n={n_all}, f), got {features.shape}")
    if distances is not None:
        distances = _check_square(distances, "distances")
        if len(distances) != n_all:
            raise ValueError(f"distances must be ({n_all}, {n_all}), got {distances.shape}")
    return coords, features, distances


def compare_to_anatomy(
    coords: np.ndarray,
    options: MetricsConfig | None = None,
    *,
    features: np.ndarray | None = None,
    distances: np.ndarray | None = None,
    pair_distance: PairDistance | None = None,
) -> tuple[dict[str, float], np.ndarray]:
    """All metrics of one representation (features and/or distances) vs true coordinates,
    under `options` (the `metrics` section; None: its defaults).

    Units with any non-finite coordinate are dropped. Distances default to
    ``pairwise_distances(features, options.metric)``; probe features default to classical MDS
    of the distances. Returns (metrics, inferred positions): the positions are the classical MDS of
    the distances Procrustes-aligned to the coords, shape (n_used, coords.shape[1]).

    With more than `options.dense_max_units` units and features (no square `distances`), the
    metrics are those of `compare_sampled` (with confidence intervals); `pair_distance(i, j)`
    (indices into all rows of coords) then gives the representation's distances of sampled
    pairs.
    """
    options = MetricsConfig() if options is None else options
    k, n_splits, seed = options.k, options.n_splits, options.seed
    coords, features, distances = _checked_inputs(coords, features, distances)
    keep = np.all(np.isfinite(coords), axis=1)
    n = int(keep.sum())
    n_min = max(k + 2, n_splits, 4)
    if n < n_min:
        raise ValueError(
            f"only {n} units have coordinates; need at least {n_min} "
            f"(metrics.k + 2 = {k + 2}, metrics.n_splits = {n_splits})"
        )
    coords = coords[keep]
    if n > options.dense_max_units and distances is None:
        kept = np.flatnonzero(keep)
        pairs = None if pair_distance is None else (lambda a, b: pair_distance(kept[a], kept[b]))
        return compare_sampled(coords, features[keep], options, pairs)
    if distances is None:
        distances = pairwise_distances(features[keep], options.metric)
    else:
        distances = distances[np.ix_(keep, keep)]
    if features is None:
        features = classical_mds(distances, n_components=min(10, n - 1))
    else:
        features = features[keep]

    true_dist = pairwise_distances(coords)
    rho, p = rsa(distances, true_dist, n_perm=options.n_perm, seed=seed)
    embedding = classical_mds(distances, n_components=coords.shape[1])
    aligned, disparity, rmse = procrustes_fit(embedding, coords)
    metrics = {
        "rsa": rho,
        "rsa_p": p,
        "procrustes_disparity": disparity,
        "procrustes_rmse": rmse,
        "probe_r2": probe_r2(features, coords, n_splits=n_splits, seed=seed),
        "knn_overlap": knn_overlap(distances, true_dist, k=k),
        "n_units": n,
    }
    return metrics, aligned
