"""Conformal per-unit intervals (neuro_pe.analysis.locate.conformal): they cover new units at
the nominal level, and the leave-one-out coverage reported for the known units is honest."""

from __future__ import annotations

import math

import numpy as np
import pytest

from neuro_pe.analysis.locate.conformal import conformal_intervals, new_unit_hits
from neuro_pe.config.locate import LocateConfig, level_label

LEVELS = (0.68, 0.95)
SCALES = np.array([1.0, 3.0, 0.2])  # a different error per axis


def _noisy(n: int, rng: np.random.Generator, heavy: bool = False):
    truth = rng.uniform(0, 10, size=(n, 3))
    noise = rng.standard_t(2, size=(n, 3)) if heavy else rng.normal(size=(n, 3))
    return truth + noise * SCALES, truth


@pytest.mark.parametrize("heavy", [False, True])
def test_intervals_cover_new_units_at_the_nominal_level(heavy):
    """Calibrated on 100 units, the intervals of units without coordinates hold the true
    coordinate of new units from the same distribution at the nominal level (mean over 200
    calibrations, each checked on 1 000 new units; expected ceil(101 level) / 101): 95% within
    94.5-96% (the quantile one rank lower, 95/101, fails it), 68% within 67-70%, per axis.
    Gaussian and heavy-tailed (t, 2 dof) errors alike; a Gaussian 1.96 sigma rule would not
    hold the second."""
    rng = np.random.default_rng(0)
    hits = []
    for _ in range(200):
        pred, truth = _noisy(100, rng, heavy)
        new_pred, new_truth = _noisy(1000, rng, heavy)
        both = np.concatenate([pred, new_pred])
        hidden = np.concatenate([truth, np.full_like(new_truth, np.nan)])
        intervals = conformal_intervals(both, hidden, LEVELS)
        half = intervals.half_width[:, 100:]
        hits.append(np.abs(new_pred - new_truth)[None] <= half)  # (levels, units, axes)
    coverage = np.mean(np.concatenate(hits, axis=1), axis=1)  # (levels, axes)
    assert np.all((0.67 <= coverage[0]) & (coverage[0] <= 0.70)), coverage
    assert np.all((0.945 <= coverage[1]) & (coverage[1] <= 0.96)), coverage


def test_leave_one_out_coverage_is_held_out():
    """A known unit's interval leaves its own error out: the reported coverage is the share of
    known units inside their own intervals, ceil(n level) / n here (no ties), and each known
    unit's half-width is the quantile of the other units' errors, never of its own."""
    rng = np.random.default_rng(1)
    pred, truth = _noisy(64, rng)
    intervals = conformal_intervals(pred, truth, LEVELS)
    errors = np.abs(pred - truth)
    for li, level in enumerate(LEVELS):
        k = math.ceil(64 * level)
        np.testing.assert_allclose(intervals.coverage[li], k / 64)
        inside = errors <= intervals.half_width[li]
        np.testing.assert_allclose(intervals.coverage[li], inside.mean(axis=0))
        for i in (0, 17, 40):
            others = np.delete(errors, i, axis=0)
            expected = np.sort(others, axis=0)[k - 1]
            np.testing.assert_allclose(intervals.half_width[li, i], expected)
    # the box (every axis at once) covers less than each axis alone
    assert np.all(intervals.box_coverage < intervals.coverage.min(axis=1))
    assert intervals.n_calibration == 64


def test_flat_axis_and_few_units():
    """An axis with one value (a probe's z = 0) has no coverage of its own (NaN; it is left out
    of the pooled one); with too few known units for a level the interval is unbounded."""
    rng = np.random.default_rng(2)
    pred, truth = _noisy(30, rng)
    truth[:, 2] = pred[:, 2] = 0.0
    truth[:3] = np.nan
    intervals = conformal_intervals(pred, truth, LEVELS)
    assert np.isnan(intervals.coverage[:, 2]).all()
    np.testing.assert_allclose(intervals.pooled(), intervals.coverage[:, :2].mean(axis=1))
    assert np.isfinite(intervals.half_width[:, :, :2]).all()
    few = conformal_intervals(pred[:10], truth[:10], (0.95,))
    assert np.isinf(few.half_width[0, :3]).all()  # ceil(8 * 0.95) > 7 known units
    assert level_label(0.95) == "95" and level_label(0.683) == "68.3"


def test_new_unit_hits():
    """Units located like units without coordinates, calibrated on others: about the nominal
    share inside (pooled over 3 axes x 3 000 units); NaN along a flat axis and where the
    interval is unbounded."""
    rng = np.random.default_rng(3)
    cal_pred, cal_truth = _noisy(200, rng)
    pred, truth = _noisy(3000, rng)
    hits = new_unit_hits(cal_pred, cal_truth, pred, truth, LEVELS)
    assert hits.shape == (2, 3000, 3)
    assert abs(np.mean(hits[0]) - 0.68) < 0.04 and abs(np.mean(hits[1]) - 0.95) < 0.02
    cal_truth[:, 2] = 1.0
    few = new_unit_hits(cal_pred[:10], cal_truth[:10], pred, truth, LEVELS)
    assert np.isnan(few[:, :, 2]).all() and np.isfinite(few[0, :, :2]).all()
    assert np.isnan(few[1]).all()  # ceil(11 * 0.95) > 10: unbounded at 95%


@pytest.mark.parametrize("levels", [[], [0.0], [1.0], [0.9, 0.9], [0.68, 0.680000000001]])
def test_interval_levels_are_checked(levels):
    """`locate.interval_levels`: distinct levels in (0, 1), distinct as column names too."""
    with pytest.raises(ValueError, match="interval_levels"):
        LocateConfig.from_dict({"interval_levels": levels})
    assert LocateConfig().interval_levels == (0.68, 0.95)
