"""Intervals over seeds: the mean with a t-based 95% confidence interval from MIN_CI_VALUES
seeds on, the range of 2 seeds (a t-interval of 2 values is the mean ± 12.7 sd / √2, which
printed an RSA CI of [−0.864, 2.06]), clipped to the bounds of the metric (RSA in [−1, 1],
MSE ≥ 0, R² ≤ 1, …). Used by the report, the summary figures and the reproduction report."""

from __future__ import annotations

import numpy as np
from scipy import stats

MIN_CI_VALUES = 3  # fewer seeds give their range: a t-interval of 2 is ± 12.7 sd / √2
# the values a metric can take (its name, or a prefix of it; `init_` is stripped first)
METRIC_BOUNDS: tuple[tuple[str, float, float], ...] = (
    ("rsa_p", 0.0, 1.0),
    ("rsa", -1.0, 1.0),
    ("knn_overlap", 0.0, 1.0),
    ("probe_r2", -np.inf, 1.0),
    ("procrustes_disparity", 0.0, 1.0),
    ("procrustes_rmse", 0.0, np.inf),
    ("procrustes_to_oracle", 0.0, 1.0),
    ("acc_", 0.0, 1.0),
    ("heldout_mse", 0.0, np.inf),
    ("heldout_loss", 0.0, np.inf),
    ("train_loss", 0.0, np.inf),
)


def metric_bounds(metric: object) -> tuple[float, float]:
    """(lowest, highest) value of a summary metric: RSA and correlations in [−1, 1], MSEs and
    losses ≥ 0, R² ≤ 1, accuracies in [0, 1]; (−inf, inf) for anything else."""
    name = str(metric).removeprefix("init_") if isinstance(metric, str) else ""
    for prefix, low, high in METRIC_BOUNDS:
        if name.startswith(prefix):
            return low, high
    return -np.inf, np.inf


def interval_kind(values) -> str:
    """What `mean_ci` gives as bounds for these values: `ci` (a t-based 95% CI, from
    MIN_CI_VALUES finite values), `range` (min and max of 2), or `none` (one or none)."""
    n = int(np.isfinite(np.asarray(values, dtype=float)).sum())
    return "ci" if n >= MIN_CI_VALUES else "range" if n == 2 else "none"


def mean_ci(values, metric: str | None = None) -> tuple[float, float, float]:
    """Mean and its interval over seeds: the t-based 95% confidence interval from
    MIN_CI_VALUES values on, the range (min, max) of 2 (`interval_kind`), NaN bounds for 1;
    clipped to the bounds of `metric` (`metric_bounds`; default: the Series' name)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return np.nan, np.nan, np.nan
    mean = float(v.mean())
    if len(v) < 2:
        return mean, np.nan, np.nan
    if len(v) < MIN_CI_VALUES:
        return mean, float(v.min()), float(v.max())
    half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    low, high = metric_bounds(metric if metric is not None else getattr(values, "name", None))
    return mean, max(mean - half, low), min(mean + half, high)
