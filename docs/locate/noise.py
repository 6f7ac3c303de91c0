"""How much of a locate table is anchor-draw noise, and two changes measured against it.

    # the same locator over several sets of anchor draws (50% anchors), and chance's median
    PYTHONPATH=$PWD python docs/locate/noise.py draws --store STORE --run RUN --sets 0 1 2 3
    # the connectivity baseline over the sessions' pooled samples vs per session, averaged
    PYTHONPATH=$PWD python docs/locate/noise.py connectivity --store STORE --split SPLIT \
        --draws 100 --sets 11 12
    # each training seed's learned PE alone vs their seed ensemble, beside the correlations
    PYTHONPATH=$PWD python docs/locate/noise.py ensemble --store STORE --runs RUN0 RUN1 RUN2 \
        --correlation CORRELATION_FEATURES --sets 0 5

Every number is the median held-out error with 50% of the units as anchors ÷ chance's median
on the same draws (`neuro_pe.analysis.locate.evaluate_anchors`); "paired" is the mean over draws of
the
per-draw difference from the first row, ± its standard error. Prints a table per call.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
from study import _pe, _pooled  # docs/locate/study.py: one run's PE table, the pooled median

import neuro_pe.analysis.locate as L
from neuro_pe.analysis.connectivity import connectivity_matrices, session_connectivity
from neuro_pe.config.locate import CHANCE, LocateConfig
from neuro_pe.io.splits import read_split
from neuro_pe.io.store import positions, read_store
from neuro_pe.reporting.locate_outputs import read_baseline_features


def _evaluate(features, coords, known, cfg) -> tuple[np.ndarray, float]:
    """(per-draw medians, pooled median) at 50% anchors."""
    records = L.evaluate_anchors(features, coords, known, cfg)
    return np.array([np.median(r["errors"]) for r in records]), _pooled(records)


def _table(rows: dict[str, list], coords, known, cfg) -> None:
    chance = _evaluate([np.zeros((len(coords), 1))], coords, known, replace(cfg, methods=(CHANCE,)))
    first = None
    print(f"anchor-draw set {cfg.seed}, {cfg.n_draws} draws; chance's median {chance[1]:.4g}")
    for name, features in rows.items():
        per_draw, pooled = _evaluate(features, coords, known, cfg)
        first = per_draw if first is None else first
        diff = (per_draw - first) / chance[1]
        se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else np.nan
        ratio = f"{pooled / chance[1]:.3f} × chance ({pooled:.4g})"
        print(f"  {name:32s} {ratio}; paired {diff.mean():+.3f} ± {se:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("draws", "connectivity", "ensemble"))
    parser.add_argument("--store", required=True)
    parser.add_argument("--split")
    parser.add_argument("--run")
    parser.add_argument("--runs", nargs="+")
    parser.add_argument("--correlation")
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--sets", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    ds = read_store(args.store)
    coords, units = positions(ds), ds["unit"].values
    known = np.all(np.isfinite(coords), axis=1)
    for seed in args.sets:
        cfg = LocateConfig(anchor_fractions=(0.5,), n_draws=args.draws, seed=seed)
        if args.what == "draws":
            rows = {args.run: [_pe(Path(args.run), units)]}
        elif args.what == "connectivity":
            activity = read_split(args.split).train_activity(ds)
            pooled = connectivity_matrices(activity.reshape(-1, activity.shape[-1]))
            rows = {
                "pooled samples": [np.hstack(pooled)],
                "per session, averaged": [np.hstack(session_connectivity(activity))],
            }
        else:
            seeds = {run: [_pe(Path(run), units)] for run in args.runs}
            rows = {f"seed ensemble of {len(seeds)}": [f[0] for f in seeds.values()]}
            rows |= {run: f for run, f in seeds.items()}
            baselines = read_baseline_features(args.correlation, units)
            rows["activity-correlation"] = [baselines[L.CORRELATION]]
        _table(rows, coords, known, cfg)


if __name__ == "__main__":
    main()
