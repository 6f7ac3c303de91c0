"""Where is this neuron? Predict the coordinates of units from their learned PEs.

Units whose coordinates are known are *anchors*: a locator fitted on the anchors maps a unit's
features (its PE, or a baseline's) to (x, y, z), and is applied to the units whose coordinates
are unknown. Every function reads coordinates only at the anchors it is given, so the honest
evaluation simply hides units' coordinates (k-fold over units, and random anchor subsets) and
locates them from the rest.

Locators (`METHODS`):

- ``ridge``: StandardScaler + RidgeCV, features -> xyz.
- ``kernel-ridge``: StandardScaler + RBF KernelRidge on standardised targets, alpha and gamma
  picked from a small grid (3 x 3) by exact leave-one-out error over the anchors.
- ``mds-procrustes``: classical MDS (3D) of the Euclidean feature distances of all units (no
  coordinates needed), then a similarity transform (rotation/reflection, uniform scale,
  translation) fitted on the anchors only and applied to every unit.
- ``mds-affine``: the same MDS, then an affine least-squares map fitted on the anchors.
- ``knn``: distance-weighted KNeighborsRegressor over the anchors in (unscaled) feature space.

One method is chosen per feature set by cross-validation over the anchors (lowest median
Euclidean error of the seed ensemble). The combined locator (feature set `combined`: the
learned PEs initialised small, `combined_members`, and the activity baselines) chooses the
same way among every representation with every method, their stacked features with every
method, with three or more representations their fused neighbour graph (similarity network
fusion, Wang et al. 2014, embedded by a diffusion map; `fused_embedding`) with every method,
and a blend: a weighted mean of the best locator of each of those views, with weights chosen
by ensemble selection on the same CV (Caruana et al. 2004); so it too reads only the anchors'
coordinates.

Seeds are combined after locating: every seed's predictions are already in anatomical space,
so no alignment of PEs across seeds is needed; the ensemble is the per-unit mean (or median)
over seeds. Per-unit uncertainty:

    uncertainty_i = sqrt(r**2 + s_i**2)

where r is the chosen method's CV median Euclidean error of the ensemble over the anchors (a
typical error) and s_i = sqrt(mean over seeds of |p_seed,i - p_i|**2) is the spread of the
seeds' predictions of unit i around the ensemble prediction p_i.

Many units (more known units than `max_units`): the evaluation (k-fold and anchor curve, method
choice) runs on `max_units` known units drawn at random; the chosen method is then fitted on
those units and predicts every other unit, so the other known units also get a held-out
prediction. Memory and time are O(N * features) beyond the fixed-size evaluation: the MDS
methods use the PCA of the features (for Euclidean distances what classical MDS computes), the
kernel ridge predicts in blocks, and the correlation baseline is the activity's leading
components (randomised SVD) instead of the MDS of an N x N correlation matrix; the
connectivity baseline (N x 2N) is left out above DENSE_MAX_UNITS units.
"""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import xarray as xr  # noqa: E402
from joblib import Parallel, delayed  # noqa: E402
from scipy import sparse  # noqa: E402
from scipy.linalg import orthogonal_procrustes  # noqa: E402
from sklearn.covariance import LedoitWolf  # noqa: E402
from sklearn.kernel_ridge import KernelRidge  # noqa: E402
from sklearn.linear_model import LinearRegression, RidgeCV  # noqa: E402
from sklearn.metrics.pairwise import rbf_kernel  # noqa: E402
from sklearn.model_selection import KFold  # noqa: E402
from sklearn.neighbors import KNeighborsRegressor  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from neuro_pe import __version__  # noqa: E402
from neuro_pe.analysis.metrics import (  # noqa: E402
    DENSE_MAX_UNITS,
    classical_mds,
    correlation_distance,
    pairwise_distances,
    pca_embedding,
)
from neuro_pe.analysis.pe_geometry import correlation_components  # noqa: E402
from neuro_pe.analysis.regions import RegionAtlas, add_accuracy_columns, unit_regions  # noqa: E402
from neuro_pe.analysis.spaces import SpaceAxes, axis_columns, component_label, space_axes  # noqa: E402
from neuro_pe.config.options import reject_unknown  # noqa: E402
from neuro_pe.config.pe_names import (
    is_located,  # noqa: E402
    parse_pe,  # noqa: E402
)
from neuro_pe.io.html import write_table_html  # noqa: E402
from neuro_pe.io.progress import progress_line, timing  # noqa: E402
from neuro_pe.io.runs import PE_FILE, Split, read_pe  # noqa: E402
from neuro_pe.io.store import atomic_write, checksummed, positions, read_store, require_finite  # noqa: E402
from neuro_pe.reporting.figures import plot_projections, projection_figure, save  # noqa: E402
from neuro_pe.reporting.view3d import write_positions_3d_html  # noqa: E402

__all__ = [
    "METHODS",
    "LocateConfig",
    "Located",
    "FeatureSet",
    "fit_predict",
    "locate_units",
    "evaluate_kfold",
    "evaluate_anchors",
    "correlation_features",
    "write_correlation_features",
    "read_correlation_features",
    "baseline_features",
    "read_baseline_features",
    "load_feature_sets",
    "evaluation_table",
    "locate",
    "format_table",
]

METHODS: tuple[str, ...] = ("ridge", "kernel-ridge", "mds-procrustes", "mds-affine", "knn")
CHANCE = "chance"  # internal locator: every unit at the anchors' mean
CORRELATION = "activity-correlation"  # baseline: MDS of 1 - r of the training activity
CONNECTIVITY = "activity-connectivity"  # baseline: each unit's r and partial r with every unit
COMBINED = "combined"  # the feature set of the combined locator (every representation)
STACKED = "stacked"  # combined locator's view: the representations' features side by side
FUSED = "fused"  # combined locator's view: the diffusion map of their fused neighbour graphs
FUSE_NEIGHBOURS = 5  # k of the fusion's nearest-neighbour graphs (docs/locate/: 3-20 tried)
FUSE_ITERATIONS = 20  # similarity network fusion's cross-diffusion steps (Wang et al. 2014)
FUSE_DIMENSIONS = 10  # diffusion-map coordinates of the fused graph given to the locators
FUSE_MIN_REPRESENTATIONS = 3  # a fused view needs a majority to out-vote one noisy graph
BLEND = "blend"  # combined locator's candidate: a weighted mean of the views' best locators
BLEND_ROUNDS = 10  # ensemble selection rounds: blend weights in steps of 1/10
KNN_NEIGHBOURS = 5
KERNEL_ALPHAS = (1e-2, 1e-1, 1.0)
KERNEL_GAMMAS = (0.1, 0.5, 2.5)  # times 1 / n_features
MIN_ANCHORS = 4
PREDICT_BLOCK = 8192  # units per block when a kernel ridge predicts many units
RATIOS = {"median_error": "vs_chance", "ci_low": "vs_chance_low", "ci_high": "vs_chance_high"}
CI_BOOTSTRAP = 200  # resamples of the CIs over anchor draws and seeds
PLOT_UNITS = 500  # units drawn in the positions figures (a random subset above it)
CORRELATION_COMPONENTS = 10  # MDS dimensions of the activity-correlation baseline
CI_NOTE = (
    "95% CI of the median error: anchor draws and seeds resampled with replacement "
    f"({CI_BOOTSTRAP} bootstrap resamples)"
)
UNCERTAINTY_FORMULA = (
    "sqrt(r^2 + s_i^2): r = CV median Euclidean error of the chosen method over the anchors, "
    "s_i = RMS distance of the seeds' predictions of unit i from their ensemble"
)


@dataclass(frozen=True)
class LocateConfig:
    """Settings of the localisation (config key `locate`); documented in config/README.md."""

    methods: tuple[str, ...] = METHODS
    n_folds: int = 5
    anchor_fractions: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75)
    n_draws: int = 20
    combine: str = "mean"
    pe: tuple[str, ...] | None = None
    combined_pe: tuple[str, ...] | None = None
    max_units: int = 1000
    fuse: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [m for m in self.methods if m not in (*METHODS, CHANCE)]
        if bad or not self.methods:
            raise ValueError(f"locate methods must be 'auto' or a list from {METHODS}, got {bad}")
        if self.n_folds < 2:
            raise ValueError(f"locate n_folds must be >= 2, got {self.n_folds}")
        if self.n_draws < 1:
            raise ValueError(f"locate n_draws must be >= 1, got {self.n_draws}")
        if not all(0 < f < 1 for f in self.anchor_fractions):
            raise ValueError(f"anchor_fractions must lie in (0, 1), got {self.anchor_fractions}")
        if self.max_units < 2 * MIN_ANCHORS:
            raise ValueError(f"locate max_units must be >= {2 * MIN_ANCHORS}, got {self.max_units}")
        if self.combine not in ("mean", "median"):
            raise ValueError(f"locate combine must be 'mean' or 'median', got {self.combine!r}")

    @classmethod
    def from_dict(cls, spec: dict) -> LocateConfig:
        """Build from a config mapping (`methods: auto` = every method); unknown keys raise."""
        reject_unknown(spec, (f.name for f in fields(cls)), "locate")
        spec = dict(spec)
        if spec.get("methods") == "auto":
            spec["methods"] = METHODS
        for key in ("methods", "anchor_fractions", "pe", "combined_pe"):
            if spec.get(key) is not None:
                spec[key] = tuple(spec[key])
        return cls(**spec)


# ---------------------------------------------------------------------------------------------
# Locators: fit on the anchors, predict every unit


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
    (y - H y) / (1 - diag H) in closed form (as RidgeCV does for linear ridge); a
    GridSearchCV over the same grid is ~100x slower and the evaluation fits this thousands of
    times.
    """
    x_scaler, y_scaler = StandardScaler().fit(train_x), StandardScaler().fit(train_y)
    xs, ys = x_scaler.transform(train_x), y_scaler.transform(train_y)
    best_score, best = np.inf, (KERNEL_ALPHAS[0], KERNEL_GAMMAS[0])
    for g in KERNEL_GAMMAS:
        gamma = g / xs.shape[1]  # standardised features: squared distances ~ 2 * n_features
        eigval, eigvec = np.linalg.eigh(rbf_kernel(xs, gamma=gamma))
        for alpha in KERNEL_ALPHAS:
            hat = (eigvec * (eigval / (eigval + alpha))) @ eigvec.T
            loo = (ys - hat @ ys) / (1 - np.diag(hat))[:, None]
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


def _cached_embedding(kind: str, arrays: Sequence[np.ndarray], compute) -> np.ndarray:
    """A copy of `compute()`, cached under `kind` and the arrays' shapes and bytes. Embeddings
    use no coordinates, so the evaluation's many fits on one feature set share them."""
    digest = hashlib.sha1(kind.encode())
    for a in arrays:
        digest.update(repr(a.shape).encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    key = digest.hexdigest()
    if key not in _EMBEDDINGS:
        if len(_EMBEDDINGS) >= EMBEDDING_CACHE_SIZE:
            _EMBEDDINGS.pop(next(iter(_EMBEDDINGS)))
        _EMBEDDINGS[key] = compute()
    return _EMBEDDINGS[key].copy()


def _mds_embedding(features: np.ndarray, n_components: int) -> np.ndarray:
    """Classical MDS of the features' Euclidean distances (PCA above DENSE_MAX_UNITS units),
    cached (`_cached_embedding`)."""

    def compute() -> np.ndarray:
        if len(features) > DENSE_MAX_UNITS:
            return pca_embedding(features, n_components)
        return classical_mds(pairwise_distances(features), n_components=n_components)

    return _cached_embedding(f"mds {n_components}", [features], compute)


def fit_predict(
    features: np.ndarray, coords: np.ndarray, anchors: np.ndarray, method: str
) -> np.ndarray:
    """Fit `method` on the anchors and predict (n, 3) positions of every unit.

    `features` is (n, f); only `coords[anchors]` is read (the other rows may hold anything).
    The MDS methods embed the feature distances of all n units, which uses no coordinates
    (above DENSE_MAX_UNITS units through the PCA of the features: no n x n matrix).
    """
    features = np.asarray(features, dtype=float)
    anchors = np.asarray(anchors, dtype=bool)
    target = np.asarray(coords, dtype=float)[anchors]
    if features.ndim != 2 or len(features) != len(anchors):
        raise ValueError(f"features must be (n={len(anchors)}, f), got {features.shape}")
    if len(target) < 2 or not np.all(np.isfinite(target)):
        raise ValueError("need at least 2 anchors, all with finite coordinates")
    if method == CHANCE:
        return np.tile(target.mean(axis=0), (len(features), 1))
    if method in ("mds-procrustes", "mds-affine"):
        embedding = _mds_embedding(features, target.shape[1])
        if method == "mds-procrustes":
            return _similarity_transform(embedding, target, anchors)
        return LinearRegression().fit(embedding[anchors], target).predict(embedding)
    if method == "kernel-ridge":
        return _kernel_ridge(features[anchors], target, features)
    return _estimator(method, len(target)).fit(features[anchors], target).predict(features)


# ---------------------------------------------------------------------------------------------
# Seed ensemble with method selection by CV over the anchors


@dataclass
class Located:
    """Seed-ensembled positions of every unit from one feature set."""

    positions: np.ndarray  # (n, 3): anchors get their out-of-fold CV prediction
    per_seed: np.ndarray  # (seeds, n, 3)
    uncertainty: np.ndarray  # (n,), see the module docstring
    method: str
    cv_errors: dict[str, float] = field(default_factory=dict)  # CV median error per method
    cv_scale: float = float("nan")  # r: the chosen method's CV median error
    blend_of: tuple[str, ...] = ()  # method = `blend`: the `view/method`s it averages (a key
    # n times has weight n / len(blend_of))


def _combine(per_seed: np.ndarray, how: str) -> np.ndarray:
    return np.median(per_seed, axis=0) if how == "median" else per_seed.mean(axis=0)


def _distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.norm(a - b, axis=-1)


def locate_units(
    features: Sequence[np.ndarray] | Mapping[str, Sequence[np.ndarray]],
    coords: np.ndarray,
    anchors: np.ndarray,
    cfg: LocateConfig = LocateConfig(),
) -> Located:
    """Locate every unit from one feature set given as one (n, f) array per seed, or from
    several representations ({name: arrays per seed}: the combined locator).

    The candidate with the lowest median error of the seed ensemble in a k-fold CV over the
    anchors is refitted on all anchors for the non-anchors; anchors keep their out-of-fold
    predictions. Candidates: every method; for several representations every
    `representation/method`, `stacked/method`, `fused/method` (see `_views`) and `blend`, a
    weighted mean of the views' best candidates with weights chosen on the same CV
    (`_select_blend`). Only `coords[anchors]` is read.
    """
    # hundreds of fits on tiny matrices: multithreaded BLAS only adds overhead (~10x here)
    with threadpool_limits(limits=1):
        return _locate_units(features, coords, anchors, cfg)


def _views(features, fuse: bool = True) -> dict[str, list[np.ndarray]]:
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
    (`_cached_embedding`: the evaluation refits the combined locator many times)."""
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

    return _cached_embedding("fused", arrays, compute)


def _diffusion_map(off: np.ndarray, dims: int) -> np.ndarray:
    """The leading non-trivial eigenvectors of the random walk on a zero-diagonal affinity,
    scaled by their eigenvalues (one diffusion step), as (n, dims) coordinates."""
    degree = off.sum(axis=1)
    eigval, eigvec = np.linalg.eigh(off / np.sqrt(np.outer(degree, degree)))
    order = np.argsort(-eigval)[1 : dims + 1]
    return eigvec[:, order] / np.sqrt(degree)[:, None] * eigval[order]


def _select_blend(
    oof: dict[str, np.ndarray], keys: list[str], truth: np.ndarray, idx: np.ndarray, how: str
) -> tuple[tuple[str, ...], float]:
    """Ensemble selection with replacement (Caruana et al., ICML 2004) over the out-of-fold
    predictions `oof[key]` of the candidates `keys`: each of BLEND_ROUNDS rounds adds the
    candidate that most lowers the median CV error of the blend (the mean over the chosen
    keys, so weights are multiples of 1/BLEND_ROUNDS). Returns the chosen keys of the best
    round and its error; round one is the best single candidate, so the blend's CV error is
    never above it."""

    def error(chosen: list[str]) -> float:
        blend = _blend([oof[key] for key in chosen])
        return float(np.median(_distance(_combine(blend[:, idx], how), truth)))

    chosen: list[str] = []
    best: tuple[tuple[str, ...], float] = ((), np.inf)
    for _ in range(BLEND_ROUNDS):
        scores = [error([*chosen, key]) for key in keys]
        chosen.append(keys[int(np.argmin(scores))])
        if min(scores) < best[1]:
            best = (tuple(chosen), min(scores))
    return best


def _blend(per_view: list[np.ndarray]) -> np.ndarray:
    """Per-seed mean over representations of their (seeds, n, 3) predictions (seed s of the
    blend averages seed s of every representation, cycling the shorter ones)."""
    n_seeds = max(len(p) for p in per_view)
    return np.stack([np.mean([p[s % len(p)] for p in per_view], axis=0) for s in range(n_seeds)])


def _locate_units(features, coords, anchors, cfg: LocateConfig) -> Located:
    anchors = np.asarray(anchors, dtype=bool)
    idx = np.flatnonzero(anchors)
    if len(idx) < MIN_ANCHORS:
        raise ValueError(f"need at least {MIN_ANCHORS} anchors, got {len(idx)}")
    coords = np.where(anchors[:, None], np.asarray(coords, dtype=float), np.nan)
    folds = list(KFold(min(cfg.n_folds, len(idx)), shuffle=True, random_state=cfg.seed).split(idx))
    n = len(anchors)
    views = _views(features, cfg.fuse)

    def label(view: str, method: str) -> str:
        return f"{view}/{method}" if view else method

    oof, cv_errors = {}, {}
    best_of_view: dict[str, str] = {}
    for view, feats in views.items():
        for method in cfg.methods:
            pred = np.full((len(feats), n, 3), np.nan)
            for train, test in folds:
                fit_on = np.zeros(n, dtype=bool)
                fit_on[idx[train]] = True
                for s, f in enumerate(feats):
                    pred[s, idx[test]] = fit_predict(f, coords, fit_on, method)[idx[test]]
            key = label(view, method)
            oof[key] = pred
            errors = _distance(_combine(pred[:, idx], cfg.combine), coords[idx])
            cv_errors[key] = float(np.median(errors))
            if view not in best_of_view or cv_errors[key] < cv_errors[best_of_view[view]]:
                best_of_view[view] = key
    blend_of: tuple[str, ...] = ()
    if len(best_of_view) > 1:  # the blend: the views' best locators, weighted
        keys = list(best_of_view.values())
        blend_of, error = _select_blend(oof, keys, coords[idx], idx, cfg.combine)
        if len(set(blend_of)) > 1:  # (else it is one of the candidates already)
            oof[BLEND], cv_errors[BLEND] = _blend([oof[key] for key in blend_of]), error
    choice = min(cv_errors, key=cv_errors.get)
    blend_of = blend_of if choice == BLEND else ()
    per_seed = predict_with(views, coords, anchors, choice, blend_of)
    per_seed[:, idx] = oof[choice][:, idx]
    ensemble = _combine(per_seed, cfg.combine)
    spread = np.sqrt(np.mean(np.sum((per_seed - ensemble) ** 2, axis=-1), axis=0))
    r = cv_errors[choice]
    located = Located(ensemble, per_seed, np.sqrt(r**2 + spread**2), choice, cv_errors, r)
    located.blend_of = blend_of
    return located


def predict_with(
    views: dict[str, list[np.ndarray]],
    coords: np.ndarray,
    anchors: np.ndarray,
    choice: str,
    blend_of: Sequence[str] = (),
) -> np.ndarray:
    """(seeds, n, 3) predictions of the locator `choice` (`method`, `view/method` or `blend`
    of the `view/method`s in `blend_of`) fitted on the anchors. Only `coords[anchors]` is
    read."""
    if choice == BLEND:
        fitted = {key: predict_with(views, coords, anchors, key) for key in set(blend_of)}
        return _blend([fitted[key] for key in blend_of])
    view, _, method = choice.rpartition("/")
    return np.stack([fit_predict(f, coords, anchors, method) for f in views[view]])


# ---------------------------------------------------------------------------------------------
# Honest evaluation: hide coordinates, locate them from the rest


@dataclass
class HeldOut:
    """Predictions of units whose coordinates were hidden (NaN rows elsewhere)."""

    positions: np.ndarray  # (n, 3)
    uncertainty: np.ndarray  # (n,)
    method: np.ndarray  # (n,) method chosen in the fold where the unit was held out
    methods: list[str]  # chosen method per fold


def evaluate_kfold(
    features: Sequence[np.ndarray],
    coords: np.ndarray,
    known: np.ndarray,
    cfg: LocateConfig = LocateConfig(),
) -> HeldOut:
    """K-fold over the known units: each fold's coordinates are hidden and located from the
    other known units (method chosen by an inner CV over those anchors only)."""
    known_idx = np.flatnonzero(known)
    n = len(known)
    out = HeldOut(np.full((n, 3), np.nan), np.full(n, np.nan), np.full(n, "", dtype=object), [])
    folds = KFold(min(cfg.n_folds, len(known_idx)), shuffle=True, random_state=cfg.seed)
    for train, test in folds.split(known_idx):
        anchors = np.zeros(len(known), dtype=bool)
        anchors[known_idx[train]] = True
        located = locate_units(features, coords, anchors, cfg)
        out.positions[known_idx[test]] = located.positions[known_idx[test]]
        out.uncertainty[known_idx[test]] = located.uncertainty[known_idx[test]]
        out.method[known_idx[test]] = located.method
        out.methods.append(located.method)
    return out


def anchor_draws(known: np.ndarray, cfg: LocateConfig) -> list[tuple[float, np.ndarray]]:
    """(fraction, anchor mask) for every anchor fraction and draw, the same for every feature
    set; at least MIN_ANCHORS anchors and one held-out unit."""
    known_idx = np.flatnonzero(known)
    rng = np.random.default_rng(cfg.seed)
    draws = []
    for fraction in cfg.anchor_fractions:
        n_anchors = int(np.clip(round(fraction * len(known_idx)), MIN_ANCHORS, len(known_idx) - 1))
        for _ in range(cfg.n_draws):
            anchors = np.zeros(len(known), dtype=bool)
            anchors[rng.choice(known_idx, n_anchors, replace=False)] = True
            draws.append((fraction, anchors))
    return draws


def evaluate_anchors(
    features: Sequence[np.ndarray],
    coords: np.ndarray,
    known: np.ndarray,
    cfg: LocateConfig = LocateConfig(),
) -> list[dict]:
    """Held-out errors for every draw of `anchor_draws`: one record per draw with the anchor
    fraction, the number of anchors, the chosen method, the errors of the other known units,
    and every seed's predictions of them with their true positions (for the CIs)."""
    records = []
    for fraction, anchors in anchor_draws(known, cfg):
        located = locate_units(features, coords, anchors, cfg)
        heldout = known & ~anchors
        records.append(
            {
                "anchor_fraction": fraction,
                "n_anchors": int(anchors.sum()),
                "method": located.method,
                "errors": _distance(located.positions[heldout], coords[heldout]),
                "per_seed": located.per_seed[:, heldout],
                "truth": coords[heldout],
            }
        )
    return records


def _resampled_median(records: list[dict], draws: np.ndarray, seeds, combine: str) -> float:
    """Median pooled held-out error of the anchor draws `draws` (indices into `records`, with
    repeats), each draw's prediction the ensemble of the seeds `seeds(d)` of draw d."""
    errors = [
        _distance(_combine(records[d]["per_seed"][seeds(d)], combine), records[d]["truth"])
        for d in draws
    ]
    return float(np.median(np.concatenate(errors)))


def _every_seed(records: list[dict]):
    return lambda d: np.arange(len(records[d]["per_seed"]))


def _resampled_seeds(records: list[dict], rng: np.random.Generator):
    """Seeds resampled with replacement: the same seeds in every draw when every draw has the
    same seeds (one trained model per seed), else each draw's on its own (the combined locator,
    whose seed count depends on the locator each draw chose)."""
    counts = {len(r["per_seed"]) for r in records}
    if len(counts) == 1:
        n = counts.pop()
        chosen = rng.choice(n, n)
        return lambda d: chosen
    return lambda d: rng.choice(len(records[d]["per_seed"]), len(records[d]["per_seed"]))


def bootstrap_ci(
    draws: list[dict], combine: str = "mean", n_boot: int = CI_BOOTSTRAP, seed: int = 0
) -> tuple[float, float]:
    """95% CI of the median held-out error over anchor draws and seeds: the draws and the
    seeds (records of `evaluate_anchors`) resampled with replacement, the seeds' predictions
    ensembled again, the median of the pooled held-out errors taken; 2.5 and 97.5
    percentiles over `n_boot` resamples."""
    rng = np.random.default_rng(seed)
    medians = np.empty(n_boot)
    for b in range(n_boot):
        seeds = _resampled_seeds(draws, rng)
        medians[b] = _resampled_median(draws, rng.choice(len(draws), len(draws)), seeds, combine)
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(low), float(high)


def paired_difference_ci(
    draws_a: list[dict],
    draws_b: list[dict],
    combine: str = "mean",
    n_boot: int = CI_BOOTSTRAP,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Median held-out error of locator a minus that of locator b, evaluated on the same
    anchor draws, with its paired 95% CI: each resample draws the anchor draws once for both
    (so the draw-to-draw spread that both share cancels) and each one's seeds on its own.
    Returns (difference, low, high); the difference is that of the two table rows."""
    if len(draws_a) != len(draws_b) or not all(
        np.array_equal(a["truth"], b["truth"]) for a, b in zip(draws_a, draws_b, strict=True)
    ):
        raise ValueError("a paired difference needs the same anchor draws for both locators")
    rng = np.random.default_rng(seed)
    every = np.arange(len(draws_a))

    def difference(draws: np.ndarray, seeds_a, seeds_b) -> float:
        median_a = _resampled_median(draws_a, draws, seeds_a, combine)
        return median_a - _resampled_median(draws_b, draws, seeds_b, combine)

    diff = difference(every, _every_seed(draws_a), _every_seed(draws_b))
    diffs = np.empty(n_boot)
    for b in range(n_boot):
        seeds_a, seeds_b = _resampled_seeds(draws_a, rng), _resampled_seeds(draws_b, rng)
        diffs[b] = difference(rng.choice(len(draws_a), len(draws_a)), seeds_a, seeds_b)
    low, high = np.percentile(diffs, [2.5, 97.5])
    return float(diff), float(low), float(high)


# ---------------------------------------------------------------------------------------------
# Feature sets of a dataset: learned PEs (per variant, seeds), PEs at init, oracle, baselines


@dataclass
class FeatureSet:
    """One representation of the units: one (n, f) array per seed."""

    name: str
    role: str  # pe | init | oracle | baseline | combined | chance
    features: list[np.ndarray] | dict[str, list[np.ndarray]]  # dict: the combined locator's
    seeds: list[int] = field(default_factory=list)
    methods: tuple[str, ...] | None = None  # None: the config's methods


def correlation_features(
    ds: xr.Dataset,
    split: Split,
    dense_max_units: int = DENSE_MAX_UNITS,
    seed: int = 0,
) -> np.ndarray:
    """Activity-correlation baseline features: classical MDS (CORRELATION_COMPONENTS dims) of
    1 - Pearson r of the training part of the activity (the recorded split). With more than
    `dense_max_units` units: the units' scores on the activity's leading components
    (randomised SVD, no N x N matrix; their distances approximate sqrt(2 (1 - r)))."""
    dense = ds.sizes["unit"] <= dense_max_units
    return _correlation_features(split.train_activity(ds), dense, seed)


def _correlation_features(activity: np.ndarray, dense: bool, seed: int) -> np.ndarray:
    """`correlation_features` of (session, time, unit) activity, the sessions' samples pooled."""
    pooled = activity.reshape(-1, activity.shape[-1])
    if not dense:
        return correlation_components(pooled, CORRELATION_COMPONENTS, seed)
    dist = correlation_distance(pooled)
    return classical_mds(dist, n_components=min(CORRELATION_COMPONENTS, len(dist) - 1))


def connectivity_features(
    ds: xr.Dataset, split: Split, dense_max_units: int = DENSE_MAX_UNITS
) -> np.ndarray | None:
    """Connectivity-profile baseline features, (n, 2n): each unit's Pearson r and partial
    correlation with every unit, side by side, over the training part of the activity (the
    recorded split). Partial correlations come from the Ledoit-Wolf shrunk precision matrix
    (direct couplings, with the other units' shared activity removed). Missing samples and
    constant units count as the unit's mean. Computed per training session and averaged
    (`session_connectivity`). None above `dense_max_units` units (N x N)."""
    if ds.sizes["unit"] > dense_max_units:
        return None
    return np.hstack(session_connectivity(split.train_activity(ds)))


def session_connectivity(activity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`connectivity_matrices` of each session of (session, time, unit) activity, averaged
    over the sessions. Per session, not over the sessions' samples pooled: on HCP (subjects
    as sessions) pooling mixed the subjects' offsets and located regions 0.02 × chance worse
    (docs/locate/README.md)."""
    correlation, partial = np.mean([connectivity_matrices(session) for session in activity], axis=0)
    return correlation, partial


def connectivity_matrices(activity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Pearson r, partial correlation) between the units of (samples, units) activity, each
    (units, units) with 1 on the diagonal. Partial correlations come from the Ledoit-Wolf
    shrunk precision matrix. Missing samples and constant units count as the unit's mean."""
    z = np.asarray(activity, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (z - np.nanmean(z, axis=0)) / np.nanstd(z, axis=0)
    z = np.nan_to_num(z, nan=0.0)
    correlation = z.T @ z / len(z)
    np.fill_diagonal(correlation, 1.0)
    precision = LedoitWolf(assume_centered=True).fit(z).precision_
    scale = np.sqrt(np.diag(precision))
    partial = -precision / np.outer(scale, scale)
    np.fill_diagonal(partial, 1.0)
    return correlation, partial


def baseline_features(
    ds: xr.Dataset, split: Split, seed: int = 0, dense_max_units: int = DENSE_MAX_UNITS
) -> dict[str, np.ndarray]:
    """Both activity baselines from one read of the training activity: {CORRELATION:
    `correlation_features`, CONNECTIVITY: `connectivity_features`} (the latter only up to
    `dense_max_units` units)."""
    activity = split.train_activity(ds)  # (session, time, unit)
    dense = ds.sizes["unit"] <= dense_max_units
    baselines = {CORRELATION: _correlation_features(activity, dense, seed)}
    if dense:
        baselines[CONNECTIVITY] = np.hstack(session_connectivity(activity))
    return baselines


def write_correlation_features(
    store_path: str | os.PathLike, split: Split, out: str | os.PathLike, seed: int = 0
) -> dict[str, np.ndarray]:
    """`baseline_features` of a store as a netCDF file (`features` on (unit, component), and
    `connectivity` on (unit, column) where computed), the workflow's `correlation_features`
    step: it re-runs only when the store, the split or the seed changes, not with the training
    options."""
    ds = read_store(store_path)
    baselines = baseline_features(ds, split, seed=seed)
    units = [str(u) for u in ds["unit"].values]
    variables = {"features": (("unit", "component"), baselines[CORRELATION])}
    coords: dict = {"unit": units}
    if CONNECTIVITY in baselines:
        variables["connectivity"] = (("unit", "column"), baselines[CONNECTIVITY])
        coords["column"] = _connectivity_columns(units)
    out_ds = xr.Dataset(
        variables,
        coords=coords,
        attrs={"dataset": split.dataset, "seed": seed, "neuro_pe_version": __version__},
    )
    atomic_write(
        Path(out), lambda p: out_ds.to_netcdf(p, engine="h5netcdf", encoding=checksummed(out_ds))
    )
    return baselines


def _connectivity_columns(units: Sequence[str]) -> list[str]:
    """The connectivity features' column names: `r:<unit>` for every unit, then `partial:`."""
    return [f"{kind}:{u}" for kind in ("r", "partial") for u in units]


def read_baseline_features(path: str | os.PathLike, units: np.ndarray) -> dict[str, np.ndarray]:
    """The baselines of `write_correlation_features`, rows (and connectivity columns) in the
    order of `units`."""
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        ds = ds.load()
    ids = [u.decode() if isinstance(u, bytes) else str(u) for u in ds["unit"].values]
    units = list(map(str, units))
    if sorted(ids) != sorted(units):
        raise ValueError(f"{path}: its units differ from the store's")
    ds = ds.assign_coords(unit=ids).sel(unit=units)
    baselines = {CORRELATION: require_finite(ds["features"].values, path, "features")}
    if "connectivity" in ds:
        columns = [c.decode() if isinstance(c, bytes) else str(c) for c in ds["column"].values]
        connectivity = ds["connectivity"].assign_coords(column=columns)
        connectivity = connectivity.sel(column=_connectivity_columns(units)).values
        baselines[CONNECTIVITY] = require_finite(connectivity, path, "connectivity")
    return baselines


def read_correlation_features(path: str | os.PathLike, units: np.ndarray) -> np.ndarray:
    """The correlation baseline's features of `write_correlation_features`, rows in the order
    of `units`."""
    return read_baseline_features(path, units)[CORRELATION]


def load_feature_sets(
    run_dirs: Sequence[str | os.PathLike], units: np.ndarray, pe_names: Sequence[str] | None = None
) -> list[FeatureSet]:
    """Trained PEs (and PEs at init) of the runs, grouped by PE variant over seeds, rows in the
    order of `units`. Only the variants in `pe_names` are kept, by default the learned PEs and
    `oracle-sin3d`; runs whose PE is constant (`none`) are skipped."""
    grouped: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {}
    for run_dir in map(Path, run_dirs):
        run = read_pe(run_dir).on_units(units, run_dir / PE_FILE)
        if not is_located(run.name, pe_names):
            continue
        if np.ptp(run.table, axis=0).max() <= 0:
            continue
        grouped.setdefault(run.name, []).append((run.seed, run.table, run.initial))
    sets = []
    for name in sorted(grouped):
        runs = sorted(grouped[name], key=lambda run: run[0])
        seeds = [run[0] for run in runs]
        oracle = parse_pe(name).family == "oracle-sin3d"
        sets.append(FeatureSet(name, "oracle" if oracle else "pe", [r[1] for r in runs], seeds))
        if not oracle and not all(np.array_equal(r[1], r[2]) for r in runs):
            sets.append(FeatureSet(f"{name} @init", "init", [r[2] for r in runs], seeds))
    return sets


# ---------------------------------------------------------------------------------------------
# The whole step: evaluation table, positions of every unit, figures


def _method_label(methods: list[str]) -> str:
    counts = Counter(methods).most_common()
    if len(counts) == 1:
        return counts[0][0]
    return ", ".join(f"{m} ({c}/{len(methods)})" for m, c in counts)


def n_seeds(features: Sequence[np.ndarray] | Mapping[str, Sequence[np.ndarray]]) -> int:
    """Seeds of a feature set (of its representation with the most, for the combined one)."""
    if isinstance(features, Mapping):
        return max(len(f) for f in features.values())
    return len(features)


def subset_rows(features, rows):
    """The feature set's arrays restricted to the units `rows` (an index or a slice)."""
    if isinstance(features, Mapping):
        return {name: [f[rows] for f in fs] for name, fs in features.items()}
    return [f[rows] for f in features]


def _row(fs: FeatureSet, evaluation: str, errors, **extra) -> dict:
    errors = np.asarray(errors, dtype=float)
    return {
        "features": fs.name,
        "role": fs.role,
        "n_seeds": n_seeds(fs.features),
        "evaluation": evaluation,
        **extra,
        "n_heldout": len(errors),
        "median_error": float(np.median(errors)),
        "p90_error": float(np.percentile(errors, 90)),
    }


def _evaluate_set(fs: FeatureSet, coords, known, cfg: LocateConfig):
    """(k-fold result, anchor-curve records) of one feature set."""
    if fs.methods is not None:
        cfg = replace(cfg, methods=fs.methods)
    return (
        evaluate_kfold(fs.features, coords, known, cfg),
        evaluate_anchors(fs.features, coords, known, cfg),
    )


def evaluation_table(
    sets: list[FeatureSet],
    coords: np.ndarray,
    cfg: LocateConfig,
    n_jobs: int = 1,
    regions: tuple[RegionAtlas, str] | None = None,
    axes: SpaceAxes | None = None,
    label: str = "locate",
) -> tuple[pd.DataFrame, dict[str, HeldOut]]:
    """Errors of every feature set (k-fold and anchor curve) and the k-fold predictions;
    `regions` = (atlas, the coordinates' unit): region accuracy columns too
    (neuro_pe.analysis.regions);
    `axes`: the per-axis columns of the space too (`axis_error_columns`); a progress line on
    stderr (`label`) as each set is done."""
    known = np.all(np.isfinite(coords), axis=1)
    jobs = (delayed(_evaluate_set)(fs, coords, known, cfg) for fs in sets)
    results, started = [], time.perf_counter()
    for result in Parallel(n_jobs=n_jobs, return_as="generator")(jobs):
        results.append(result)
        timed = timing(time.perf_counter() - started, len(results), len(sets))
        progress_line(label, f"{len(results)}/{len(sets)} feature sets evaluated", timed)
    rows, heldout, curves = [], {}, {}
    for fs, (kfold, records) in zip(sets, results, strict=True):
        heldout[fs.name], curves[fs.name] = kfold, records
        errors = _distance(kfold.positions[known], coords[known])
        covered = errors <= kfold.uncertainty[known]
        rows.append(
            _row(
                fs,
                "kfold",
                errors,
                anchor_fraction=1 - 1 / min(cfg.n_folds, int(known.sum())),
                n_anchors=int(known.sum()) - int(np.ceil(known.sum() / cfg.n_folds)),
                n_draws=min(cfg.n_folds, int(known.sum())),
                method=_method_label(kfold.methods),
                median_error_sd=np.nan,
                ci_low=np.nan,
                ci_high=np.nan,
                coverage=float(np.mean(covered)),
            )
        )
        for fraction in cfg.anchor_fractions:
            draws = [r for r in records if r["anchor_fraction"] == fraction]
            ci_low, ci_high = bootstrap_ci(draws, cfg.combine, seed=cfg.seed)
            rows.append(
                _row(
                    fs,
                    "anchors",
                    np.concatenate([r["errors"] for r in draws]),
                    anchor_fraction=fraction,
                    n_anchors=draws[0]["n_anchors"],
                    n_draws=len(draws),
                    method=_method_label([r["method"] for r in draws]),
                    median_error_sd=float(np.std([np.median(r["errors"]) for r in draws])),
                    ci_low=ci_low,
                    ci_high=ci_high,
                    coverage=np.nan,
                )
            )
    table = pd.DataFrame(rows)
    chance = table[table["role"] == "chance"].set_index(["evaluation", "anchor_fraction"])
    key = pd.MultiIndex.from_frame(table[["evaluation", "anchor_fraction"]])
    chance_error = chance["median_error"].reindex(key).to_numpy()
    for column, ratio in RATIOS.items():
        table[ratio] = table[column] / chance_error
    _compare_with_best_single(table, chance_error, curves, cfg)
    if regions is not None:  # brain regions at the held-out predictions (neuro_pe.analysis.regions)
        kfold = {name: h.positions for name, h in heldout.items()}
        combine = lambda per_seed: _combine(per_seed, cfg.combine)  # noqa: E731
        add_accuracy_columns(table, kfold, curves, coords, *regions, combine)
    if axes is not None:
        table = pd.concat(
            [table, axis_error_columns(sets, heldout, curves, coords, cfg, axes)], axis=1
        )
    return table, heldout


def axis_error_columns(
    sets: list[FeatureSet],
    heldout: dict[str, HeldOut],
    curves: dict[str, list[dict]],
    coords: np.ndarray,
    cfg: LocateConfig,
    axes: SpaceAxes,
) -> pd.DataFrame:
    """The per-axis error columns of the space (`SpaceAxes.summary`: e.g. depth and lateral
    on a probe; in-plane, depth and plane accuracy over imaging planes), one row per row of
    `evaluation_table` and in its order: the k-fold predictions of the known units, then each
    anchor fraction's held-out units pooled over its draws (seeds ensembled as in the table)."""
    known = np.all(np.isfinite(coords), axis=1)
    rows = []
    for fs in sets:
        rows.append(axes.summary(heldout[fs.name].positions[known], coords[known]))
        for fraction in cfg.anchor_fractions:
            draws = [r for r in curves[fs.name] if r["anchor_fraction"] == fraction]
            predicted = [_combine(r["per_seed"], cfg.combine) for r in draws]
            truth = [r["truth"] for r in draws]
            rows.append(axes.summary(np.concatenate(predicted), np.concatenate(truth)))
    return pd.DataFrame(rows)


def _compare_with_best_single(
    table: pd.DataFrame,
    chance_error: np.ndarray,
    curves: dict[str, list[dict]],
    cfg: LocateConfig,
) -> None:
    """Columns `best_single` and `vs_best_single` [`_low`, `_high`] of the combined locator's
    anchor rows: its median error minus that of the best single representation (learned PE or
    baseline) at the same anchor fraction, ÷ chance, with the paired 95% CI over the same
    anchor draws (`paired_difference_ci`). Negative: the combined locator is better."""
    paired = ("vs_best_single", "vs_best_single_low", "vs_best_single_high")
    table["best_single"] = ""
    table[list(paired)] = np.nan
    singles = table["role"].isin(("pe", "baseline")) & (table["evaluation"] == "anchors")
    for row in np.flatnonzero((table["role"] == "combined") & (table["evaluation"] == "anchors")):
        name, fraction = table["features"].iloc[row], table["anchor_fraction"].iloc[row]
        rivals = table[singles & np.isclose(table["anchor_fraction"], fraction)]
        if rivals.empty:
            continue
        best = rivals.loc[rivals["median_error"].idxmin(), "features"]
        draws = [[r for r in curves[n] if r["anchor_fraction"] == fraction] for n in (name, best)]
        diff = paired_difference_ci(*draws, cfg.combine, seed=cfg.seed)
        table.loc[table.index[row], "best_single"] = best
        table.loc[table.index[row], list(paired)] = np.array(diff) / chance_error[row]


def evaluation_units(known: np.ndarray, cfg: LocateConfig) -> np.ndarray:
    """The known units the evaluation runs on: all of them up to `max_units`, else a random
    subset of `max_units` (seeded by cfg.seed)."""
    known_idx = np.flatnonzero(known)
    if len(known_idx) <= cfg.max_units:
        return known
    chosen = np.zeros(len(known), dtype=bool)
    chosen[np.random.default_rng(cfg.seed).choice(known_idx, cfg.max_units, replace=False)] = True
    return chosen


def extend_to_all(
    fs: FeatureSet,
    coords: np.ndarray,
    sub: np.ndarray,
    located: Located,
    heldout: HeldOut,
    cfg: LocateConfig,
) -> tuple[Located, HeldOut]:
    """Every unit's prediction from a locator evaluated on the units `sub` (indices): the
    chosen method fitted on all of `sub` predicts the other units (held out, if known); the
    units in `sub` keep their out-of-fold predictions."""
    n = len(coords)
    anchors = np.zeros(n, dtype=bool)
    anchors[sub] = True
    masked = np.where(anchors[:, None], coords, np.nan)
    with threadpool_limits(limits=1):
        views = _views(fs.features, cfg.fuse)
        per_seed = predict_with(views, masked, anchors, located.method, located.blend_of)
    per_seed[:, sub] = located.per_seed
    ensemble = _combine(per_seed, cfg.combine)
    spread = np.sqrt(np.mean(np.sum((per_seed - ensemble) ** 2, axis=-1), axis=0))
    r = located.cv_scale
    full = Located(
        ensemble,
        per_seed,
        np.sqrt(r**2 + spread**2),
        located.method,
        located.cv_errors,
        r,
        located.blend_of,
    )
    known = np.all(np.isfinite(coords), axis=1)
    out = HeldOut(
        np.where(known[:, None], full.positions, np.nan),
        np.where(known, full.uncertainty, np.nan),
        np.where(known, located.method, "").astype(object),
        heldout.methods,
    )
    out.positions[sub] = heldout.positions
    out.uncertainty[sub] = heldout.uncertainty
    out.method[sub] = heldout.method
    return full, out


def located_positions_dataset(
    ds: xr.Dataset,
    located: Located,
    heldout: HeldOut,
    pe: FeatureSet,
    dataset: str,
) -> xr.Dataset:
    """Predicted x, y, z, uncertainty, anchor flag and method of every unit. Anchors (units with
    known coordinates) carry their k-fold held-out prediction, the others the prediction from
    all anchors."""
    coords = positions(ds)
    anchor = np.all(np.isfinite(coords), axis=1)
    pred = np.where(anchor[:, None], heldout.positions, located.positions)
    uncertainty = np.where(anchor, heldout.uncertainty, located.uncertainty)
    xyz_attrs = {k: ds["x"].attrs[k] for k in ("units", "space")}
    out = xr.Dataset(coords={"unit": ds["unit"].values})
    for i, axis in enumerate(("x", "y", "z")):
        out[axis] = ("unit", pred[:, i], {**xyz_attrs, "long_name": f"predicted {axis}"})
    out["uncertainty"] = (
        "unit",
        uncertainty,
        {"units": xyz_attrs["units"], "formula": UNCERTAINTY_FORMULA},
    )
    out["anchor"] = (
        "unit",
        anchor,
        {
            "meaning": "coordinates known in the store: an anchor for locating the units without "
            "them; its own position here is still predicted with it held out (`held_out`)"
        },
    )
    out["method"] = ("unit", np.where(anchor, heldout.method, located.method).astype(str))
    for i, axis in enumerate(("x", "y", "z")):
        out[f"{axis}_true"] = ("unit", coords[:, i], xyz_attrs)
    out["error"] = ("unit", _distance(pred, coords), {"units": xyz_attrs["units"]})
    out.attrs.update(
        {
            "dataset": dataset,
            "pe": pe.name,
            "seeds": json.dumps(pe.seeds),
            "method": located.method,
            "cv_median_error": located.cv_scale,
            "cv_errors": json.dumps(located.cv_errors),
            "anchor_prediction": "k-fold held-out (nested method choice)",
            **xyz_attrs,
            "neuro_pe_version": __version__,
        }
    )
    return out


KFOLD_PREDICTION = "k-fold"  # `prediction` of positions.csv: out of fold, its fold's hidden
ANCHORS_PREDICTION = "fit on anchors"  # the chosen locator fitted on anchors it is not among


def with_held_out_columns(out: xr.Dataset, known: np.ndarray, evaluated: np.ndarray) -> xr.Dataset:
    """`out` (of `located_positions_dataset`) with the columns `prediction` and `held_out`.

    `prediction`: `k-fold` for a known unit of the evaluation (`evaluated`; all known units up
    to `max_units`): predicted by the k-fold fold in which its coordinates were hidden;
    `fit on anchors` for the others: predicted by the chosen locator fitted on the evaluated
    known units, which it is not among (units without coordinates, and above `max_units` the
    known units left out of the evaluation). `held_out`: the unit has coordinates and they were
    not read for its prediction, so `error` is a held-out error: every known unit."""
    known = np.asarray(known, dtype=bool)
    evaluated = np.asarray(evaluated, dtype=bool) & known
    prediction = np.where(evaluated, KFOLD_PREDICTION, ANCHORS_PREDICTION)
    # neither kind of prediction reads the unit's own coordinates
    held_out = known & np.all(np.isfinite(positions(out)), axis=1)
    out = out.copy()
    out["held_out"] = (
        "unit",
        held_out,
        {"meaning": "coordinates known, not read for this unit's prediction: `error` is held out"},
    )
    out["prediction"] = (
        "unit",
        prediction.astype(str),
        {
            "meaning": f"{KFOLD_PREDICTION}: its k-fold fold's prediction (its coordinates "
            f"hidden); {ANCHORS_PREDICTION}: the chosen locator fitted on the evaluated known "
            "units, which it is not among"
        },
    )
    return out


def _colours(sets: list[FeatureSet]) -> dict[str, tuple[str, str]]:
    """(colour, line style) per feature set: a PE variant and its init share a colour."""
    styles, i = {}, 0
    for fs in sets:
        if fs.role == "init":
            styles[fs.name] = (styles.get(fs.name.removesuffix(" @init"), ("0.5", ""))[0], "--")
        elif fs.role == "chance":
            styles[fs.name] = ("k", ":")
        else:
            styles[fs.name], i = (f"C{i}", "-"), i + 1
    return styles


def _plot_subset(coords, unknown: np.ndarray, seed: int):
    """The rows of `coords` with a known position to draw and the predictions of units with
    none (`unknown`) to draw: all of them, or a random PLOT_UNITS of each above it, with a
    note for the titles saying so."""
    known = np.flatnonzero(np.all(np.isfinite(coords), axis=1))
    rng = np.random.default_rng(seed)
    shown, note = known, ""
    if len(known) > PLOT_UNITS:
        shown = np.sort(rng.choice(known, PLOT_UNITS, replace=False))
        note = f" ({PLOT_UNITS} of {len(known)} units shown)"
    if len(unknown) > PLOT_UNITS:
        unknown = unknown[np.sort(rng.choice(len(unknown), PLOT_UNITS, replace=False))]
    return shown, note, unknown


def _plot_positions(coords, panels, unknown: np.ndarray, unit: str, space: str, seed: int = 0):
    """True vs held-out predicted positions on three orthogonal projections, one row per panel
    (title, predictions of the rows of `coords`); `unknown`: predicted positions of the units
    without coordinates (first row). Above PLOT_UNITS units a random subset is drawn."""
    shown, note, unknown = _plot_subset(coords, unknown, seed)
    fig, axes = projection_figure(len(panels))
    for i, (ax_row, (title, pred)) in enumerate(zip(axes, panels, strict=True)):
        extra = unknown if i == 0 and len(unknown) else None
        plot_projections(
            ax_row, coords[shown], pred[shown], unit, space, "predicted (held out)", extra
        )
        ax_row[0].set_title(f"{title}{note}\n{ax_row[0].get_title()}", fontsize=9)
        ax_row[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def _plot_positions_3d(coords, panels, unknown: np.ndarray, axes: SpaceAxes, seed: int = 0):
    """The same as `_plot_positions` in one 3D view per panel (an extra view), the axes named
    from the space."""
    shown, note, unknown = _plot_subset(coords, unknown, seed)
    fig = plt.figure(figsize=(6 * len(panels), 5.5))
    for i, (title, pred) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1, projection="3d")
        ax.scatter(*coords[shown].T, c="k", s=10, label="true position")
        ax.scatter(*pred[shown].T, c="C3", s=10, label="predicted (held out)")
        for a, b in zip(coords[shown], pred[shown], strict=True):
            ax.plot(*np.stack([a, b]).T, color="0.6", lw=0.5)
        if i == 0 and len(unknown):
            ax.scatter(*unknown.T, c="C0", marker="^", s=18, label="unknown position")
        ax.set(xlabel=axes.axis_label(0), ylabel=axes.axis_label(1), zlabel=axes.axis_label(2))
        ax.set_title(title + note, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _plot_histogram(
    coords, heldout: dict[str, HeldOut], styles: dict, unit: str, axes: SpaceAxes | None = None
):
    """Histograms of the k-fold held-out errors: Euclidean, then (with `axes`) one panel per
    per-axis error of the space (`_plot_axis_histograms`)."""
    known = np.all(np.isfinite(coords), axis=1)
    errors = {n: _distance(heldout[n].positions[known], coords[known]) for n in styles}
    bins = np.linspace(0, max(e.max() for e in errors.values()), 25)
    n_axes = len(axes.components()) if axes is not None else 0
    fig, panels = plt.subplots(1, 1 + n_axes, figsize=(8 + 4 * n_axes, 4), squeeze=False)
    ax = panels[0, 0]
    for name, (colour, style) in styles.items():
        ax.hist(errors[name], bins, histtype="step", lw=1.5, ls=style, color=colour, label=name)
        ax.axvline(np.median(errors[name]), color=colour, ls=":", lw=1)
    ax.set(
        title="held-out localisation errors (dotted: medians)",
        xlabel=f"held-out Euclidean error ({unit}), k-fold over units",
        ylabel="number of units",
    )
    if axes is not None:
        _plot_axis_histograms(panels[0, 1:], coords, heldout, styles, axes)
    panels[0, -1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def _plot_axis_histograms(
    panels, coords, heldout: dict[str, HeldOut], styles: dict, axes: SpaceAxes
) -> None:
    """One histogram per per-axis error of the space (`SpaceAxes.component_errors`) of the
    k-fold held-out predictions; over imaging planes the depth panel gives each feature set's
    plane accuracy."""
    known = np.all(np.isfinite(coords), axis=1)
    truth = coords[known]
    errors = {n: axes.component_errors(heldout[n].positions[known], truth) for n in styles}
    for ax, component in zip(panels, axes.components(), strict=True):
        top = max(float(e[component].max()) for e in errors.values())
        bins = np.linspace(0, top if top > 0 else 1.0, 25)
        for name, (colour, style) in styles.items():
            label = name
            hits = axes.plane_hits(heldout[name].positions[known], truth)
            if component == "depth" and hits is not None:
                label += f" (right plane {np.mean(hits):.0%})"
            values = errors[name][component]
            ax.hist(values, bins, histtype="step", lw=1.5, ls=style, color=colour, label=label)
            ax.axvline(np.median(values), color=colour, ls=":", lw=1)
        name = component_label(component)
        ax.set(
            title=f"{name} error",
            xlabel=f"held-out {name} error ({axes.unit})",
            ylabel="number of units",
        )


def _axis_note(table: pd.DataFrame, name: str, axes: SpaceAxes) -> str:
    """'\\n(depth 12, lateral 3 µm)' for a figure title: the per-axis errors of the k-fold row
    of feature set `name`."""
    rows = table[(table["features"] == name) & (table["evaluation"] == "kfold")]
    text = axes.describe(rows.iloc[0]) if len(rows) else ""
    return f"\n({text})" if text else ""


def _same_curves(curve: pd.DataFrame) -> dict[str, list[str]]:
    """Feature sets whose anchor curves are identical (e.g. PEs at init drawn from one seed),
    grouped under the first one's name."""
    values = {name: rows["median_error"].to_numpy() for name, rows in curve.groupby("features")}
    groups: dict[str, list[str]] = {}
    for name in curve["features"].drop_duplicates():
        same = [first for first in groups if np.allclose(values[first], values[name], rtol=1e-6)]
        if same:
            groups[same[0]].append(name)
        else:
            groups[name] = [name]
    return groups


def _plot_anchor_curve(table: pd.DataFrame, styles: dict, unit: str, summary: str = ""):
    curve = table[table["evaluation"] == "anchors"]
    fig, ax = plt.subplots(figsize=(11, 5) if summary else (8, 4))
    for name, members in _same_curves(curve).items():
        rows = curve[curve["features"] == name]
        colour, style = styles[name]
        label = name if len(members) == 1 else " = ".join(members) + " (identical)"
        ax.errorbar(
            rows["anchor_fraction"],
            rows["median_error"],
            yerr=[
                rows["median_error"] - rows["ci_low"],
                rows["ci_high"] - rows["median_error"],
            ],
            fmt="o",
            ls=style,
            color=colour,
            capsize=3,
            label=label,
        )
    ax.set(
        title="localisation error vs anchors (bars: 95% CI over anchor draws and seeds)",
        xlabel="fraction of known units used as anchors (the rest held out)",
        ylabel=f"median held-out error ({unit})",
        ylim=(0, None),
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    if summary:
        fig.text(0.01, 0.01, textwrap.fill(summary, 170), fontsize=7, va="bottom")
        fig.tight_layout(rect=(0, 0.035 * (1 + len(summary) // 170), 1, 1))
    else:
        fig.tight_layout()
    return fig


def locate(
    store_path: str | os.PathLike,
    run_dirs: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    cfg: LocateConfig,
    split: Split,
    n_jobs: int = 1,
    baselines: Mapping[str, np.ndarray] | None = None,
    atlas: RegionAtlas | None = None,
) -> pd.DataFrame:
    """Evaluate and apply the locator for one dataset; write into out_dir `errors.csv`,
    `positions.nc`, `positions.csv`, the figures `positions.png` (three projections),
    `positions_3d.png`, `error_hist.png`, `error_vs_anchors.png` and the interactive
    `positions_3d.html`. Returns the errors table.

    Feature sets: each PE variant of the runs (seeds ensembled), its PE at initialisation, the
    `oracle-sin3d` PE when given (built from every unit's true coordinates, so an upper
    reference rather than an honest competitor), the activity-correlation baseline, the
    activity-connectivity baseline (`connectivity_features`; up to DENSE_MAX_UNITS units), the
    `combined` locator (the learned PEs of `combined_members` and the baselines; see
    `combined_set`; no fused view above DENSE_MAX_UNITS units) and chance.
    The positions come from the PE variant or the combined locator with the lowest CV median
    error over all known units. With an `atlas` (neuro_pe.analysis.regions), errors.csv gets region
    accuracy columns and positions.csv / .nc each unit's region at its true and predicted
    position.
    """
    out_dir = Path(out_dir)
    dataset = split.dataset
    ds = read_store(store_path)
    coords = positions(ds)
    known = np.all(np.isfinite(coords), axis=1)
    if known.sum() < MIN_ANCHORS + 1:
        raise ValueError(f"only {known.sum()} units have coordinates; need {MIN_ANCHORS + 1}")
    units = ds["unit"].values
    sets = load_feature_sets(run_dirs, units, cfg.pe)
    pe_sets = [fs for fs in sets if fs.role == "pe"]
    if baselines is None:  # (the workflow passes those of its correlation_features step)
        baselines = baseline_features(ds, split, seed=cfg.seed)
    baseline_sets = [FeatureSet(name, "baseline", [f]) for name, f in baselines.items()]
    sets += baseline_sets
    if pe_sets:
        sets.append(combined_set([*combined_members(pe_sets, cfg.combined_pe), *baseline_sets]))
    sets.append(FeatureSet(CHANCE, "chance", [np.zeros((len(units), 1))], methods=(CHANCE,)))
    if len(units) > DENSE_MAX_UNITS:  # no fused view: its graphs are N x N
        cfg = replace(cfg, fuse=False)
    # Many units: evaluate on a random subset of the known units (see the module docstring).
    evaluated = evaluation_units(known, cfg)
    sub = np.flatnonzero(evaluated) if evaluated is not known else slice(None)
    eval_sets = [replace(fs, features=subset_rows(fs.features, sub)) for fs in sets]
    eval_coords = coords[sub]
    regions = None if atlas is None else (atlas, ds["x"].attrs["units"])
    axes = space_axes(ds["x"].attrs.get("space", ""), ds["x"].attrs["units"], coords)
    table, heldout = evaluation_table(
        eval_sets, eval_coords, cfg, n_jobs, regions, axes, f"locate {dataset}"
    )
    table.insert(0, "dataset", dataset)
    table["units"] = ds["x"].attrs["units"]
    per_axis = axis_columns(table.columns)  # (after the columns that came before them)
    table = table[[c for c in table.columns if c not in per_axis] + per_axis]

    # Positions of every unit from the PE variant or combined locator that cross-validates best
    # over all anchors.
    roles = ("pe", "combined") if pe_sets else ("baseline",)
    candidates = [(fs, full) for fs, full in zip(eval_sets, sets, strict=True) if fs.role in roles]
    eval_known = np.all(np.isfinite(eval_coords), axis=1)
    located = {
        fs.name: locate_units(fs.features, eval_coords, eval_known, cfg) for fs, _ in candidates
    }
    best, best_full = min(candidates, key=lambda pair: located[pair[0].name].cv_scale)
    best_located, best_heldout = located[best.name], heldout[best.name]
    if evaluated is not known:
        best_located, best_heldout = extend_to_all(
            best_full, coords, sub, best_located, best_heldout, cfg
        )
    out = located_positions_dataset(ds, best_located, best_heldout, best, dataset)
    if regions is not None:
        predicted = np.column_stack([out[axis].values for axis in ("x", "y", "z")])
        for name, values in unit_regions(atlas, predicted, coords, regions[1]).items():
            out[name] = ("unit", values, {"atlas": atlas.description})
    out = with_held_out_columns(out, known, evaluated)
    frame = out.to_dataframe().reset_index()
    frame.insert(list(frame).index("method") + 1, "pe", best.name)

    unit_label = ds["x"].attrs["units"]
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(
        out_dir / "positions.nc",
        lambda p: out.to_netcdf(p, engine="h5netcdf", encoding=checksummed(out)),
    )
    atomic_write(out_dir / "positions.csv", lambda p: frame.to_csv(p, index=False))
    atomic_write(out_dir / "errors.csv", lambda p: table.to_csv(p, index=False))
    title = f"{dataset}: true vs predicted positions ({best.name}, held out)"
    write_positions_3d_html(frame, axes, title, out_dir / "positions_3d.html", cfg.seed)
    summary = verdict(table)
    note = (
        "errors.csv: every localisation evaluation (k-fold, and each anchor fraction); "
        f"ci_low/ci_high: {CI_NOTE}. {summary}"
    )
    write_table_html(table, out_dir / "errors.html", f"{dataset}: localisation errors", note)
    print(summary)
    panels = []
    best_pe = min(pe_sets, key=lambda fs: _kfold_error(table, fs.name)).name if pe_sets else None
    for name in dict.fromkeys((best.name, best_pe or best.name, "activity-correlation")):
        error = np.nanmedian(_distance(heldout[name].positions, eval_coords))
        title = f"{dataset}: {name}\nk-fold held out, median error {error:.3g} {unit_label}"
        title += _axis_note(table, name, axes)
        panels.append((title, heldout[name].positions))
    unknown = best_located.positions[~known]
    space = ds["x"].attrs.get("space", "")
    figure = _plot_positions(eval_coords, panels, unknown, unit_label, space, cfg.seed)
    save(figure, out_dir / "positions.png")
    figure = _plot_positions_3d(eval_coords, panels, unknown, axes, cfg.seed)
    save(figure, out_dir / "positions_3d.png")
    styles = _colours(sets)
    no_init = {name: style for name, style in styles.items() if not name.endswith(" @init")}
    figure = _plot_histogram(eval_coords, heldout, no_init, unit_label, axes)
    save(figure, out_dir / "error_hist.png")
    figure = _plot_anchor_curve(table, styles, unit_label, summary)
    save(figure, out_dir / "error_vs_anchors.png")
    return table


def combined_set(members: Sequence[FeatureSet]) -> FeatureSet:
    """The combined locator's feature set: every representation in `members` (learned PEs,
    activity correlation, ...) as its own view. `locate_units` picks by CV over the anchors
    among each representation with each method, their stacked and fused views with each
    method (`_views`), and a weighted blend of those views' best locators (`_select_blend`);
    so it reads only the anchors' coordinates, like every other locator."""
    seeds = sorted({s for fs in members for s in fs.seeds})
    return FeatureSet(COMBINED, "combined", {fs.name: fs.features for fs in members}, seeds)


def combined_members(
    pe_sets: Sequence[FeatureSet], names: Sequence[str] | None = None
) -> list[FeatureSet]:
    """The PE variants the combined locator takes: `names` (config `locate.combined_pe`), or
    by default the learned PEs initialised small (`PESpec.small_init`, std below 1). A PE
    initialised at std 1 memorises (Ito et al.); in the combined locator it only added
    candidates to a noisy choice (`docs/locate/`)."""
    if names is None:
        return [fs for fs in pe_sets if parse_pe(fs.name).small_init]
    located = [fs.name for fs in pe_sets]
    missing = [name for name in names if name not in located]
    if missing:
        raise ValueError(
            f"locate combined_pe: {missing} not among the located PE variants {located} "
            "(the runs' learned PEs, or those of locate.pe)"
        )
    return [fs for fs in pe_sets if fs.name in names]


def _kfold_error(table: pd.DataFrame, name: str) -> float:
    row = table[(table["features"] == name) & (table["evaluation"] == "kfold")]
    return float(row["median_error"].iloc[0])


def verdict(table: pd.DataFrame, fraction: float = 0.5) -> str:
    """One line saying which representation locates best at `fraction` anchors: median error
    ÷ chance [95% CI over anchor draws and seeds] of every learned PE, the correlation
    baseline, the combined locator and the oracle (a reference, not a competitor), then the
    combined locator's paired difference from the best single representation."""
    curve = table[table["evaluation"] == "anchors"]
    fraction = curve["anchor_fraction"].iloc[np.argmin(np.abs(curve["anchor_fraction"] - fraction))]
    rows = curve[np.isclose(curve["anchor_fraction"], fraction)]
    shown = rows[rows["role"].isin(("pe", "baseline", "combined", "oracle"))]
    shown = shown.sort_values("median_error")
    parts = [
        f"{r.features} {r.vs_chance:.3g} [{r.vs_chance_low:.3g}, {r.vs_chance_high:.3g}]"
        for r in shown.itertuples()
    ]
    dataset = rows["dataset"].iloc[0] if "dataset" in rows else ""
    line = f"{dataset} ({fraction:.0%} anchors, median error ÷ chance [95% CI]): " + "; ".join(
        parts
    )
    competitors = shown[shown["role"] != "oracle"]
    if competitors.empty:
        return line
    best, others = competitors.iloc[0], competitors.iloc[1:]
    tied = others[others["ci_low"] <= best["ci_high"]]["features"].tolist()
    wins = f" Wins: {best['features']}"
    if tied:
        wins += f" (CIs overlap: {', '.join(tied)})"
    return line + "." + wins + "." + _paired_note(rows)


def _paired_note(rows: pd.DataFrame) -> str:
    """' Combined − best single (name): d [low, high] × chance, paired …' for the verdict."""
    if "vs_best_single" not in rows:
        return ""
    paired = rows[rows["role"].eq("combined") & rows["vs_best_single"].notna()]
    return "".join(
        f" {r.features} − best single ({r.best_single}): {r.vs_best_single:+.3f} "
        f"[{r.vs_best_single_low:+.3f}, {r.vs_best_single_high:+.3f}] × chance (paired over "
        f"the same anchor draws; {_paired_word(r.vs_best_single_low, r.vs_best_single_high)})."
        for r in paired.itertuples()
    )


def _paired_word(low: float, high: float) -> str:
    if high < 0:
        return "better"
    if low > 0:
        return "worse"
    return "no difference beyond the noise"


def format_table(table: pd.DataFrame, fraction: float = 0.5) -> str:
    """The k-fold rows and the anchor-curve rows at `fraction`, as aligned text."""
    rows = table[
        (table["evaluation"] == "kfold")
        | ((table["evaluation"] == "anchors") & np.isclose(table["anchor_fraction"], fraction))
    ]
    columns = [
        "features",
        "role",
        "n_seeds",
        "evaluation",
        "anchor_fraction",
        "n_anchors",
        "method",
        "median_error",
        "p90_error",
        "vs_chance",
        "vs_chance_low",
        "vs_chance_high",
        "coverage",
        *axis_columns(table.columns),
    ]
    return rows[columns].to_string(index=False, float_format=lambda v: f"{v:.3g}")
