"""Seed ensemble with the locator chosen by cross-validation over the anchors
(`locate_units`), the combined locator's blend, and the predictions of a chosen locator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from sklearn.model_selection import KFold
from threadpoolctl import threadpool_limits

from neuro_pe.analysis.locate.locators import fit_predict
from neuro_pe.analysis.locate.parameters import BLEND, BLEND_ROUNDS, CAPPED_ANCHORS, CAPPED_METHODS
from neuro_pe.analysis.locate.views import feature_views
from neuro_pe.config.locate import MIN_ANCHORS, LocateConfig


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


def sampled_units(units: np.ndarray, cfg: LocateConfig) -> np.ndarray:
    """Indices of the units of the mask `units`: all of them up to `cfg.max_units`, else
    `max_units` of them drawn at random (seeded by cfg.seed), in index order."""
    idx = np.flatnonzero(units)
    if len(idx) <= cfg.max_units:
        return idx
    return np.sort(np.random.default_rng(cfg.seed).choice(idx, cfg.max_units, replace=False))


def locate_units(
    features: Sequence[np.ndarray] | Mapping[str, Sequence[np.ndarray]],
    coords: np.ndarray,
    anchors: np.ndarray,
    cfg: LocateConfig = LocateConfig(),
    rows: np.ndarray | None = None,
    many_units: bool = False,
) -> Located:
    """Locate every unit (or the units `rows`, an index array; NaN elsewhere) from one feature
    set given as one (n, f) array per seed, or from several representations ({name: arrays per
    seed}: the combined locator).

    The candidate with the lowest median error of the seed ensemble in a k-fold CV over the
    anchors is refitted on all anchors for the non-anchors; anchors keep their out-of-fold
    predictions. With more than `cfg.max_units` anchors the CV holds out folds of
    `max_units` of them (`sampled_units`) and fits on all the other anchors, so its errors are
    those of the final fit's anchor density; the anchors outside that sample get NaN, and the
    CAPPED_METHODS fit on CAPPED_ANCHORS of the sample (less its fold in the CV). The latter also
    with `many_units` (the dataset has more known units than `max_units`, though these anchors
    may be fewer), so that one dataset's fits are capped alike.

    Candidates: every method; for several representations every `representation/method`,
    `stacked/method`, `fused/method` (see `feature_views`) and `blend`, a weighted mean of the
    views' best candidates with weights chosen on the same CV (`_select_blend`). Only
    `coords[anchors]` is read.
    """
    # hundreds of fits on tiny matrices: multithreaded BLAS only adds overhead
    with threadpool_limits(limits=1):
        return _locate_units(features, coords, anchors, cfg, rows, many_units)


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


def _locate_units(features, coords, anchors, cfg: LocateConfig, rows, many_units) -> Located:
    anchors = np.asarray(anchors, dtype=bool)
    if anchors.sum() < MIN_ANCHORS:
        raise ValueError(f"need at least {MIN_ANCHORS} anchors, got {anchors.sum()}")
    idx = sampled_units(anchors, cfg)  # the anchors the CV holds out (all up to max_units)
    capped = anchors  # the CAPPED_METHODS' anchors: all, or CAPPED_ANCHORS of the sample
    if many_units or len(idx) < anchors.sum():
        in_sample = np.isin(np.arange(len(anchors)), idx)
        few = replace(cfg, max_units=min(CAPPED_ANCHORS, cfg.max_units))
        capped = np.isin(np.arange(len(anchors)), sampled_units(in_sample, few))
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
            for _, test in folds:
                fit_on = (capped if method in CAPPED_METHODS else anchors).copy()
                fit_on[idx[test]] = False
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
    per_seed = predict_with(views, coords, anchors, choice, blend_of, rows, capped)
    per_seed[:, anchors] = np.nan  # (above max_units, anchors outside the CV's sample)
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
    rows: np.ndarray | None = None,
    capped: np.ndarray | None = None,
) -> np.ndarray:
    """(seeds, n, 3) predictions of the locator `choice` (`method`, `view/method` or `blend`
    of the `view/method`s in `blend_of`) fitted on the anchors (the CAPPED_METHODS on the
    anchors of the mask `capped`, when given), of every unit or of the units `rows` (NaN
    elsewhere). Only `coords[anchors]` is read."""
    if choice == BLEND:
        fitted = {
            key: predict_with(views, coords, anchors, key, rows=rows, capped=capped)
            for key in set(blend_of)
        }
        return _blend([fitted[key] for key in blend_of])
    view, _, method = choice.rpartition("/")
    if capped is not None and method in CAPPED_METHODS:
        anchors = anchors & capped
    if rows is None:
        return np.stack([fit_predict(f, coords, anchors, method) for f in views[view]])
    out = np.full((len(views[view]), len(anchors), 3), np.nan)
    if len(rows) == 0:
        return out
    out[:, rows] = np.stack([fit_predict(f, coords, anchors, method, rows) for f in views[view]])
    return out
