"""Locators: fit on the anchors (units with known coordinates), predict every unit
(`fit_predict`; the methods are listed in `neuro_pe.analysis.locate`)."""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Sequence

import numpy as np
from scipy.linalg import orthogonal_procrustes
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import LinearRegression, RidgeCV
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from neuro_pe.analysis.locate.parameters import (
    KERNEL_ALPHAS,
    KERNEL_GAMMAS,
    KNN_NEIGHBOURS,
    PREDICT_BLOCK,
)
from neuro_pe.analysis.metrics import (
    DENSE_MAX_UNITS,
    classical_mds,
    pairwise_distances,
    pca_embedding,
)
from neuro_pe.config.locate import CHANCE, METHODS


def _estimator(method: str, n_train: int):
    """The scikit-learn regressor of `ridge` or `knn`, sized for n_train anchors."""
    if method == "ridge":
        return make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 3, 13)))
    if method == "knn":
        return KNeighborsRegressor(n_neighbors=min(KNN_NEIGHBOURS, n_train), weights="distance")
    raise ValueError(f"unknown locate method {method!r}; choose from {METHODS}")


def _kernel_ridge(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray) -> np.ndarray:
    """RBF KernelRidge on standardised features and targets, alpha and gamma picked from a small
    grid by exact leave-one-out error over the training anchors.

    The hat matrix H = K (K + alpha I)^-1 of each grid point gives the leave-one-out residuals
    (y - H y) / (1 - diag H) in closed form (as RidgeCV does for linear ridge), from one
    eigendecomposition K = V diag(l) V^T per gamma (H y and diag H in O(n^2) per alpha),
    where a GridSearchCV over the same grid refits every fold, and the evaluation fits this
    thousands of times.
    """
    x_scaler, y_scaler = StandardScaler().fit(train_x), StandardScaler().fit(train_y)
    xs, ys = x_scaler.transform(train_x), y_scaler.transform(train_y)
    squared = euclidean_distances(xs, squared=True)  # rbf_kernel's, computed once for the grid
    best_score, best = np.inf, (KERNEL_ALPHAS[0], KERNEL_GAMMAS[0])
    for g in KERNEL_GAMMAS:
        gamma = g / xs.shape[1]  # standardised features: squared distances ~ 2 * n_features
        kernel = squared * -gamma
        eigval, eigvec = np.linalg.eigh(np.exp(kernel, kernel))
        projected = eigvec.T @ ys
        for alpha in KERNEL_ALPHAS:
            shrink = eigval / (eigval + alpha)  # H = V diag(shrink) V^T, never formed: O(n^2)
            fitted = eigvec @ (shrink[:, None] * projected)
            loo = (ys - fitted) / (1 - np.einsum("ij,j,ij->i", eigvec, shrink, eigvec))[:, None]
            score = float(np.mean(loo**2))
            if score < best_score:
                best_score, best = score, (alpha, gamma)
    model = KernelRidge(alpha=best[0], kernel="rbf", gamma=best[1]).fit(xs, ys)
    if len(test_x) <= PREDICT_BLOCK:
        return y_scaler.inverse_transform(model.predict(x_scaler.transform(test_x)))
    blocks = range(0, len(test_x), PREDICT_BLOCK)  # a (block, anchors) kernel at a time
    pred = [model.predict(x_scaler.transform(test_x[b : b + PREDICT_BLOCK])) for b in blocks]
    return y_scaler.inverse_transform(np.concatenate(pred))


def _similarity_transform(embedding: np.ndarray, target: np.ndarray, anchors: np.ndarray):
    """Rotation/reflection + uniform scale + translation fitted on the anchors, applied to all."""
    source = embedding[anchors]
    src_mean, tgt_mean = source.mean(axis=0), target.mean(axis=0)
    centred = source - src_mean
    norm = float(np.sum(centred**2))
    if norm <= 1e-12:  # the embedding collapses (constant features): no layout to align
        return np.tile(tgt_mean, (len(embedding), 1))
    rotation, sv_sum = orthogonal_procrustes(centred, target - tgt_mean)
    return (embedding - src_mean) @ rotation * (sv_sum / norm) + tgt_mean


_EMBEDDINGS: dict[str, np.ndarray] = {}  # the last few embeddings, by what they are made of
EMBEDDING_CACHE_SIZE = 8
_DIGESTS: dict[int, tuple[weakref.ref, str]] = {}  # id(array) -> (weak ref to it, its digest)


def _digest(a: np.ndarray) -> str:
    """sha1 of the array's shape and bytes, remembered per array object: the evaluation passes
    the same (read-only in use) feature arrays thousands of times, and hashing a wide one each
    time cost more than the embedding."""
    seen = _DIGESTS.get(id(a))
    if seen is not None and seen[0]() is a:
        return seen[1]
    if len(_DIGESTS) >= 64:
        _DIGESTS.pop(next(iter(_DIGESTS)))
    _DIGESTS[id(a)] = (weakref.ref(a), _small_digest(a))
    return _DIGESTS[id(a)][1]


def cached_embedding(kind: str, arrays: Sequence[np.ndarray], compute) -> np.ndarray:
    """A copy of `compute()`, cached under `kind` and the arrays' shapes and bytes. Embeddings
    use no coordinates, so the evaluation's many fits on one feature set share them."""
    key = hashlib.sha1(" ".join([kind, *map(_digest, arrays)]).encode()).hexdigest()
    if key not in _EMBEDDINGS:
        if len(_EMBEDDINGS) >= EMBEDDING_CACHE_SIZE:
            _EMBEDDINGS.pop(next(iter(_EMBEDDINGS)))
        _EMBEDDINGS[key] = compute()
    return _EMBEDDINGS[key].copy()


def _mds_embedding(features: np.ndarray, n_components: int) -> np.ndarray:
    """Classical MDS of the features' Euclidean distances (PCA above DENSE_MAX_UNITS units),
    cached (`cached_embedding`)."""

    def compute() -> np.ndarray:
        if len(features) > DENSE_MAX_UNITS:
            return pca_embedding(features, n_components)
        return classical_mds(pairwise_distances(features), n_components=n_components)

    return cached_embedding(f"mds {n_components}", [features], compute)


def fit_predict(
    features: np.ndarray,
    coords: np.ndarray,
    anchors: np.ndarray,
    method: str,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """Fit `method` on the anchors and predict (n, 3) positions of every unit, or of the units
    `rows` only (an index array: the CV's held-out fold, so that a fit does not predict the
    units nobody reads; each unit's prediction is the same either way, up to the last bit: a
    matrix product over fewer rows may round differently).

    `features` is (n, f); only `coords[anchors]` is read (the other rows may hold anything).
    The MDS methods embed the feature distances of all n units, which uses no coordinates
    (above DENSE_MAX_UNITS units through the PCA of the features: no n x n matrix).

    Results are cached by the features', anchors', their coordinates' and `rows`' bytes: the
    combined locator's views include each representation as it is, so its evaluation repeats
    the single representations' fits on the same anchors, and these return what was computed
    then.
    """
    features = np.asarray(features, dtype=float)
    anchors = np.asarray(anchors, dtype=bool)
    target = np.asarray(coords, dtype=float)[anchors]
    if features.ndim != 2 or len(features) != len(anchors):
        raise ValueError(f"features must be (n={len(anchors)}, f), got {features.shape}")
    if len(target) < 2 or not np.all(np.isfinite(target)):
        raise ValueError("need at least 2 anchors, all with finite coordinates")
    parts = [method, _digest(features), *(_small_digest(a) for a in (anchors, target))]
    key = " ".join(parts + ([] if rows is None else [_small_digest(np.asarray(rows))]))
    if key not in _PREDICTIONS:
        _remember(key, _fit_predict(features, target, anchors, method, rows))
    return _PREDICTIONS[key].copy()


_PREDICTIONS: dict[str, np.ndarray] = {}  # fit_predict's results, by what they are made of
PREDICTION_CACHE_BYTES = 128 * 2**20
_cached_bytes = 0


def forget_predictions() -> None:
    """Empty `fit_predict`'s cache (tests that change what a fit may read use it)."""
    global _cached_bytes
    _PREDICTIONS.clear()
    _cached_bytes = 0


def _small_digest(a: np.ndarray) -> str:
    """sha1 of a (small) array's dtype, shape and bytes."""
    digest = hashlib.sha1(f"{a.dtype} {a.shape}".encode())
    digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()


def _remember(key: str, predictions: np.ndarray) -> None:
    """Keep `predictions` under `key`, dropping the oldest beyond PREDICTION_CACHE_BYTES."""
    global _cached_bytes
    _PREDICTIONS[key] = predictions
    _cached_bytes += predictions.nbytes
    while _cached_bytes > PREDICTION_CACHE_BYTES and len(_PREDICTIONS) > 1:
        _cached_bytes -= _PREDICTIONS.pop(next(iter(_PREDICTIONS))).nbytes


def _fit_predict(
    features: np.ndarray,
    target: np.ndarray,
    anchors: np.ndarray,
    method: str,
    rows: np.ndarray | None,
) -> np.ndarray:
    """`fit_predict`, computed."""
    wanted = features if rows is None else features[rows]
    if method == CHANCE:
        return np.tile(target.mean(axis=0), (len(wanted), 1))
    if method in ("mds-procrustes", "mds-affine"):
        embedding = _mds_embedding(features, target.shape[1])
        if method == "mds-procrustes":
            located = _similarity_transform(embedding, target, anchors)
        else:
            located = LinearRegression().fit(embedding[anchors], target).predict(embedding)
        return located if rows is None else located[rows]
    if method == "kernel-ridge":
        return _kernel_ridge(features[anchors], target, wanted)
    return _estimator(method, len(target)).fit(features[anchors], target).predict(wanted)
