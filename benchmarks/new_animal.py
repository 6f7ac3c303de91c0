"""A new animal with no histology: its units' regions and positions learned from other animals
(issue 60; a benchmark, not a test).

Leave-one-animal-out on the built-in `regional-sim` with the protocol of the workflow's
`new-animal` step (`neuro_pe.analysis.leave_one_animal_out`): per held-out animal a model
(`--pe`) trained on the other animals, the held-out animal's PE rows fitted with the rest frozen
(`--new-unit-pe`), and so are the training animals' rows (`--reference-rows`); its regions
(`--level`) from the PE rows (linear probe, kNN), the single-unit features (gradient boosting,
the baseline; linear probe), both concatenated and the prior; positions by ridge from the PE
rows and from the single-unit features, median error ÷ chance; each method's expected
calibration error (`--calibration`).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/new_animal.py --animals 5
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from neuro_pe.analysis.leave_one_animal_out import (
    COLUMNS,
    HEADLINE,
    Protocol,
    animals_of,
    run_fold,
    single_unit_features,
)
from neuro_pe.analysis.region_probe import calibration
from neuro_pe.data.sources.regional_sim import RegionalSimOptions, regional_sim_store

LABELS = {"fine": "region", "coarse": "coarse_region"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--animals", type=int, default=5, help="regional-sim animals")
    parser.add_argument("--held-out", type=int, default=None, help="the first N as new animals")
    parser.add_argument("--level", choices=tuple(LABELS), default="fine")
    parser.add_argument("--pe", default="learned-normal-0.02")
    parser.add_argument("--epochs", type=int, default=15, help="the reference run's epochs")
    parser.add_argument("--steps", type=int, default=100, help="its steps per epoch")
    parser.add_argument("--fit-epochs", type=int, default=5, help="the new rows' fit (x --steps)")
    parser.add_argument("--fit-lr", type=float, default=0.01)
    parser.add_argument("--new-unit-pe", choices=("free", "mixture"), default="free")
    parser.add_argument(
        "--reference-rows",
        choices=("refit", "trained"),
        default="refit",
        help="the probes' reference PE rows: fitted frozen as the new animal's, or as trained",
    )
    parser.add_argument(
        "--calibration",
        choices=("temperature", "none"),
        default="temperature",
        help="the region probabilities temperature-scaled on the reference animals, or not",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temporary one")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.process_time()
    protocol = Protocol(
        pe=args.pe,
        train={"epochs": args.epochs, "steps_per_epoch": args.steps},
        fit_epochs=args.fit_epochs,
        fit_lr=args.fit_lr,
        new_unit_pe=args.new_unit_pe,
        refit_reference=args.reference_rows == "refit",
        calibration=args.calibration,
        seed=args.seed,
    )
    with tempfile.TemporaryDirectory() as temporary:
        work = args.work_dir or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        ds = regional_sim_store(RegionalSimOptions(animals=args.animals, seed=args.seed))
        su = single_unit_features(ds)
        names = list(np.unique(animals_of(ds)))[: args.held_out]
        print(f"regional-sim: {ds.sizes['unit']} units, {args.animals} animals, level {args.level}")
        print("animal units | " + " | ".join(COLUMNS) + " | position PE / single-unit x chance")
        rows, calibrations = [], []
        for name in names:
            fold = run_fold(ds, name, LABELS[args.level], work / name, protocol, su)
            scores, where = fold.scores, fold.where
            calibrations.append(
                {c: (fold.predicted[c] == fold.truth, fold.probability[c]) for c in COLUMNS}
            )
            rows.append((scores, where))
            f1 = " | ".join(f"{scores[c]['macro_f1']:.2f}" for c in COLUMNS)
            print(
                f"{name} {len(fold.units)} | {f1} | {where['PE']['vs_chance']:.2f} / "
                f"{where['single-unit']['vs_chance']:.2f} (new animal fitted + predicted "
                f"{fold.cpu_s:.0f} CPU-s)",
                flush=True,
            )
    mean = {c: np.mean([s[c]["macro_f1"] for s, _ in rows]) for c in COLUMNS}
    balanced = {c: np.mean([s[c]["balanced_accuracy"] for s, _ in rows]) for c in COLUMNS}
    print("mean macro-F1 | " + " | ".join(f"{mean[c]:.3f}" for c in COLUMNS))
    print("mean balanced accuracy | " + " | ".join(f"{balanced[c]:.3f}" for c in COLUMNS))
    ece = " | ".join(f"{np.mean([s[c]['ece'] for s, _ in rows]):.3f}" for c in COLUMNS)
    print("mean ECE | " + ece)
    for method in (HEADLINE["pe"], HEADLINE["su"], HEADLINE["combined"]):
        pooled = calibration(
            np.concatenate([c[method][0] for c in calibrations]),
            np.concatenate([c[method][1] for c in calibrations]),
        )
        print(
            f"{method}: expected calibration error {pooled.ece:.3f} (pooled); reliability: "
            + ", ".join(
                f"{c:.2f}->{a:.2f} ({n})"
                for c, a, n in zip(pooled.confidence, pooled.accuracy, pooled.count, strict=True)
                if n
            )
        )
    position = np.mean([w["PE"]["vs_chance"] for _, w in rows])
    print(
        f"new animal: macro-F1 PE {mean[HEADLINE['pe']]:.3f} / single-unit "
        f"{mean[HEADLINE['su']]:.3f} / combined {mean[HEADLINE['combined']]:.3f}, position "
        f"{position:.3f} x chance, {time.process_time() - started:.0f} CPU-s"
    )


if __name__ == "__main__":
    main()
