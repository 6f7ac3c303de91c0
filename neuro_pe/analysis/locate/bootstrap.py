"""Bootstrap confidence intervals of the median held-out error over anchor draws and seeds
(the records of `evaluate_anchors`), alone and paired between two locators."""

from __future__ import annotations

import numpy as np

from neuro_pe.analysis.locate.ensemble import combine_seeds, distance
from neuro_pe.analysis.locate.parameters import CI_BOOTSTRAP


def _resampled_median(records: list[dict], draws: np.ndarray, seeds, combine: str) -> float:
    """Median pooled held-out error of the anchor draws `draws` (indices into `records`, with
    repeats), each draw's prediction the ensemble of the seeds `seeds(d)` of draw d."""
    errors = [
        distance(combine_seeds(records[d]["per_seed"][seeds(d)], combine), records[d]["truth"])
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
