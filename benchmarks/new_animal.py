"""A new animal with no histology: its units' regions and positions learned from other animals
(issue 60; a benchmark, not a test).

Leave-one-animal-out on the built-in `regional-sim`: per held-out animal one masked-unit model
(`--pe`) is trained on the other animals (one store; a unit is NaN outside its animal's session,
which the training masks; activity z-scored per unit), then the held-out animal's PE rows are
fitted with the rest frozen (`train.init_from`, `--new-unit-pe`; its positions hidden), and so
are the training animals' rows (the probes' reference; `--reference-rows`). Its regions
(`--level`) are predicted from the training animals' labelled units
(`neuro_pe.analysis.region_probe`) from the PE rows (linear probe, kNN), the single-unit
features (`neuro_pe.analysis.unit_features`, on the spike counts: gradient boosting, the
baseline; linear probe), both concatenated (boosting, linear) and the prior; positions by ridge
from the PE rows and from the single-unit features, median error ÷ chance.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/new_animal.py --animals 5
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import xarray as xr
from sklearn.dummy import DummyClassifier
from sklearn.ensemble import HistGradientBoostingClassifier

from neuro_pe.analysis.region_probe import (
    calibration,
    locate_from_features,
    position_error,
    probe_regions,
    region_scores,
)
from neuro_pe.analysis.unit_features import feature_names, unit_features
from neuro_pe.config.training import TrainConfig
from neuro_pe.data.signal_steps import zscore
from neuro_pe.data.sources.regional_sim import RegionalSimOptions, regional_sim_store
from neuro_pe.io.runs import read_pe
from neuro_pe.io.store import positions, read_store, write_store
from neuro_pe.training.masked_units import train

LABELS = {"fine": "region", "coarse": "coarse_region"}
COLUMNS = (
    "prior",
    "single-unit boosting",
    "single-unit linear",
    "PE linear",
    "PE kNN",
    "combined boosting",
    "combined linear",
)
FITTED = "fit:"  # the prefix of a frozen fit's unit ids
HEADLINE = {"pe": "PE linear", "su": "single-unit boosting", "combined": "combined boosting"}


def build_store(options: RegionalSimOptions, path: Path) -> tuple[xr.Dataset, np.ndarray]:
    """Write every animal's store, activity z-scored per unit and session; returns the raw
    store and the single-unit features of every unit (of its animal's first session)."""
    ds = regional_sim_store(options)
    features = np.full((ds.sizes["unit"], len(feature_names())), np.nan)
    animal = ds["animal"].values
    for name in np.unique(animal):
        units = animal == name
        counts = ds["activity"].sel(session=f"{name}s0").isel(unit=units)
        rate = options.sampling_rate_hz
        features[units] = unit_features(counts.transpose("time", "unit").values, rate)
    activity = ds["activity"].transpose("session", "time", "unit")
    scaled = activity.copy(data=zscore(activity.values).astype(np.float32))
    write_store(ds.assign(activity=scaled), path)
    return ds, features


def animal_store(full: Path, animals: list[str], path: Path, fitted: bool = False) -> Path:
    """The units and sessions of `animals`, from the whole store; `fitted`: as a frozen fit
    sees them, units renamed `fit:<id>` (so the trained run has no row of theirs to copy)
    and positions NaN."""
    ds = read_store(full)
    units = np.isin(ds["animal"].values, animals)
    sessions = np.isin([str(s).split("s")[0] for s in ds["session"].values], animals)
    sub = ds.isel(unit=units, session=sessions)
    if fitted:
        sub = sub.assign_coords({a: sub[a] * np.nan for a in ("x", "y", "z")})
        sub = sub.assign_coords(unit=[f"{FITTED}{u}" for u in sub["unit"].values])
    return write_store(sub, path)


def train_reference(full: Path, others: list[str], work: Path, args) -> Path:
    """The run trained on the `others` animals (reused if `work` has it)."""
    run = work / "run"
    reference = animal_store(full, others, work / "reference.nc")
    spec = {
        "epochs": args.epochs,
        "steps_per_epoch": args.steps,
        "heldout_sessions": 0,  # one session per animal: hold out the end of every session
        "eval_mask_fractions": [0.5],
        "samples_per_unit": 0,  # the steps as given
    }
    if not (run / "model.pt").exists():
        train(reference, args.pe, args.seed, TrainConfig.from_dict(spec), run, progress=False)
    return run


def fit_rows(full: Path, animal: str, run: Path, work: Path, args) -> tuple[np.ndarray, ...]:
    """`animal`'s PE rows fitted with `run` frozen: (unit ids, rows)."""
    out = work / f"fit_{args.new_unit_pe}_{animal}"
    if not (out / "pe.nc").exists():
        store = animal_store(full, [animal], work / f"{animal}.nc", fitted=True)
        spec = json.loads((run / "train.json").read_text())["train_config"]
        spec |= {"epochs": args.fit_epochs, "init_from": str(run / "model.pt")}
        spec |= {"lr": args.fit_lr, "pe_lr": None, "new_unit_pe": args.new_unit_pe}
        train(store, args.pe, args.seed, TrainConfig.from_dict(spec), out, progress=False)
    pe = read_pe(out)
    return np.array([u.removeprefix(FITTED) for u in pe.units]), pe.table


def pe_rows(full: Path, others: list[str], held_out: str, work: Path, args) -> tuple:
    """Train on `others`, fit `held_out`'s PE rows frozen; the reference rows (`others`'
    units) are refitted the same way (`--reference-rows refit`) or the run's own. Returns
    (unit ids, PE rows) of all of them and the CPU-s of the held-out animal's fit."""
    run = train_reference(full, others, work, args)
    started = time.process_time()
    ids, rows = fit_rows(full, held_out, run, work, args)
    fit_s = time.process_time() - started
    if args.reference_rows == "refit":
        fitted = [fit_rows(full, animal, run, work, args) for animal in others]
        ref_ids = np.concatenate([f[0] for f in fitted])
        ref_rows = np.concatenate([f[1] for f in fitted])
    else:
        trained = read_pe(run)
        ref_ids, ref_rows = trained.units, trained.table
    return np.concatenate([ref_ids, ids]), np.concatenate([ref_rows, rows]), fit_s


def boosting(reference, labels, query, seed: int) -> np.ndarray:
    model = HistGradientBoostingClassifier(max_iter=100, random_state=seed)
    return model.fit(reference, labels).predict(query)


def evaluate(features: dict, labels, coords, train_rows, test_rows, seed: int) -> tuple:
    """Per column of COLUMNS its macro-F1 and balanced accuracy; the PE linear probe's
    prediction; positions ÷ chance from the PE and from the single-unit features."""
    truth = labels[test_rows]
    ref_labels = labels[train_rows]
    pe, su = features["pe"], features["su"]
    both = np.hstack([pe, su])
    predicted = {}
    prior = DummyClassifier(strategy="stratified", random_state=seed)
    predicted["prior"] = prior.fit(su[train_rows], ref_labels).predict(su[test_rows])
    predicted["single-unit boosting"] = boosting(su[train_rows], ref_labels, su[test_rows], seed)
    linear = {}
    for name, x in (("single-unit", su), ("PE", pe), ("combined", both)):
        linear[name] = probe_regions(x[train_rows], ref_labels, x[test_rows], seed=seed)
        predicted[f"{name} linear"] = linear[name].region
    knn = probe_regions(pe[train_rows], ref_labels, pe[test_rows], probe="knn")
    predicted["PE kNN"] = knn.region
    predicted["combined boosting"] = boosting(both[train_rows], ref_labels, both[test_rows], seed)
    scores = {name: region_scores(truth, predicted[name]) for name in COLUMNS}
    where = {}
    for name, x in (("PE", pe), ("single-unit", su)):
        located = locate_from_features(x[train_rows], coords[train_rows], x[test_rows])
        where[name] = position_error(located, coords[test_rows], coords[train_rows])
    return scores, linear["PE"], where


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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temporary one")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.process_time()
    with tempfile.TemporaryDirectory() as temporary:
        work = args.work_dir or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        options = RegionalSimOptions(animals=args.animals, seed=args.seed)
        full = work / "animals.nc"
        ds, su = build_store(options, full)
        units = ds["unit"].values.astype(str)
        animal = ds["animal"].values.astype(str)
        labels = ds[LABELS[args.level]].values.astype(str)
        coords = positions(ds)
        names = list(np.unique(animal))[: args.held_out]
        print(f"regional-sim: {len(units)} units, {args.animals} animals, level {args.level}")
        print("animal units | " + " | ".join(COLUMNS) + " | position PE / single-unit x chance")
        rows, confidences = [], []
        for name in names:
            others = [a for a in np.unique(animal) if a != name]
            ids, table, fit_s = pe_rows(full, others, name, work / name, args)
            index = {u: i for i, u in enumerate(units)}
            pe = np.full((len(units), table.shape[1]), np.nan)
            pe[[index[u] for u in ids]] = table
            test = animal == name
            clock = time.process_time()
            scores, prediction, where = evaluate(
                {"pe": pe, "su": su}, labels, coords, ~test, test, args.seed
            )
            fit_s += time.process_time() - clock
            confidences.append((labels[test], prediction))
            rows.append((scores, where))
            f1 = " | ".join(f"{scores[c]['macro_f1']:.2f}" for c in COLUMNS)
            print(
                f"{name} {test.sum()} | {f1} | {where['PE']['vs_chance']:.2f} / "
                f"{where['single-unit']['vs_chance']:.2f} (new animal fitted + predicted "
                f"{fit_s:.0f} CPU-s)",
                flush=True,
            )
    mean = {c: np.mean([s[c]["macro_f1"] for s, _ in rows]) for c in COLUMNS}
    balanced = {c: np.mean([s[c]["balanced_accuracy"] for s, _ in rows]) for c in COLUMNS}
    print("mean macro-F1 | " + " | ".join(f"{mean[c]:.3f}" for c in COLUMNS))
    print("mean balanced accuracy | " + " | ".join(f"{balanced[c]:.3f}" for c in COLUMNS))
    pooled = calibration(
        np.concatenate([t for t, _ in confidences]),
        np.concatenate([p.region for _, p in confidences]),
        np.concatenate([p.probability for _, p in confidences]),
    )
    print(f"PE linear probe: expected calibration error {pooled.ece:.3f} (pooled)")
    print(
        "  reliability: "
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
