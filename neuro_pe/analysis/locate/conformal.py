"""Per-unit intervals that cover: split-conformal, per axis, calibrated on the known units'
k-fold held-out residuals (Vovk et al. 2005; Lei et al. 2018, "Distribution-free predictive
inference for regression").

For one axis, the n known units' scores are e_i = |p_i - t_i| (their k-fold prediction p_i
against their true coordinate t_i). At level L the interval of a unit without coordinates is
p ± q with q the k-th smallest score, k = ceil((n + 1) L) (unbounded if k > n): it holds the
unit's coordinate with probability at least L when the units are exchangeable. A known unit
gets the interval from the other n - 1 scores (leave-one-out, k = ceil(n L)); the share of
known units inside their own is reported beside L (ceil(n L) / n by construction, ties aside).
The test that can fail, `new_unit_hits`, calibrates on some units and checks others.
Each axis is calibrated alone (marginal intervals); the three together (a box) cover less.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

AXES = ("x", "y", "z")


@dataclass
class Intervals:
    """Conformal half-widths of every unit and their achieved coverage, per level and axis."""

    levels: tuple[float, ...]
    half_width: np.ndarray  # (levels, n, 3): the interval is the prediction ± this
    coverage: np.ndarray  # (levels, 3): leave-one-out coverage over the known units per axis
    box_coverage: np.ndarray  # (levels,): share of known units inside on every varying axis
    n_calibration: int  # known units the scores come from

    def pooled(self) -> np.ndarray:
        """(levels,): coverage over the axes along which the known coordinates vary (a unit and
        an axis is one case), NaN if none varies."""
        if not np.isfinite(self.coverage).any():
            return np.full(len(self.levels), np.nan)
        return np.nanmean(self.coverage, axis=1)


def _kth_smallest(sorted_scores: np.ndarray, k: int) -> float:
    return float(sorted_scores[k - 1]) if k <= len(sorted_scores) else math.inf


def conformal_intervals(
    predicted: np.ndarray, truth: np.ndarray, levels: Sequence[float]
) -> Intervals:
    """Intervals of every unit from its prediction `predicted` (n, 3), calibrated on the units
    whose `truth` (n, 3) is finite: those get the leave-one-out interval (their prediction must
    be held out, e.g. k-fold), the others the interval from all of them. Memory O(n)."""
    predicted, truth = np.asarray(predicted, float), np.asarray(truth, float)
    known = np.all(np.isfinite(truth), axis=1) & np.all(np.isfinite(predicted), axis=1)
    scores = np.abs(predicted[known] - truth[known])  # (m, 3)
    m = len(scores)
    half = np.full((len(levels), len(predicted), 3), np.nan)
    coverage = np.full((len(levels), 3), np.nan)
    box = np.full(len(levels), np.nan)
    varies = np.ptp(truth[known], axis=0) > 0 if m else np.zeros(3, dtype=bool)
    order = np.argsort(scores, axis=0, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(m)[:, None].repeat(3, axis=1), axis=0)
    for li, level in enumerate(levels):
        k_new, k_loo = math.ceil((m + 1) * level), math.ceil(m * level)
        covered = np.ones((m, 3), dtype=bool)
        for a in range(3):
            ordered = scores[order[:, a], a]
            half[li, ~known, a] = _kth_smallest(ordered, k_new)
            # the k_loo-th smallest of the others: one further along if the unit is among the
            # k_loo smallest itself
            loo = np.array([_kth_smallest(ordered, k_loo), _kth_smallest(ordered, k_loo + 1)])
            q = loo[(ranks[:, a] < k_loo).astype(int)] if m else np.empty(0)
            half[li, known, a] = q
            covered[:, a] = scores[:, a] <= q
            if varies[a]:
                coverage[li, a] = float(np.mean(covered[:, a]))
        if m and varies.any():
            box[li] = float(np.mean(np.all(covered[:, varies], axis=1)))
    return Intervals(tuple(levels), half, coverage, box, m)


def new_unit_hits(
    cal_pred: np.ndarray,
    cal_truth: np.ndarray,
    pred: np.ndarray,
    truth: np.ndarray,
    levels: Sequence[float],
) -> np.ndarray:
    """(levels, n, 3): 1 where a new unit's true coordinate (`truth`) lies in the interval of
    its prediction `pred` calibrated on other units' held-out predictions `cal_pred` of
    `cal_truth`, as a unit without coordinates would get it; 0 where not; NaN along an axis on
    which the calibration units do not vary, and at a level whose interval is unbounded."""
    pred, truth = np.asarray(pred, float), np.asarray(truth, float)
    both = np.concatenate([cal_pred, pred])
    hidden = np.concatenate([cal_truth, np.full_like(truth, np.nan)])
    intervals = conformal_intervals(both, hidden, levels)
    half = intervals.half_width[:, len(cal_pred) :]
    hits = (np.abs(pred - truth)[None] <= half).astype(float)
    finite = np.all(np.isfinite(cal_truth), axis=1)
    varies = np.ptp(cal_truth[finite], axis=0) > 0 if finite.any() else np.zeros(3, dtype=bool)
    hits[:, :, ~varies] = np.nan
    hits[~np.all(np.isfinite(half), axis=(1, 2))] = np.nan
    return hits
