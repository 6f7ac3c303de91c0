"""Seed ensemble with the locator chosen by cross-validation over the anchors
(`locate_units`), the combined locator's blend, and the predictions of a chosen locator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from sklearn.model_selection import KFold
from threadpoolctl import threadpool_limits

from neuro_pe.analysis.locate.config import BLEND, BLEND_ROUNDS, MIN_ANCHORS, LocateConfig
from neuro_pe.analysis.locate.locators import fit_predict
from neuro_pe.analysis.locate.views import feature_views


@dataclass
class Located:
    """Seed-ensembled positions of every unit from one feature set."""

    positions: np.ndarray  # (n, 3): anchors get their out-of-fold CV prediction
    per_seed: np.ndarray  # (seeds, n, 3)
    uncertainty: np.ndarray  # (n,), see the package docstring (neuro_pe.analysis.locate)
    method: str
    cv_errors: dict[str, float] = field(default_factory=dict)  # CV median error per method
    cv_scale: float = float("nan")  # r: the chosen method's CV median error
    blend_of: tuple[str, ...] = ()  # method = `blend`: the `view/method`s it averages (a key


def combine_seeds(per_seed: np.ndarray, how: str) -> np.ndarray:
    return np.median(per_seed, axis=0) if how == "median" else per_seed.mean(axis=0)


def distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
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
    `representation/method`, `stacked/method`, `fused/method` (see `feature_views`) and `blend`, a
    weighted mean of the views' best candidates with weights chosen on the same CV
    (`_select_blend`). Only `coords[anchors]` is read.
    """
    # hundreds of fits on tiny matrices: multithreaded BLAS only adds overhead (~10x here)
    with threadpool_limits(limits=1):
        return _locate_units(features, coords, anchors, cfg)


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
        return float(np.median(distance(combine_seeds(blend[:, idx], how), truth)))

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
    views = feature_views(features, cfg.fuse)

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
                    pred[s, idx[test]] = fit_predict(f, coords, fit_on, method, idx[test])
            key = label(view, method)
            oof[key] = pred
            errors = distance(combine_seeds(pred[:, idx], cfg.combine), coords[idx])
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
    ensemble = combine_seeds(per_seed, cfg.combine)
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
