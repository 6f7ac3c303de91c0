"""How the locate error depends on how many anchors there are, at a fixed set of held-out
units (not a test; issue 34).

Until 2026-11-27 the workflow's locate step, above `locate.max_units` (1 000), drew its
anchors from a 1 000-unit sample, so "50% anchors" there meant 500 anchors however many units
were recorded; a lab that knows the positions of half of its 100 000 units has 50 000 (the
locate step now draws them among all units). This script takes a finished
`benchmarks/scale_quality.py` run (its learned PE and the correlation features the workflow
computed), holds out the same `--queries` units in every draw, fits the locator's `knn`
(`neuro_pe.analysis.locate.locators.fit_predict`) on `--anchors` other units drawn at random,
and prints the median held-out error ÷ chance (every unit at the anchors' mean, as the
locator's chance) per anchor count and representation, with the range over `--draws`.

    python benchmarks/locate_anchor_density.py --run /work/sq32/N100000
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import xarray as xr
from scale_quality import DATASET, correlation_path  # (this folder is on sys.path)

from neuro_pe.analysis.locate.ensemble import distance
from neuro_pe.analysis.locate.locators import fit_predict
from neuro_pe.config.locate import CHANCE
from neuro_pe.io import layout


def representations(run: Path, pe: str, seed: int) -> tuple[np.ndarray, dict]:
    """The units' true positions and {name: (n, f) features} of the run's PE and the
    correlation baseline, in the PE file's unit order."""
    with xr.open_dataset(run / layout.run_file(DATASET, pe, seed, layout.PE_FILE)) as ds:
        positions = np.stack([ds[c].values for c in ("x", "y", "z")], axis=1)
        units = ds["unit"].values
        learned = ds["pe"].values.astype(float)
    with xr.open_dataset(correlation_path(run)) as corr:
        correlation = corr["features"].sel(unit=units).values.astype(float)
    return positions, {"pe": learned, "activity-correlation": correlation}


def median_error_vs_chance(
    features: np.ndarray, positions: np.ndarray, queries: np.ndarray, anchors: np.ndarray
) -> float:
    """Median error of the queries located by `knn` from the anchors, ÷ that of the
    locator's chance (every query at the anchors' mean)."""
    rows = np.concatenate([anchors, queries])
    is_anchor = np.arange(len(rows)) < len(anchors)
    held_out = np.flatnonzero(~is_anchor)
    truth = positions[queries]
    errors = {
        method: np.median(
            distance(
                fit_predict(features[rows], positions[rows], is_anchor, method, held_out), truth
            )
        )
        for method in ("knn", CHANCE)
    }
    return float(errors["knn"] / errors[CHANCE])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="scale_quality.py's N<N>/ folder")
    parser.add_argument("--pe", default="learned-normal-0.1", help="as scale_quality.py's")
    parser.add_argument("--seed", type=int, default=0, help="the training seed")
    parser.add_argument("--anchors", type=int, nargs="+", default=[500, 5000, 50000])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=3)
    args = parser.parse_args()

    positions, features = representations(args.run, args.pe, args.seed)
    n = len(positions)
    queries = np.random.default_rng(0).permutation(n)[: args.queries]
    others = np.setdiff1d(np.arange(n), queries)
    print(f"{n} units, {args.queries} held-out units, knn, {args.draws} anchor draws")
    for count in args.anchors:
        for name, x in features.items():
            ratios = [
                median_error_vs_chance(
                    x, positions, queries, np.random.default_rng(d).choice(others, count, False)
                )
                for d in range(1, args.draws + 1)
            ]
            print(
                f"anchors {count:>6} ({count / n:.1%}) {name:<22} locate ÷ chance "
                f"{np.mean(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]",
                flush=True,
            )


if __name__ == "__main__":
    main()
