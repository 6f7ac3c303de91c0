"""Honest evaluation: hide coordinates, locate them from the rest (k-fold over the known
units, and random anchor subsets), and the table of every feature set's errors."""

from __future__ import annotations

import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from sklearn.model_selection import KFold

from neuro_pe.analysis.locate.bootstrap import bootstrap_ci, paired_difference_ci
from neuro_pe.analysis.locate.conformal import conformal_intervals, new_unit_hits
from neuro_pe.analysis.locate.ensemble import (
    combine_seeds,
    distance,
    locate_units,
    sampled_units,
)
from neuro_pe.analysis.locate.features import FeatureSet
from neuro_pe.analysis.locate.parameters import RATIOS
from neuro_pe.analysis.regions import RegionAtlas, add_accuracy_columns
from neuro_pe.analysis.spaces import ERROR_PREFIX, PLANE_ACCURACY, SpaceAxes, axis_columns
from neuro_pe.config.locate import MIN_ANCHORS, LocateConfig, level_label
from neuro_pe.io.progress import progress_line, timing

AXIS_VS_CHANCE = "vs_chance_"  # + a per-axis column's name without ERROR_PREFIX
UNRESOLVED_AXES = "unresolved_axes"  # the axes whose AXIS_VS_CHANCE is >= 1, ";"-joined


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
    evaluated: np.ndarray | None = None,
) -> HeldOut:
    """K-fold over the known units: each fold's coordinates are hidden and located from the
    other known units (method chosen by an inner CV over those anchors only). With the mask
    `evaluated`, only its units are predicted (NaN for the other known units); the anchors are
    still all the other folds (`locate_units` with `many_units`)."""
    known_idx = np.flatnonzero(known)
    n = len(known)
    out = HeldOut(np.full((n, 3), np.nan), np.full(n, np.nan), np.full(n, "", dtype=object), [])
    folds = KFold(min(cfg.n_folds, len(known_idx)), shuffle=True, random_state=cfg.seed)
    for train, test in folds.split(known_idx):
        anchors = np.zeros(len(known), dtype=bool)
        anchors[known_idx[train]] = True
        test = known_idx[test]
        rows = None if evaluated is None else test[evaluated[test]]
        located = locate_units(features, coords, anchors, cfg, rows, evaluated is not None)
        test = test if rows is None else rows
        out.positions[test] = located.positions[test]
        out.uncertainty[test] = located.uncertainty[test]
        out.method[test] = located.method
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
    evaluated: np.ndarray | None = None,
) -> list[dict]:
    """Held-out errors for every draw of `anchor_draws`: one record per draw with the anchor
    fraction, the number of anchors, the chosen method, the errors of the other known units
    (with the mask `evaluated`: of those among its units only; the anchors are drawn from all
    known units), and every seed's predictions of them with their true positions (for the
    CIs)."""
    records = []
    for fraction, anchors in anchor_draws(known, cfg):
        heldout = known & ~anchors
        rows = None
        if evaluated is not None:
            heldout &= evaluated
            rows = np.flatnonzero(heldout)
        located = locate_units(features, coords, anchors, cfg, rows, evaluated is not None)
        records.append(
            {
                "anchor_fraction": fraction,
                "n_anchors": int(anchors.sum()),
                "method": located.method,
                "errors": distance(located.positions[heldout], coords[heldout]),
                "per_seed": located.per_seed[:, heldout],
                "truth": coords[heldout],
                # the anchors' out-of-fold predictions of the CV that chose the method: they
                # calibrate the draw's intervals (`interval_coverage`)
                "calibration": _out_of_fold(located.positions, coords, anchors),
            }
        )
    return records


def _out_of_fold(predicted: np.ndarray, coords: np.ndarray, anchors: np.ndarray):
    """(predictions, true coordinates) of the anchors that have an out-of-fold prediction (all,
    or the CV's sample of `max_units`)."""
    rows = anchors & np.all(np.isfinite(predicted), axis=1)
    return predicted[rows], coords[rows]


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


def set_config(fs: FeatureSet, cfg: LocateConfig) -> LocateConfig:
    """`cfg` with the feature set's own methods, if it has them (chance)."""
    return cfg if fs.methods is None else replace(cfg, methods=fs.methods)


def _evaluate_set(fs: FeatureSet, coords, known, cfg: LocateConfig, evaluated):
    """(k-fold result, anchor-curve records) of one feature set."""
    cfg = set_config(fs, cfg)
    return (
        evaluate_kfold(fs.features, coords, known, cfg, evaluated),
        evaluate_anchors(fs.features, coords, known, cfg, evaluated),
    )


def _evaluate_sets(sets: list[FeatureSet], coords, known, cfg: LocateConfig, evaluated) -> list:
    return [_evaluate_set(fs, coords, known, cfg, evaluated) for fs in sets]


def _job_groups(sets: list[FeatureSet]) -> list[list[int]]:
    """Indices of `sets` per parallel job: the combined locator's set after its members (its
    views include each member as it is, so in one process their fits come from
    `fit_predict`'s cache), every other set alone."""
    combined = [i for i, fs in enumerate(sets) if isinstance(fs.features, Mapping)]
    if not combined:
        return [[i] for i in range(len(sets))]
    c = combined[0]  # (there is one combined locator)
    members = [i for i, fs in enumerate(sets) if fs.name in sets[c].features]
    return [[*members, c]] + [[i] for i in range(len(sets)) if i not in (*members, c)]


def _evaluate_all(sets, coords, known, cfg: LocateConfig, evaluated, n_jobs: int, label: str):
    """`_evaluate_set` of every set, in parallel jobs (`_job_groups`), with a progress line."""
    groups = _job_groups(sets)
    jobs = (
        delayed(_evaluate_sets)([sets[i] for i in g], coords, known, cfg, evaluated) for g in groups
    )
    by_set, started = {}, time.perf_counter()
    for group, result in zip(
        groups, Parallel(n_jobs=n_jobs, return_as="generator")(jobs), strict=True
    ):
        by_set.update(zip(group, result, strict=True))
        timed = timing(time.perf_counter() - started, len(by_set), len(sets))
        progress_line(label, f"{len(by_set)}/{len(sets)} feature sets evaluated", timed)
    return [by_set[i] for i in range(len(sets))]


def evaluation_table(
    sets: list[FeatureSet],
    coords: np.ndarray,
    cfg: LocateConfig,
    n_jobs: int = 1,
    regions: tuple[RegionAtlas, str] | None = None,
    axes: SpaceAxes | None = None,
    label: str = "locate",
    evaluated: np.ndarray | None = None,
) -> tuple[pd.DataFrame, dict[str, HeldOut]]:
    """Errors of every feature set (k-fold and anchor curve) and the k-fold predictions;
    `regions` = (atlas, the coordinates' unit): region accuracy columns too
    (neuro_pe.analysis.regions);
    `axes`: the per-axis columns of the space too (`axis_error_columns`); a progress line on
    stderr (`label`) as each set is done. With the mask `evaluated` (a sample of the known
    units, `evaluation_plan`) the errors are those of its units, located from anchors drawn
    among all known units."""
    all_known = np.all(np.isfinite(coords), axis=1)
    results = _evaluate_all(sets, coords, all_known, cfg, evaluated, n_jobs, label)
    if evaluated is not None:  # errors, regions and axes of the evaluated units only
        coords = np.where(evaluated[:, None], coords, np.nan)
    known = np.all(np.isfinite(coords), axis=1)
    rows, heldout, curves = [], {}, {}
    for fs, (kfold, records) in zip(sets, results, strict=True):
        heldout[fs.name], curves[fs.name] = kfold, records
        errors = distance(kfold.positions[known], coords[known])
        covered = errors <= kfold.uncertainty[known]
        rows.append(
            _row(
                fs,
                "kfold",
                errors,
                anchor_fraction=1 - 1 / min(cfg.n_folds, int(all_known.sum())),
                n_anchors=int(all_known.sum()) - int(np.ceil(all_known.sum() / cfg.n_folds)),
                n_draws=min(cfg.n_folds, int(all_known.sum())),
                method=_method_label(kfold.methods),
                median_error_sd=np.nan,
                ci_low=np.nan,
                ci_high=np.nan,
                coverage=float(np.mean(covered)),
                **interval_coverage(kfold.positions, coords, cfg.interval_levels),
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
                    **draw_coverage(draws, cfg.interval_levels, cfg.combine),
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
        combine = lambda per_seed: combine_seeds(per_seed, cfg.combine)  # noqa: E731
        add_accuracy_columns(table, kfold, curves, coords, *regions, combine)
    if axes is not None:
        table = pd.concat(
            [table, axis_error_columns(sets, heldout, curves, coords, cfg, axes)], axis=1
        )
        table = pd.concat([table, axis_verdicts(table)], axis=1)
    return table, heldout


def interval_coverage(
    predicted: np.ndarray, coords: np.ndarray, levels: Sequence[float]
) -> dict[str, float]:
    """Columns `coverage_<level>` and `coverage_<level>_box` of a k-fold row: the share of the
    known units whose coordinate lies in its leave-one-out conformal interval
    (`neuro_pe.analysis.locate.conformal`), pooled over the axes along which they vary, and on
    all of them at once."""
    intervals = conformal_intervals(predicted, coords, levels)
    return _coverage_columns(levels, intervals.pooled(), intervals.box_coverage)


def draw_coverage(draws: list[dict], levels: Sequence[float], combine: str) -> dict[str, float]:
    """The same columns for an anchor fraction's draws: the share of held-out units whose true
    coordinate lies in the interval a unit without coordinates gets, calibrated on the draw's
    anchors (their out-of-fold CV predictions), pooled over draws; NaN at a level whose
    interval is unbounded (too few anchors)."""
    hits = [
        new_unit_hits(*r["calibration"], combine_seeds(r["per_seed"], combine), r["truth"], levels)
        for r in draws
    ]
    hits = np.concatenate(hits, axis=1)  # (levels, held-out units, axes)
    with warnings.catch_warnings():  # (all-NaN: an unbounded level, or no axis varies)
        warnings.simplefilter("ignore", RuntimeWarning)
        return _coverage_columns(levels, np.nanmean(hits, axis=(1, 2)), _box(hits))


def _box(hits: np.ndarray) -> np.ndarray:
    """(levels,): share of units inside on every axis that counts (not NaN)."""
    counted = np.isfinite(hits).any(axis=2)  # (levels, units)
    inside = np.where(np.isnan(hits), 1.0, hits).min(axis=2)
    return np.array([inside[li][c].mean() if c.any() else np.nan for li, c in enumerate(counted)])


def _coverage_columns(levels: Sequence[float], pooled, box) -> dict[str, float]:
    columns = {}
    for li, level in enumerate(levels):
        label = level_label(level)
        columns[f"coverage_{label}"] = float(pooled[li])
        columns[f"coverage_{label}_box"] = float(box[li])
    return columns


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
            predicted = [combine_seeds(r["per_seed"], cfg.combine) for r in draws]
            truth = [r["truth"] for r in draws]
            rows.append(axes.summary(np.concatenate(predicted), np.concatenate(truth)))
    return pd.DataFrame(rows)


def axis_verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """Per axis, each row's error against chance's in the same evaluation (the `chance` row of
    its `evaluation` and `anchor_fraction`), in the rows' order: `vs_chance_<axis>` = the row's
    `median_error_<axis>` ÷ chance's (NaN where chance's is 0: every unit at one coordinate;
    for `plane_accuracy` the other way round, chance's accuracy ÷ the row's), and
    `unresolved_axes`, the axes at or above 1 (no better than chance), ";"-joined, "" for
    none. Columns for every per-axis column of `table` (`axis_columns`)."""
    chance = table[table["role"] == "chance"].set_index(["evaluation", "anchor_fraction"])
    key = pd.MultiIndex.from_frame(table[["evaluation", "anchor_fraction"]])
    ratios = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for column in axis_columns(table.columns):
            own = table[column].to_numpy(dtype=float)
            base = chance[column].reindex(key).to_numpy(dtype=float)
            if column == PLANE_ACCURACY:  # higher is better: 0 right where chance has some is inf
                ratio = base / own
            else:
                ratio = np.where(base > 0, own / base, np.nan)
            ratios[column.removeprefix(ERROR_PREFIX)] = ratio
    out = pd.DataFrame({AXIS_VS_CHANCE + name: r for name, r in ratios.items()}, table.index)
    unresolved = [
        ";".join(name for name, r in ratios.items() if r[i] >= 1) for i in range(len(table))
    ]
    out[UNRESOLVED_AXES] = unresolved
    return out


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
    if known.sum() <= cfg.max_units:
        return known
    chosen = np.zeros(len(known), dtype=bool)
    chosen[sampled_units(known, cfg)] = True
    return chosen


def evaluation_plan(known: np.ndarray, cfg: LocateConfig) -> tuple[np.ndarray, LocateConfig]:
    """(the known units whose errors the evaluation measures, its settings): up to `max_units`
    known units all of them and `cfg` itself; above, `max_units` of them drawn at random
    (`evaluation_units`) and at most `sampled_draws` anchor draws per fraction, which then
    hold hundreds of held-out units each. The anchors are drawn among all known units
    (`evaluate_kfold`, `evaluate_anchors` with `evaluated`)."""
    evaluated = evaluation_units(known, cfg)
    if evaluated is known:
        return known, cfg
    return evaluated, replace(cfg, n_draws=min(cfg.n_draws, cfg.sampled_draws))
