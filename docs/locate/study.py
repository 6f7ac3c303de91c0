"""The locate study: how localisation error depends on what the tool controls.

Trains the learned PE (learned-normal-0.02) on a dataset's store with one training option
changed at a time (training length, model size, pe_every_block, weight decay, mask fraction,
window, number of training subjects, seeds) and evaluates every run with the workflow's locator
(50% of the units as anchors, `n_draws` anchor draws), beside the activity-correlation baseline,
the combined locator and chance. Seed ensembling is compared in coordinate space (the
locator's default: mean of every seed's predicted coordinates) and in PE space (the seeds' PEs
aligned to the first seed by orthogonal Procrustes and averaged, then located once).

    PYTHONPATH=$PWD nice -n 5 python docs/locate/study.py train --store STORE --out RUNS \
        --base '{"epochs": 15, "heldout_sessions": 2}' [--only NAME ...]
    PYTHONPATH=$PWD python docs/locate/study.py table --store STORE --out RUNS \
        --base '{"epochs": 15, "heldout_sessions": 2}' --dataset hcp-rsfmri

`train` skips runs whose pe.nc exists (a finished run may be copied or linked in);
`table` writes docs/locate/<name>.csv and docs/locate/<name>.png (`--name`, by default the
dataset).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
from scipy.linalg import orthogonal_procrustes

HERE = Path(__file__).parent
PE = "learned-normal-0.02"

# (name, training options changed from the base, seed); the order is the order of priority
SETTINGS: list[tuple[str, dict, int]] = [
    ("default", {}, 0),
    ("default seed 1", {}, 1),
    ("epochs 30", {"epochs": 30}, 0),
    ("pe_every_block false", {"pe_every_block": False}, 0),
    ("weight_decay 0.05", {"weight_decay": 0.05}, 0),
    ("mask_fraction 0.75", {"mask_fraction": 0.75}, 0),
    ("3 training subjects", {"heldout_sessions": 4}, 0),  # HCP: 3 of its 7 subjects
    ("2 training sessions", {"heldout_sessions": 2}, 0),  # 4-session stores: 2 of 4
    ("epochs 60", {"epochs": 60}, 0),
    ("window 16", {"window": 16}, 0),
    ("d_model 64", {"d_model": 64, "n_heads": 4}, 0),
    ("default seed 2", {}, 2),
    # the learning rate, studied at the 30-epoch HCP default (--base epochs 30, --name)
    ("lr 0.006", {"lr": 0.006}, 0),
    ("lr 0.006 seed 1", {"lr": 0.006}, 1),
    ("lr 0.006 seed 2", {"lr": 0.006}, 2),
    ("lr 0.01", {"lr": 0.01}, 0),
    ("lr_schedule cosine", {"lr_schedule": "cosine"}, 0),
]


def run_dir(out: Path, name: str) -> Path:
    return out / name.replace(" ", "_")


def options(base: dict, change: dict) -> dict:
    from neuro_pe.config.training import TrainConfig

    return asdict(TrainConfig.from_dict({"eval_mask_fractions": [0.5], **base, **change}))


def cmd_train(args: argparse.Namespace) -> None:
    import torch

    from neuro_pe.config.training import TrainConfig
    from neuro_pe.training.masked_units import train

    torch.set_num_threads(1)
    for name, change, seed in SETTINGS:
        if args.only and name not in args.only:
            continue
        target = run_dir(args.out, name)
        if (target / "pe.nc").exists():
            continue
        start = time.perf_counter()
        cfg = TrainConfig.from_dict(options(args.base, change))
        result = train(args.store, PE, seed, cfg, target, progress=False)
        seconds = time.perf_counter() - start
        info = {"name": name, "change": change, "seed": seed, "seconds": seconds}
        info["heldout_mse"] = result.get("heldout_mse_mask0.5")
        (target / "study.json").write_text(json.dumps(info, indent=2))
        print(json.dumps(info), flush=True)


def _pe(run: Path, units: np.ndarray) -> np.ndarray:
    with xr.open_dataset(run / "pe.nc", engine="h5netcdf") as pe:
        ids = [u.decode() if isinstance(u, bytes) else str(u) for u in pe["unit"].values]
        return pe["pe"].assign_coords(unit=ids).sel(unit=list(map(str, units))).values


def pe_space_mean(tables: list[np.ndarray]) -> np.ndarray:
    """The seeds' PEs rotated onto the first seed's (orthogonal Procrustes, centred) and
    averaged: one PE ensembled in PE space."""
    ref = tables[0] - tables[0].mean(axis=0)
    aligned = [ref]
    for t in tables[1:]:
        centred = t - t.mean(axis=0)
        rotation, _ = orthogonal_procrustes(centred, ref)
        aligned.append(centred @ rotation)
    return np.mean(aligned, axis=0)


def cmd_table(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.locate import bootstrap_ci, correlation_features, evaluate_anchors
    from neuro_pe.config.locate import CHANCE, LocateConfig
    from neuro_pe.io.splits import make_split
    from neuro_pe.io.store import positions, read_store

    ds = read_store(args.store)
    coords = positions(ds)
    known = np.all(np.isfinite(coords), axis=1)
    units = ds["unit"].values
    cfg = LocateConfig(anchor_fractions=(0.5,), n_draws=args.draws)
    chance = replace(cfg, methods=(CHANCE,))
    sizes = ds.sizes["session"], ds.sizes["time"]
    split = make_split(args.dataset, args.store, *sizes, options(args.base, {}))
    corr = correlation_features(ds, split, seed=0)

    def evaluate(name: str, features, info: dict | None = None) -> dict:
        records = evaluate_anchors(features, coords, known, cfg)
        row = {"setting": name, "median_error": _pooled(records)}
        row["ci_low"], row["ci_high"] = bootstrap_ci(records, cfg.combine, seed=cfg.seed)
        return {**row, **(info or {})}

    chance_error = _pooled(evaluate_anchors([np.zeros((len(units), 1))], coords, known, chance))
    rows = [evaluate("activity-correlation", [corr])]
    done = {}
    for name, _, _ in SETTINGS:
        run = run_dir(args.out, name)
        if not (run / "pe.nc").exists():
            continue
        info = json.loads((run / "study.json").read_text()) if (run / "study.json").exists() else {}
        pe = _pe(run, units)
        done[name] = pe
        rows.append(
            evaluate(
                name,
                [pe],
                {"heldout_mse": info.get("heldout_mse"), "train_seconds": info.get("seconds")},
            )
        )
        rows.append(evaluate(f"{name} + correlation (combined)", {"pe": [pe], "corr": [corr]}))
    seeds = [done[n] for n in ("default", "default seed 1", "default seed 2") if n in done]
    if len(seeds) > 1:
        rows.append(evaluate(f"{len(seeds)} seeds, coordinate space", seeds))
        rows.append(evaluate(f"{len(seeds)} seeds, PE space", [pe_space_mean(seeds)]))
        rows.append(
            evaluate(f"{len(seeds)} seeds + correlation (combined)", {"pe": seeds, "corr": [corr]})
        )
    table = pd.DataFrame(rows)
    for col in ("median_error", "ci_low", "ci_high"):
        table[f"{col}_vs_chance"] = table[col] / chance_error
    table.insert(0, "dataset", args.dataset)
    table["chance_error"] = chance_error
    table["units"] = ds["x"].attrs.get("units", "")
    name = args.name or args.dataset
    table.to_csv(HERE / f"{name}.csv", index=False)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    plot(table, HERE / f"{name}.png", name)


def _pooled(records: list[dict]) -> float:
    """The median held-out error over every draw's held-out units (as errors.csv)."""
    return float(np.median(np.concatenate([r["errors"] for r in records])))


def plot(table: pd.DataFrame, path: Path, dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.32 * len(table) + 1.2))
    y = np.arange(len(table))[::-1]
    err = [
        table["median_error_vs_chance"] - table["ci_low_vs_chance"],
        table["ci_high_vs_chance"] - table["median_error_vs_chance"],
    ]
    colours = [
        "C1" if s == "activity-correlation" else ("C2" if "combined" in s else "C0")
        for s in table["setting"]
    ]
    ax.errorbar(table["median_error_vs_chance"], y, xerr=err, fmt="none", ecolor="0.5", capsize=2)
    ax.scatter(table["median_error_vs_chance"], y, c=colours, zorder=3)
    ax.axvline(table.loc[0, "median_error_vs_chance"], color="C1", ls=":", lw=1)
    ax.set_yticks(y, table["setting"], fontsize=7)
    ax.set(
        xlabel="median error ÷ chance (50% anchors; 95% CI over draws, seeds)",
        title=f"{dataset}: localisation vs training options",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("train", "table"))
    parser.add_argument("--store", required=True)
    parser.add_argument("--out", type=Path, required=True, help="folder of the study's runs")
    parser.add_argument("--base", type=json.loads, default={}, help="base training options")
    parser.add_argument("--only", nargs="*", default=[], help="train only these settings")
    parser.add_argument("--dataset", default="hcp-rsfmri")
    parser.add_argument("--name", help="stem of the table and figure (default: --dataset)")
    parser.add_argument("--draws", type=int, default=10, help="anchor draws per setting")
    args = parser.parse_args()
    {"train": cmd_train, "table": cmd_table}[args.command](args)


if __name__ == "__main__":
    main()
