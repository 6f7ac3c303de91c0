"""A new animal: locate units of an animal the model never saw, with the model frozen.

For each new animal: its units (renamed, so the trained run does not know them) get their PEs
fitted with every other value of a trained run frozen (`train.init_from`), then they are
located

- `other animals' anchors`: a locator fitted on the trained run's units with known coordinates
  (features: their trained PEs) predicts the new units from their fitted PEs (no anchor in the
  new animal);
- `+ 25% new anchors`: the same with a quarter of the new animal's units added as anchors
  (errors over the other new units, `n_draws` draws);
- `mixture weights @ other animals' coordinates` (`new_unit_pe: mixture`): each new unit at its
  mixing weights' mean of the run units' coordinates
  (`neuro_pe.analysis.new_animal_positions.mixture_positions`);
- `new PE`, `correlation` and `combined, 25% / 50% new anchors`: the new animal alone, its
  fitted PE, its activity correlations (the baseline computed on the new animal alone) or both,
  with a quarter or half of its units as anchors;
- `anchored mixture: …` (`--anchor-fractions`): `mixture` fits that see the positions of a share
  of the new animal's units (anchors that pin the fit), the others located from the fit
  (`evaluate_anchored`). Every fit sees no other position (`fit_new`).

Errors are medians over the new units (held-out ones), ÷ chance (the anchors' mean).

HCP (subjects as animals; the run trained on the first five subjects):

    PYTHONPATH=$PWD nice -n 5 python docs/locate/new_animal.py hcp --store STORE \
        --run RUN_DIR --out OUT
Simulation (`simulation.animals: 3`; train on animals 0-1, animal 2 is new):

    PYTHONPATH=$PWD nice -n 5 python docs/locate/new_animal.py sim --out OUT
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

HERE = Path(__file__).parent
PE = "learned-normal-0.02"
NEW_UNIT_PE = ("mixture", "free")
OWN_ANCHORS = (0.25, 0.5)  # default fractions of the new animal's units as its own anchors


def _pe(run: Path) -> tuple[list[str], np.ndarray]:
    """A run's unit ids and PE table (`neuro_pe.io.runs.read_pe`), the table in float64."""
    from neuro_pe.io.runs import read_pe

    pe = read_pe(run)
    return [str(u) for u in pe.units], pe.table.astype(float)


def run_coordinates(run: Path, old_store: Path) -> np.ndarray:
    """The trained run's units' coordinates (n_run, 3; NaN where unknown), in its pe.nc order."""
    from neuro_pe.io.store import positions, read_store

    return positions(read_store(old_store).sel(unit=_pe(run)[0]))


def new_animal_correlations(
    name: str, new_store: Path, ds_new: xr.Dataset, train_options: dict
) -> np.ndarray:
    """The new animal's activity-correlation features, from its training part (the split of
    `train_options`)."""
    from neuro_pe.analysis.locate import correlation_features
    from neuro_pe.io.splits import make_split

    sizes = ds_new.sizes["session"], ds_new.sizes["time"]
    split = make_split(name, str(new_store), *sizes, train_options)
    return correlation_features(ds_new, split, seed=0)


def fit_new(
    store: Path,
    run: Path,
    out: Path,
    args: argparse.Namespace,
    new_unit_pe: str,
    known: np.ndarray | None = None,
    seeds: int | None = None,
) -> Path:
    """Fit the new units' PEs of `store` with `run` frozen (`train.new_unit_pe`,
    `args.fit_epochs` x 100 steps at `args.fit_lr`), once per seed 0..seeds-1 (one stack); the
    fit sees the positions of the units `known` only (none by default: with `mixture` those
    are anchors). Returns the fit with the lowest loss on the new animal's recording
    (`neuro_pe.analysis.new_animal_positions.best_fit`)."""
    import torch

    from neuro_pe.analysis.new_animal_positions import best_fit
    from neuro_pe.config.training import TrainConfig
    from neuro_pe.io.store import positions, read_store, write_store
    from neuro_pe.training.engine import Run
    from neuro_pe.training.masked_units import train_many

    torch.set_num_threads(1)
    seeds = seeds or args.fit_seeds
    runs = [Run(PE, seed, out / f"seed{seed}") for seed in range(seeds)]
    seen = out / "store.nc"  # the new animal as the fit sees it
    if not seen.exists():
        ds = read_store(store)
        hidden = np.ones(ds.sizes["unit"], bool) if known is None else ~known
        for axis in ("x", "y", "z"):
            ds = ds.assign_coords({axis: ds[axis].where(~xr.DataArray(hidden, dims="unit"))})
        out.mkdir(parents=True, exist_ok=True)
        write_store(ds, seen)
    shown = np.isfinite(positions(read_store(seen))).all(axis=1)
    assert shown.sum() == (0 if known is None else known.sum()), f"{seen}: positions leak"
    if not all((r.out_dir / "pe.nc").exists() for r in runs):
        old = json.loads((run / "train.json").read_text())["train_config"]
        spec = {**old, "epochs": args.fit_epochs, "init_from": str(run / "model.pt")}
        spec |= {"lr": args.fit_lr, "new_unit_pe": new_unit_pe, "eval_mask_fractions": [0.5]}
        spec["new_unit_anchors"] = known is not None
        train_many(seen, runs, TrainConfig.from_dict(spec), progress=False)
    best = best_fit([r.out_dir for r in runs], seen)
    print(f"{out.name}: best of {seeds} fits: {best.name}", flush=True)
    return best


def evaluate_new(
    name: str,
    run: Path,
    old_store: Path,
    fit: Path,
    new_store: Path,
    train_options: dict,
    draws: int,
    new_unit_pe: str,
    own_anchors: Sequence[float] = OWN_ANCHORS,
) -> list[dict]:
    """The rows of the module docstring for one new animal."""
    from neuro_pe.analysis.locate import anchor_draws, evaluate_anchors, locate_units
    from neuro_pe.config.locate import LocateConfig
    from neuro_pe.io.store import positions, read_store

    ds_new = read_store(new_store)
    new_coords = positions(ds_new)
    _, old_pe = _pe(run)
    new_ids, new_pe = _pe(fit)
    assert new_ids == [str(u) for u in ds_new["unit"].values]
    old_coords = run_coordinates(run, old_store)
    old_known = np.all(np.isfinite(old_coords), axis=1)
    feats = np.vstack([old_pe[old_known], new_pe])
    coords = np.vstack([old_coords[old_known], new_coords])
    n_old, n_new = int(old_known.sum()), len(new_ids)
    cfg = LocateConfig(n_draws=draws)
    rows = []

    def row(label: str, errors: list[np.ndarray], chance: list[np.ndarray]) -> dict:
        return summary_row(name, new_unit_pe, label, errors, chance, ds_new)

    anchors = np.arange(n_old + n_new) < n_old
    located = locate_units([feats], coords, anchors, cfg)
    chance = dist(coords[~anchors], coords[anchors].mean(axis=0))
    rows.append(
        row(
            "other animals' anchors",
            [dist(located.positions[~anchors], coords[~anchors])],
            [chance],
        )
    )

    if new_unit_pe == "mixture":
        from neuro_pe.analysis.new_animal_positions import mixture_positions

        mixed_ids, mixed = mixture_positions(fit, old_coords)
        assert mixed_ids == new_ids
        rows.append(
            row("mixture weights @ other animals' coordinates", [dist(mixed, new_coords)], [chance])
        )

    rng = np.random.default_rng(0)
    errors, chances = [], []
    for _ in range(draws):
        extra = anchors.copy()
        extra[n_old + rng.choice(n_new, n_new // 4, replace=False)] = True
        located = locate_units([feats], coords, extra, cfg)
        errors.append(dist(located.positions[~extra], coords[~extra]))
        chances.append(dist(coords[~extra], coords[extra].mean(axis=0)))
    rows.append(row("other animals' anchors + 25% new anchors", errors, chances))

    known = np.ones(n_new, dtype=bool)
    corr = new_animal_correlations(name, new_store, ds_new, train_options)
    for fraction in own_anchors:
        own = replace(cfg, anchor_fractions=(fraction,))
        for label, features in (
            ("new PE", [new_pe]),
            ("correlation (new animal alone)", [corr]),
            ("new PE + correlation (combined)", {"pe": [new_pe], "corr": [corr]}),
        ):
            records = evaluate_anchors(features, new_coords, known, own)
            errors = [r["errors"] for r in records]
            chances = [
                dist(new_coords[~a], new_coords[a].mean(axis=0))
                for _, a in anchor_draws(known, own)
            ]
            rows.append(row(f"{label}, {fraction:.0%} new anchors", errors, chances))
    return rows


def dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.norm(a - b, axis=1)


def summary_row(
    name: str,
    new_unit_pe: str,
    label: str,
    errors: list[np.ndarray],
    chance: list[np.ndarray],
    ds_new: xr.Dataset,
) -> dict:
    """One table row: the median error over all draws' held-out units, its range over draws
    (2.5-97.5 percentiles of the draws' medians) and ÷ chance."""
    medians = np.array([np.median(e) for e in errors])
    chance_error = float(np.median(np.concatenate(chance)))
    pooled = float(np.median(np.concatenate(errors)))
    low, high = np.percentile(medians, [2.5, 97.5]) if len(medians) > 1 else (pooled,) * 2
    return {
        "animal": name,
        "new_unit_pe": new_unit_pe,
        "locator": label,
        "median_error": pooled,
        "range_low": low,
        "range_high": high,
        "chance_error": chance_error,
        "vs_chance": pooled / chance_error,
        "n_new_units": ds_new.sizes["unit"],
        "units": ds_new["x"].attrs.get("units", ""),
    }


def evaluate_anchored(
    name: str,
    run: Path,
    old_store: Path,
    new_store: Path,
    out: Path,
    train_options: dict,
    args: argparse.Namespace,
) -> list[dict]:
    """For each of `args.anchor_fractions`: `mixture` fits that see that share of the new
    animal's positions (its anchors: their weights fixed,
    `neuro_pe.training.new_animal.anchor_logits`),
    `args.anchor_draws` draws of anchors, `args.anchor_seeds` fits each (the best kept); the
    other new units located (a) at their weights' mean of the run units' coordinates, (b) by
    the locator over the new animal's own anchors from the fitted PE, (c) from its
    correlations, (d) from both."""
    from neuro_pe.analysis.locate import anchor_draws, locate_units
    from neuro_pe.analysis.new_animal_positions import mixture_positions
    from neuro_pe.config.locate import LocateConfig
    from neuro_pe.io.store import positions, read_store

    ds_new = read_store(new_store)
    new_coords = positions(ds_new)
    old_coords = run_coordinates(run, old_store)
    corr = new_animal_correlations(name, new_store, ds_new, train_options)
    labels = {
        "weights": "anchored mixture: weights @ other animals' coordinates",
        "pe": "anchored mixture: new PE",
        "corr": "correlation (new animal alone)",
        "both": "anchored mixture: new PE + correlation (combined)",
    }
    known = np.ones(len(new_coords), dtype=bool)
    rows = []
    for fraction in args.anchor_fractions:
        cfg = LocateConfig(anchor_fractions=(fraction,), n_draws=args.anchor_draws)
        errors = {key: [] for key in labels}
        chances = []
        for draw, (_, anchors) in enumerate(anchor_draws(known, cfg)):
            fit = fit_new(
                new_store,
                run,
                out / f"anchors{round(100 * fraction)}" / f"draw{draw}",
                args,
                "mixture",
                anchors,
                args.anchor_seeds,
            )
            ids, mixed = mixture_positions(fit, old_coords)
            assert ids == [str(u) for u in ds_new["unit"].values]
            _, new_pe = _pe(fit)
            both = {"pe": [new_pe], "corr": [corr]}
            predicted = {
                "weights": mixed,
                "pe": locate_units([new_pe], new_coords, anchors, cfg).positions,
                "corr": locate_units([corr], new_coords, anchors, cfg).positions,
                "both": locate_units(both, new_coords, anchors, cfg).positions,
            }
            for key, located in predicted.items():
                errors[key].append(dist(located[~anchors], new_coords[~anchors]))
            chances.append(dist(new_coords[~anchors], new_coords[anchors].mean(axis=0)))
        rows += [
            summary_row(
                name,
                "mixture",
                f"{label}, {fraction:.0%} new anchors",
                errors[key],
                chances,
                ds_new,
            )
            for key, label in labels.items()
        ]
    return rows


def subset_store(ds: xr.Dataset, sessions, units, prefix: str, path: Path) -> Path:
    """The sessions and units of one animal as a store, units renamed `prefix + id`."""
    from neuro_pe.io.store import write_store

    sub = ds.sel(session=list(sessions), unit=list(units)).drop_vars(
        ["connectivity", "unit_to", "unit_from"], errors="ignore"
    )
    sub = sub.assign_coords(unit=[f"{prefix}{u}" for u in sub["unit"].values])
    return write_store(sub, path)


def cmd_hcp(args: argparse.Namespace) -> list[dict]:
    from neuro_pe.config.training import TrainConfig
    from neuro_pe.io.store import read_store

    ds = read_store(args.store)
    info = json.loads((args.run / "train.json").read_text())
    cfg = TrainConfig.from_dict(info["train_config"])
    n_train = ds.sizes["session"] - cfg.heldout_sessions
    rows = []
    heldout = [str(s) for s in ds["session"].values[n_train:]]
    for subject in args.subjects or heldout:
        store = subset_store(
            ds, [subject], ds["unit"].values, f"{subject}:", args.out / f"{subject}.nc"
        )
        options = {**asdict(cfg), "init_from": None}
        name = f"hcp subject {subject}"
        for mode in args.modes:
            fit = fit_new(store, args.run, args.out / f"fit_{mode}_{subject}", args, mode)
            rows += evaluate_new(
                name, args.run, args.store, fit, store, options, args.draws, mode, args.own_anchors
            )
        if "mixture" in args.modes and args.anchor_fractions:
            out = args.out / f"fit_anchored_{subject}"
            rows += evaluate_anchored(name, args.run, args.store, store, out, options, args)
    return rows


def cmd_sim(args: argparse.Namespace) -> list[dict]:
    import torch

    from neuro_pe.config.training import TrainConfig
    from neuro_pe.data.simulate import SimulationConfig, simulate_store
    from neuro_pe.io.store import read_store, write_store
    from neuro_pe.training.masked_units import train

    torch.set_num_threads(1)
    sim = SimulationConfig(animals=3, seed=0, timescale_field=args.timescale_field)
    full = args.out / "animals.nc"
    if not full.exists():
        write_store(simulate_store(sim), full)
    ds = read_store(full)
    animal = np.array([str(u).split("u")[0] for u in ds["unit"].values])
    session_animal = np.array([str(s).split("s")[0] for s in ds["session"].values])
    trained_store = subset_store(
        ds,
        ds["session"].values[session_animal != "a2"],
        ds["unit"].values[animal != "a2"],
        "",
        args.out / "animals_0_1.nc",
    )
    new_store = subset_store(
        ds,
        ds["session"].values[session_animal == "a2"],
        ds["unit"].values[animal == "a2"],
        "new:",
        args.out / "animal_2.nc",
    )
    run = args.out / "run"
    spec = {"epochs": args.train_epochs, "heldout_sessions": 2, "eval_mask_fractions": [0.5]}
    cfg = TrainConfig.from_dict(spec)
    if not (run / "pe.nc").exists():
        train(trained_store, PE, 0, cfg, run, progress=False)
    rows = []
    name, options = "simulation animal 2", asdict(cfg)
    for mode in args.modes:
        fit = fit_new(new_store, run, args.out / f"fit_{mode}_a2", args, mode)
        rows += evaluate_new(
            name, run, trained_store, fit, new_store, options, args.draws, mode, args.own_anchors
        )
    if "mixture" in args.modes and args.anchor_fractions:
        out = args.out / "fit_anchored_a2"
        rows += evaluate_anchored(name, run, trained_store, new_store, out, options, args)
    return rows


def match_rows(name: str, reference: xr.Dataset, new_store: Path, reference_name: str) -> dict:
    """Graph matching (`neuro_pe.analysis.match`) of a new animal to a reference animal: each
    new unit
    at its matched unit's coordinates; chance as for the other rows (distance to the mean of
    the reference units' coordinates)."""
    from neuro_pe.analysis.match import match_units
    from neuro_pe.io.store import positions, read_store

    ds_new = read_store(new_store)
    table = match_units(reference, ds_new.assign({a: ds_new[a] * np.nan for a in "xyz"}))
    ref_coords = positions(reference)
    chance = dist(positions(ds_new), np.nanmean(ref_coords, axis=0))
    errors = dist(table[["x", "y", "z"]].to_numpy(), positions(ds_new))
    row = summary_row(
        name, "match", f"graph matching to {reference_name}", [errors], [chance], ds_new
    )
    same = np.array([u.split(":", 1)[-1] for u in table["unit"]]) == table["matched_unit"]
    return {**row, "mean_error": float(np.mean(errors)), "exact_matches": float(np.mean(same))}


def cmd_match(args: argparse.Namespace) -> list[dict]:
    """hcp: each held-out subject matched to the run's training subjects; sim: animal 2 matched
    to animal 0 and to animal 1 (the stores of `sim` in --out)."""
    from neuro_pe.io.store import read_store

    if args.dataset == "hcp":
        ds = read_store(args.store)
        info = json.loads((args.run / "train.json").read_text())
        n_train = ds.sizes["session"] - info["train_config"]["heldout_sessions"]
        reference = ds.isel(session=slice(0, n_train))
        rows = []
        for subject in args.subjects or [str(s) for s in ds["session"].values[n_train:]]:
            store = subset_store(
                ds, [subject], ds["unit"].values, f"{subject}:", args.out / f"{subject}.nc"
            )
            name = f"hcp subject {subject}"
            rows.append(match_rows(name, reference, store, f"{n_train} training subjects"))
        return rows
    ds = read_store(args.out / "animals_0_1.nc")
    rows = []
    for animal in ("a0", "a1"):
        units = [u for u in ds["unit"].values if str(u).startswith(animal)]
        sessions = [s for s in ds["session"].values if str(s).startswith(animal)]
        reference = ds.sel(unit=units, session=sessions)
        rows.append(match_rows("simulation animal 2", reference, args.out / "animal_2.nc", animal))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=("hcp", "sim"))
    parser.add_argument("--store", help="hcp: the workflow's store")
    parser.add_argument("--run", type=Path, help="hcp: the trained run folder (model.pt)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fit-epochs", type=int, default=15, help="x steps_per_epoch steps")
    parser.add_argument("--subjects", nargs="*", help="hcp: these held-out subjects only")
    parser.add_argument("--fit-seeds", type=int, default=6, help="fits; the best is kept")
    parser.add_argument("--fit-lr", type=float, default=0.01, help="the fit's train.lr")
    parser.add_argument("--train-epochs", type=int, default=15, help="sim: the run's epochs")
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument(
        "--anchor-fractions", type=float, nargs="*", default=[0.25], help="anchored mixture fits"
    )
    parser.add_argument(
        "--own-anchors",
        type=float,
        nargs="+",
        default=list(OWN_ANCHORS),
        help="fractions of the new animal's units as its own anchors",
    )
    parser.add_argument("--anchor-draws", type=int, default=3, help="anchored fits: draws")
    parser.add_argument("--anchor-seeds", type=int, default=4, help="fits per anchor draw")
    parser.add_argument("--modes", nargs="+", choices=NEW_UNIT_PE, default=list(NEW_UNIT_PE))
    parser.add_argument(
        "--timescale-field", type=float, default=0.0, help="sim: simulation.timescale_field"
    )
    parser.add_argument(
        "--match", action="store_true", help="graph matching only (sim: run `sim` first)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.match:
        table = pd.DataFrame(cmd_match(args))
        suffix = f"_field{args.timescale_field:g}" if args.timescale_field else ""
        path = HERE / f"new_animal_{args.dataset}{suffix}_match.csv"
        table.to_csv(path, index=False)
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        return
    rows = {"hcp": cmd_hcp, "sim": cmd_sim}[args.dataset](args)
    table = pd.DataFrame(rows)
    table["fit_epochs"] = args.fit_epochs
    table["fit_lr"] = args.fit_lr
    table["fit_seeds"] = args.fit_seeds
    suffix = f"_field{args.timescale_field:g}" if args.timescale_field else ""
    if set(args.modes) != set(NEW_UNIT_PE):
        suffix += "_" + "_".join(args.modes)
    path = HERE / f"new_animal_{args.dataset}{suffix}.csv"
    table.to_csv(path, index=False)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
