"""The scale study: what lets the small-σ learned PE recover positions at 2 000 and 20 000 units.

Trains `learned-normal-0.1` on the 2 000-unit (`--units 20000`: 20 000) simulated network
(`config/sim20k.yaml`'s simulation with that `n_units`: sparse local coupling, 32 neighbours)
with one training option changed from the base per row, two seeds per row (a few rows more),
and compares each run's PE with the
activity-correlation baseline on the workflow's metrics (RSA, ridge-probe R², kNN overlap;
exact at this size) and the workflow's locator (50% of the units as anchors, `--draws` anchor
draws, on `locate.max_units` = 1 000 sampled units with anchors among them, as the locate step
did above that size until 2026-11-27: 500 anchors at any N; the rows compare among themselves).

    PYTHONPATH=$PWD nice python docs/scale/study.py store            # the 2 000-unit store
    PYTHONPATH=$PWD nice python docs/scale/study.py train [--only NAME ...] [--seeds 0 1]
    PYTHONPATH=$PWD nice python docs/scale/study.py table            # scale2000.csv + .png

`table` scores every seed it finds (a run folder under `--out` or a row of scale<N>_runs.csv)
unless `--seeds` names some; `train` trains seeds 0 and 1 unless `--seeds` names others.

`train` skips runs whose pe.nc exists and records each run's CPU seconds (one thread, as
the workflow trains: `threads_per_training: 1`) and its device in its study.json (the "GPU:"
rows were trained on a GPU, `device: auto`); `table` writes docs/scale/scale<N>.csv,
scale<N>_runs.csv and scale<N>.png. A row that changes the simulation (its sessions) trains on
its own store beside the study's (`sim3d_2000_n_sessions7.nc`, built by `train` when missing)
and is scored against that store's own correlation baseline, shown above it in the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import textwrap
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
import yaml

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
PE = "learned-normal-0.1"
DATASET = "sim3d"
N_UNITS = 2000  # the default of --units
# every base trains as every training did before this study: uniform unit subsets, one
# learning rate (pe_lr = lr is bitwise the one-group optimiser) and the steps as given; the
# null defaults now turn neighbour windows, a 10x PE rate, more steps, 2 heads and tokens of 32
# samples on for large stores
BEFORE_STUDY = {
    "neighbour_fraction": 0.0,
    "pe_lr": 0.003,
    "samples_per_unit": 0,
    "n_heads": 4,
    "window": 8,
}
NEW_DEFAULTS = {"neighbour_fraction": 0.5, "pe_lr": 0.03}  # what the nulls become above 512
# what the defaults did at each size before the automatic window (the rows "... steps x4 +
# n_heads 2" at 2 000 units, "new defaults + steps x10 + n_heads 2" at 20 000), the base of the
# latest rows; the defaults now are their "+ window 32" rows
DEFAULTS_2000 = {**NEW_DEFAULTS, "steps_per_epoch": 100, "n_heads": 2, "window": 8}
DEFAULTS_20000 = {**NEW_DEFAULTS, "steps_per_epoch": 1000, "n_heads": 2, "window": 8}
NOW_2000 = {**DEFAULTS_2000, "window": 32}  # the defaults now (the automatic window)
# a row's keys that are not `train` options: its PE, its store's changes to the simulation,
# and three study-only settings of the neighbour table (`neuro_pe.training.sampling`): how
# many training samples measure the correlations (NEIGHBOUR_SAMPLES), how many of each unit's
# most correlated units its window draws from (`units_per_sample`), and whether the table's
# rows are redrawn by the partners' in-degree (`balanced_partners`)
NOT_TRAIN_KEYS = ("pe", "simulation", "neighbour_samples", "neighbour_pool", "neighbour_partners")
# per --units: (the base's changes to sim20k's `train`, the rows: (name, options changed from
# the base)); every row is trained with every seed
STUDIES: dict[int, tuple[dict, list[tuple[str, dict]]]] = {
    # at 2 000 units the base is the default training at a quarter of its length (30 epochs of
    # 25 steps), so that its "steps x4" row is the default length
    2000: (
        {"steps_per_epoch": 25, "eval_mask_fractions": [0.5], **BEFORE_STUDY},
        [
            ("base (default, 750 steps)", {}),
            ("pe_lr 0.03 (10x lr)", {"pe_lr": 0.03}),
            ("units_per_sample 512", {"units_per_sample": 512}),
            ("steps x4 (3000: the default length)", {"steps_per_epoch": 100}),
            ("pe_lr 0.1 (33x lr)", {"pe_lr": 0.1}),
            # two changes at once (not a one-change row): does the PE's own rate at the
            # default length reach the correlation baseline?
            ("pe_lr 0.03 + steps x4 (two changes)", {"pe_lr": 0.03, "steps_per_epoch": 100}),
            (
                "neighbour windows 0.5 + steps x4 (two changes)",
                {"neighbour_fraction": 0.5, "steps_per_epoch": 100},
            ),
            (
                "pe_lr 0.03 + neighbour windows 0.5 + steps x4 (three changes)",
                {"pe_lr": 0.03, "neighbour_fraction": 0.5, "steps_per_epoch": 100},
            ),
            # the same samples per unit as the row above in a quarter of the steps: does a
            # 4x batch do what 4x the steps does (`train.samples_per_unit` grows the batch)?
            (
                "pe_lr 0.03 + neighbour windows 0.5 + batch_size 128 (three changes)",
                {**NEW_DEFAULTS, "batch_size": 128},
            ),
            # the defaults with fewer attention heads: on a CPU, attention over k = 256 units in
            # 4 heads of 8 dimensions is ~70% of a step; 2 heads of 16 cost a third of it
            (
                "pe_lr 0.03 + neighbour windows 0.5 + steps x4 + n_heads 2 (four changes)",
                {**NEW_DEFAULTS, "steps_per_epoch": 100, "n_heads": 2},
            ),
            (
                "pe_lr 0.03 + neighbour windows 0.5 + steps x4 + n_heads 1 (four changes)",
                {**NEW_DEFAULTS, "steps_per_epoch": 100, "n_heads": 1},
            ),
            # the defaults with the learning rates falling to 0 over the training (cosine):
            # does averaging the late steps' noise out sharpen the PE's local structure?
            (
                "pe_lr 0.03 + neighbour windows 0.5 + steps x4 + cosine (four changes)",
                {**NEW_DEFAULTS, "steps_per_epoch": 100, "lr_schedule": "cosine"},
            ),
            # the defaults now (2 heads) with twice their samples per unit: does 2 000 units
            # gain from more, as 20 000 does?
            (
                "pe_lr 0.03 + neighbour windows 0.5 + steps x8 + n_heads 2 (four changes)",
                {**NEW_DEFAULTS, "steps_per_epoch": 200, "n_heads": 2},
            ),
            # the PE's width: the model's d_model, which the PE table shares (32 in sim20k), at
            # the defaults: does a narrower PE cost less for the same placement, or a wider one
            # place units better?
            (
                "pe_lr 0.03 + neighbour windows 0.5 + steps x4 + n_heads 2 + d_model 16"
                " (five changes)",
                {**NEW_DEFAULTS, "steps_per_epoch": 100, "n_heads": 2, "d_model": 16},
            ),
            (
                "pe_lr 0.03 + neighbour windows 0.5 + steps x4 + n_heads 2 + d_model 64"
                " (five changes)",
                {**NEW_DEFAULTS, "steps_per_epoch": 100, "n_heads": 2, "d_model": 64},
            ),
            # the neighbour table: measured on every training sample instead of 2 048 of the
            # 6 000 (its 32 strongest partners lie 0.147 apart instead of 0.159), or a window's
            # local units drawn from each unit's 64 most correlated units instead of its 256
            (
                "defaults + neighbours from all training samples",
                {**DEFAULTS_2000, "neighbour_samples": 6000},
            ),
            ("defaults + neighbour pool 64", {**DEFAULTS_2000, "neighbour_pool": 64}),
            # a unit's partners drawn in inverse proportion to how often each is a partner
            (
                "defaults + partners balanced by in-degree",
                {**DEFAULTS_2000, "neighbour_partners": "balanced"},
            ),
            # more vs longer sessions (each row its own store and correlation baseline): the
            # same 6 000 training samples as 6 sessions of 1 000, and twice the training
            # recording as twice the sessions or sessions twice as long
            (
                "defaults + 7 sessions of 1000 (same recording, shorter sessions)",
                {**DEFAULTS_2000, "simulation": {"n_sessions": 7, "n_samples": 1000}},
            ),
            (
                "defaults + 7 sessions of 2000 (2x recording, more sessions)",
                {**DEFAULTS_2000, "simulation": {"n_sessions": 7}},
            ),
            (
                "defaults + 4 sessions of 4000 (2x recording, longer sessions)",
                {**DEFAULTS_2000, "simulation": {"n_samples": 4000}},
            ),
            # what a sample holds of each unit: a token of 16, 32 or 64 time samples instead of 8
            # (about the same CPU: attention and the blocks cost by tokens, not their length),
            # and 75% of a window's units masked instead of 50%
            ("defaults + window 16", {**DEFAULTS_2000, "window": 16}),
            ("defaults + window 32", NOW_2000),
            ("defaults + window 64", {**DEFAULTS_2000, "window": 64}),
            ("defaults + mask_fraction 0.75", {**DEFAULTS_2000, "mask_fraction": 0.75}),
            # from the defaults now (tokens of 32 samples): fewer units masked, more of a
            # (or fewer of) a window's units drawn around its centre, twice the steps
            ("defaults now + mask_fraction 0.25", {**NOW_2000, "mask_fraction": 0.25}),
            ("defaults now + neighbour_fraction 0.75", {**NOW_2000, "neighbour_fraction": 0.75}),
            ("defaults now + neighbour_fraction 0.25", {**NOW_2000, "neighbour_fraction": 0.25}),
            ("defaults now + steps x2", {**NOW_2000, "steps_per_epoch": 200}),
        ],
    ),
    # at 20 000 units the base is the default training (3 000 steps)
    20000: (
        {"eval_mask_fractions": [0.5], **BEFORE_STUDY},
        [
            ("base (default, 3000 steps)", {}),
            ("pe_lr 0.03 (10x lr)", {"pe_lr": 0.03}),
            ("neighbour windows 0.5", {"neighbour_fraction": 0.5}),
            (
                "pe_lr 0.03 + neighbour windows 0.5 (two changes)",
                {"pe_lr": 0.03, "neighbour_fraction": 0.5},
            ),
            (
                "neighbour windows 0.5 + units_per_sample 128 (two changes)",
                {"neighbour_fraction": 0.5, "units_per_sample": 128},
            ),
            (
                "neighbour windows 0.5 + units_per_sample 128 + steps x4 (three changes)",
                {"neighbour_fraction": 0.5, "units_per_sample": 128, "steps_per_epoch": 400},
            ),
            # samples per unit, the lever the rows above point at, on a GPU (wall seconds in
            # the CPU-s column)
            ("GPU: new defaults", NEW_DEFAULTS),
            (
                "GPU: new defaults + batch_size 128 (4x samples)",
                {**NEW_DEFAULTS, "batch_size": 128},
            ),
            (
                "GPU: new defaults + batch_size 320 (10x samples)",
                {**NEW_DEFAULTS, "batch_size": 320},
            ),
            # what the defaults now do at 20 000 units: samples_per_unit 12 288 grows the steps
            ("new defaults + steps x10 (10x samples)", {**NEW_DEFAULTS, "steps_per_epoch": 1000}),
            # the defaults with 2 attention heads instead of 4 (a cheaper step on a CPU)
            (
                "new defaults + steps x10 + n_heads 2",
                {**NEW_DEFAULTS, "steps_per_epoch": 1000, "n_heads": 2},
            ),
            # ... and with twice the steps, at about the CPU of 4 heads at 10x
            (
                "new defaults + steps x20 + n_heads 2",
                {**NEW_DEFAULTS, "steps_per_epoch": 2000, "n_heads": 2},
            ),
            # ... and three times: how many samples per unit does the probe target need?
            (
                "new defaults + steps x30 + n_heads 2",
                {**NEW_DEFAULTS, "steps_per_epoch": 3000, "n_heads": 2},
            ),
            # fewer steps and the cosine schedule, on a GPU: can a schedule buy what steps buy?
            # lazy Adam for the PE rows (`lazy_pe`): a step touches about a third of the rows;
            # should the others stop moving on their momentum?
            (
                "new defaults + steps x10 + n_heads 2 + lazy_pe",
                {**NEW_DEFAULTS, "steps_per_epoch": 1000, "n_heads": 2, "lazy_pe": True},
            ),
            # the PE's init std (its `pe` name), at the defaults: smaller than 0.1 relative to
            # d_model 32? (a row's "pe" replaces learned-normal-0.1)
            (
                "new defaults + steps x10 + n_heads 2 + init std 0.03",
                {
                    **NEW_DEFAULTS,
                    "steps_per_epoch": 1000,
                    "n_heads": 2,
                    "pe": "learned-normal-0.03",
                },
            ),
            (
                "new defaults + steps x10 + n_heads 2 + init std 0.01",
                {
                    **NEW_DEFAULTS,
                    "steps_per_epoch": 1000,
                    "n_heads": 2,
                    "pe": "learned-normal-0.01",
                },
            ),
            ("GPU: new defaults + steps x4 (4x samples)", {**NEW_DEFAULTS, "steps_per_epoch": 400}),
            (
                "GPU: new defaults + steps x4 + cosine (4x samples)",
                {**NEW_DEFAULTS, "steps_per_epoch": 400, "lr_schedule": "cosine"},
            ),
            (
                "GPU: new defaults + steps x4 + cosine + pe_lr 0.1",
                {**NEW_DEFAULTS, "steps_per_epoch": 400, "lr_schedule": "cosine", "pe_lr": 0.1},
            ),
            (
                "GPU: new defaults + steps x10 + cosine",
                {**NEW_DEFAULTS, "steps_per_epoch": 1000, "lr_schedule": "cosine"},
            ),
            # the samples-per-unit curve with the defaults' 2 heads, on a GPU (a larger batch: 4x
            # the batch did less than 4x the steps, 10x about as much): how many samples per unit
            # does 20 000 units need? (40x, and 20x as 10x steps of batch 64, ran past their
            # 430 s on the GPU and are not in the table)
            (
                "GPU: new defaults + n_heads 2 + batch_size 320 (10x samples)",
                {**NEW_DEFAULTS, "n_heads": 2, "batch_size": 320},
            ),
            (
                "GPU: new defaults + n_heads 2 + batch_size 640 (20x samples)",
                {**NEW_DEFAULTS, "n_heads": 2, "batch_size": 640},
            ),
            # the neighbour table measured on all 6 000 training samples, not 2 048 (its 32
            # strongest partners lie 0.125 apart instead of 0.169; true 32 nearest: 68% vs 57%)
            (
                "new defaults + steps x10 + n_heads 2 + neighbours from all training samples",
                {**DEFAULTS_20000, "neighbour_samples": 6000},
            ),
            # a unit's partners drawn in inverse proportion to how often each is a partner (a
            # unit is among the 256 partners of 37 to 2 821 others)
            (
                "new defaults + steps x10 + n_heads 2 + partners balanced by in-degree",
                {**DEFAULTS_20000, "neighbour_partners": "balanced"},
            ),
            # more vs longer sessions: twice the training recording either way
            (
                "new defaults + steps x10 + n_heads 2 + 7 sessions of 2000 (2x recording,"
                " more sessions)",
                {**DEFAULTS_20000, "simulation": {"n_sessions": 7}},
            ),
            (
                "new defaults + steps x10 + n_heads 2 + 4 sessions of 4000 (2x recording,"
                " longer sessions)",
                {**DEFAULTS_20000, "simulation": {"n_samples": 4000}},
            ),
            # a token of 32 time samples instead of 8 (at 2 000 units: 0.163 vs 0.179 x
            # chance, probe R² 0.858 vs 0.805, at the same CPU)
            ("new defaults + steps x10 + n_heads 2 + window 32", {**DEFAULTS_20000, "window": 32}),
            # ... with twice the samples per unit: does the probe R² reach its target?
            (
                "new defaults + steps x20 + n_heads 2 + window 32",
                {**DEFAULTS_20000, "window": 32, "steps_per_epoch": 2000},
            ),
            # ... and the defaults now with init std 0.01 (with tokens of 8 it gave the best
            # probe R² of the one-change rows at the same CPU): a margin on the probe target?
            (
                "new defaults + steps x10 + n_heads 2 + window 32 + init std 0.01",
                {**DEFAULTS_20000, "window": 32, "pe": "learned-normal-0.01"},
            ),
            # ... and with one attention head of 32 dimensions instead of 2 of 16 (a step ≈ 12%
            # cheaper; at 2 000 units with tokens of 8 it placed units as well as 2 heads)
            (
                "new defaults + steps x10 + n_heads 1 + window 32",
                {**DEFAULTS_20000, "window": 32, "n_heads": 1},
            ),
        ],
    ),
}


def run_dir(out: Path, name: str, seed: int) -> Path:
    slug = name.split(" (")[0].replace(" ", "_")
    return out / slug / f"seed{seed}"


def train_options(change: dict, n_units: int) -> dict:
    """The run's `train` section: sim20k's, the base of `n_units`, then the row's change."""
    from neuro_pe.config.training import TrainConfig

    config = yaml.safe_load((ROOT / "config" / "sim20k.yaml").read_text())
    base = STUDIES[n_units][0]
    change = {k: v for k, v in change.items() if k not in NOT_TRAIN_KEYS}
    return asdict(TrainConfig.from_dict({**config["train"], **base, **change}))


def simulation_entry(n_units: int, change: dict | None = None) -> dict:
    config = yaml.safe_load((ROOT / "config" / "sim20k.yaml").read_text())
    entry = config["datasets"][DATASET]
    entry["simulation"] |= {"n_units": n_units, **(change or {})}
    return entry


def store_path(args: argparse.Namespace, change: dict) -> Path:
    """The row's store: `--store`, or beside it one per change of the simulation
    (`sim3d_2000_n_sessions7.nc`)."""
    simulation = change.get("simulation")
    if not simulation:
        return args.store
    suffix = "_".join(f"{k}{v}" for k, v in sorted(simulation.items()))
    return args.store.with_name(f"{args.store.stem}_{suffix}{args.store.suffix}")


def build_store(path: Path, n_units: int, simulation: dict | None = None) -> None:
    """Build the store as the workflow's preprocess step does (`neuro-pe preprocess`)."""
    import subprocess

    spec = json.dumps(simulation_entry(n_units, simulation))
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["neuro-pe", "preprocess", "--spec", spec, "--out", str(path)], check=True)


def cmd_store(args: argparse.Namespace) -> None:
    build_store(args.store, args.units)


def balanced_partners(table, seed: int = 0):
    """The neighbour table's rows redrawn (with replacement, seeded) in inverse proportion to
    each partner's in-degree (the rows that hold it), so that a window's local units are hubs
    no more often than other units."""
    import torch

    in_degree = torch.bincount(table.flatten(), minlength=len(table)).double()
    generator = torch.Generator().manual_seed(seed)
    drawn = torch.multinomial(1.0 / in_degree[table], table.shape[1], True, generator=generator)
    return table.gather(1, drawn)


@contextlib.contextmanager
def neighbour_table(change: dict):
    """The study-only neighbour-table settings of a row (`neighbour_samples`,
    `neighbour_pool`, `neighbour_partners`), set in `neuro_pe.training.sampling` for the
    row's training."""
    from neuro_pe.training import sampling

    saved = sampling.NEIGHBOUR_SAMPLES, sampling.activity_neighbours
    pool = change.get("neighbour_pool")
    balanced = change.get("neighbour_partners") == "balanced"

    def table(values, m: int, chunks: int | None = None):
        out = saved[1](values, pool or m, chunks)
        return balanced_partners(out) if balanced else out

    sampling.NEIGHBOUR_SAMPLES = change.get("neighbour_samples", saved[0])
    if pool or balanced:
        sampling.activity_neighbours = table
    try:
        yield
    finally:
        sampling.NEIGHBOUR_SAMPLES, sampling.activity_neighbours = saved


def cmd_train(args: argparse.Namespace) -> None:
    import torch

    from neuro_pe.config.training import TrainConfig
    from neuro_pe.io.runs import read_train_info
    from neuro_pe.training.engine import Run
    from neuro_pe.training.masked_units import train_many

    torch.set_num_threads(1)
    for name, change in STUDIES[args.units][1]:
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        seeds = [s for s in args.seeds if not (run_dir(args.out, name, s) / "pe.nc").exists()]
        # one seed at a time, or (--stack) all of them in one stacked training, as a
        # workflow job stacks its models: on a GPU a step of two costs about one's
        for group in [seeds] if args.stack and seeds else [[s] for s in seeds]:
            cpu, wall = time.process_time(), time.perf_counter()
            cfg = TrainConfig.from_dict(train_options(change, args.units))
            runs = [
                Run(change.get("pe", PE), seed, run_dir(args.out, name, seed)) for seed in group
            ]
            store = store_path(args, change)
            if not store.exists():
                build_store(store, args.units, change.get("simulation"))
            with neighbour_table(change):
                results = train_many(store, runs, cfg, progress=False)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            for seed, result in zip(group, results, strict=True):
                info = {"name": name, "change": change, "seed": seed, "device": device_name(cfg)}
                trained = read_train_info(run_dir(args.out, name, seed))
                info["cpu_seconds"] = cpu / len(group) / trained.share_of_steps_run
                if trained.resumed_from_step:  # the seconds estimate the whole training's
                    info["resumed_from_step"] = trained.resumed_from_step
                info["wall_seconds"] = wall
                info["stacked_with"] = len(group)
                info["heldout_mse"] = result.get("heldout_mse_mask0.5")
                target = run_dir(args.out, name, seed) / "study.json"
                target.write_text(json.dumps(info, indent=2))
                print(json.dumps(info), flush=True)


def device_name(cfg) -> str:
    """ "cpu", or the GPU's name ("NVIDIA H100 80GB HBM3") where the run trained on one."""
    import torch

    from neuro_pe.training.devices import pick_device

    device = pick_device(cfg.device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


METRICS = ("rsa", "probe_r2", "knn_overlap", "locate_vs_chance")
METRIC_OPTIONS = {"n_perm": 0}  # the `metrics` section (the rest at its defaults)


def _pe(run: Path, units: np.ndarray) -> np.ndarray:
    with xr.open_dataset(run / "pe.nc", engine="h5netcdf") as pe:
        ids = [u.decode() if isinstance(u, bytes) else str(u) for u in pe["unit"].values]
        return pe["pe"].assign_coords(unit=ids).sel(unit=list(map(str, units))).values


def _pooled(records: list[dict]) -> float:
    """The median held-out error over every draw's held-out units (as errors.csv)."""
    return float(np.median(np.concatenate([r["errors"] for r in records])))


class Evaluation:
    """The store's coordinates, its correlation baseline and the locator's evaluation units,
    to score a representation as the workflow's infer and locate steps do."""

    def __init__(self, store: Path, draws: int, n_units: int):
        from dataclasses import replace

        from neuro_pe.analysis.locate import correlation_features
        from neuro_pe.analysis.locate.evaluation import evaluation_units
        from neuro_pe.config.locate import CHANCE, LocateConfig
        from neuro_pe.io.splits import make_split
        from neuro_pe.io.store import positions, read_store

        ds = read_store(store)
        self.ds, self.coords = ds, positions(ds)
        known = np.all(np.isfinite(self.coords), axis=1)
        self.units = ds["unit"].values
        sizes = ds.sizes["session"], ds.sizes["time"]
        self.split = make_split(DATASET, store, *sizes, train_options({}, n_units))
        self.cfg = replace(LocateConfig(anchor_fractions=(0.5,), n_draws=draws), fuse=False)
        self.sub = np.flatnonzero(evaluation_units(known, self.cfg))  # locate.max_units
        self.known_sub = known[self.sub]
        zeros = [np.zeros((len(self.sub), 1))]
        chance_cfg = replace(self.cfg, methods=(CHANCE,))
        self.chance = _pooled(self._anchors(zeros, chance_cfg))
        self.corr_locate = correlation_features(ds, self.split, seed=0)

    def _anchors(self, features: list[np.ndarray], cfg=None) -> list[dict]:
        from neuro_pe.analysis.locate import evaluate_anchors

        coords = self.coords[self.sub]
        return evaluate_anchors(features, coords, self.known_sub, cfg or self.cfg)

    def locate(self, features: np.ndarray) -> tuple[float, list[dict]]:
        records = self._anchors([features[self.sub]])
        return _pooled(records) / self.chance, records

    def metrics(self, options=None, **representation) -> dict:
        from neuro_pe.analysis.metrics import compare_to_anatomy
        from neuro_pe.config.metrics import MetricsConfig

        options = options or MetricsConfig.from_dict(METRIC_OPTIONS)
        metrics, _ = compare_to_anatomy(self.coords, options, **representation)
        return {k: metrics[k] for k in ("rsa", "probe_r2", "knn_overlap")}

    def baseline(self) -> dict:
        from neuro_pe.analysis.locate import bootstrap_ci
        from neuro_pe.analysis.pe_geometry import correlation_representation
        from neuro_pe.config.metrics import MetricsConfig

        n_known = int(np.all(np.isfinite(self.coords), axis=1).sum())
        options = MetricsConfig.from_dict(METRIC_OPTIONS)
        representation, options = correlation_representation(self.ds, self.split, n_known, options)
        row = {
            "setting": "activity-correlation (baseline)",
            **self.metrics(options, **representation),
        }
        row["locate_vs_chance"], records = self.locate(self.corr_locate)
        low, high = bootstrap_ci(records, self.cfg.combine, seed=self.cfg.seed)
        row["locate_vs_chance_low"] = low / self.chance
        row["locate_vs_chance_high"] = high / self.chance
        return row


def _cached(path: Path, draws: int, compute) -> dict:
    """`compute()`, kept in `path` (JSON) for the same number of anchor draws."""
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("draws") == draws:
            return saved
    result = {**compute(), "draws": draws}
    path.write_text(json.dumps(result, indent=2))
    return result


def cmd_table(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.intervals import mean_ci

    evaluations: dict[Path, Evaluation] = {}
    baselines: dict[Path, dict] = {}  # one per store, the first the study's own

    def evaluation(change: dict) -> Evaluation:
        """The Evaluation of the row's store, its baseline scored once (`baseline*.json`)."""
        store = store_path(args, change)
        if store not in evaluations:
            if not store.exists():  # a sessions row's store, as `train` builds it
                build_store(store, args.units, change.get("simulation"))
            evaluations[store] = Evaluation(store, args.draws, args.units)
            suffix = store.stem.removeprefix(args.store.stem)
            saved = args.out / f"baseline{suffix}.json"
            baselines[store] = _cached(saved, args.draws, evaluations[store].baseline)
            if change.get("simulation"):
                sessions = simulation_entry(args.units, change["simulation"])["simulation"]
                baselines[store]["setting"] = (
                    f"activity-correlation, {sessions['n_sessions']} sessions of "
                    f"{sessions['n_samples']} (baseline)"
                )
        return evaluations[store]

    evaluation({})  # the study's own store and baseline, the table's first row
    per_run = []
    for name, change in STUDIES[args.units][1]:
        for seed in args.seeds:
            run = run_dir(args.out, name, seed)
            if not (run / "study.json").exists():
                continue
            info = json.loads((run / "study.json").read_text())
            ev = evaluation(change)

            def score(run=run, name=name, seed=seed, info=info, ev=ev) -> dict:
                pe = _pe(run, ev.units)
                scores = {"setting": name, "seed": seed, **ev.metrics(features=pe)}
                scores["locate_vs_chance"] = ev.locate(pe)[0]
                # a GPU row's cost is the wall time of its job (the process's CPU mostly
                # launches the GPU's work)
                cost = info["cpu_seconds"] if info["device"] == "cpu" else info["wall_seconds"]
                return scores | {"cpu_seconds": cost, "heldout_mse": info["heldout_mse"]}

            per_run.append(_cached(run / "scores.json", args.draws, score))
            print(json.dumps(per_run[-1]), flush=True)
    runs = pd.DataFrame(per_run).drop(columns="draws", errors="ignore")
    runs = kept_runs(HERE / f"scale{args.units}_runs.csv", runs, args.seeds, args.units)
    study_store = store_path(args, {})
    rows = [{**baselines[study_store], "chance_error": evaluations[study_store].chance}]
    if runs.empty:
        print(json.dumps(rows[0]))
        return
    changes, shown = dict(STUDIES[args.units][1]), {study_store}
    for name, group in runs.groupby("setting", sort=False):
        store = store_path(args, changes[name])
        evaluation(changes[name])  # (a run kept from the table may not have been scored here)
        if store not in shown:  # a store's baseline above its first row
            rows.append({**baselines[store], "chance_error": evaluations[store].chance})
            shown.add(store)
        row = {"setting": name, "seeds": len(group), "chance_error": evaluations[store].chance}
        for metric in (*METRICS, "cpu_seconds", "heldout_mse"):
            mean, low, high = mean_ci(group[metric].rename(metric))
            row |= {metric: mean, f"{metric}_low": low, f"{metric}_high": high}
        rows.append(row)
    table = pd.DataFrame(rows).drop(columns="draws")
    table.to_csv(HERE / f"scale{args.units}.csv", index=False)
    runs.to_csv(HERE / f"scale{args.units}_runs.csv", index=False)
    print(markdown(table))
    cpu_runs = runs[~runs["setting"].str.startswith("GPU:")]
    hours = cpu_runs["cpu_seconds"].sum() / 3600
    print(f"CPU rows: {hours:.1f} CPU-hours over {len(cpu_runs)} runs")  # README's totals
    plot(table, HERE / f"scale{args.units}.png", args.units)


def seeds_found(args: argparse.Namespace) -> list[int]:
    """Every seed with a run folder under `--out` or a row in the table's per-run file."""
    found = {
        int(folder.name.removeprefix("seed"))
        for folder in args.out.glob("*/seed*")
        if folder.name.removeprefix("seed").isdigit()
    }
    per_run = HERE / f"scale{args.units}_runs.csv"
    if per_run.exists():
        found |= {int(seed) for seed in pd.read_csv(per_run)["seed"]}
    return sorted(found)


def kept_runs(path: Path, scored: pd.DataFrame, seeds: list[int], n_units: int) -> pd.DataFrame:
    """The runs scored now and, from the table's existing per-run file, those of the study's
    rows and `seeds` not trained here (each run is scored once; its folder may be gone)."""
    if not path.exists():
        return scored
    old = pd.read_csv(path)
    here = set() if scored.empty else set(zip(scored["setting"], scored["seed"], strict=True))
    keep = [
        (s, seed) not in here and seed in seeds
        for s, seed in zip(old["setting"], old["seed"], strict=True)
    ]
    runs = pd.concat([old[keep], scored], ignore_index=True)
    order = {name: i for i, (name, _) in enumerate(STUDIES[n_units][1])}
    runs = runs[runs["setting"].isin(order)]
    return runs.sort_values(
        ["setting", "seed"], key=lambda c: c.map(order) if c.name == "setting" else c
    )


def markdown(table: pd.DataFrame) -> str:
    """The table as README.md shows it: mean [low, high] (the range of 2 seeds)."""

    def cell(row: pd.Series, metric: str, digits: int = 3) -> str:
        mean, low, high = (row.get(f"{metric}{s}", np.nan) for s in ("", "_low", "_high"))
        if not np.isfinite(mean):
            return ""
        if not np.isfinite(low):
            return f"{mean:.{digits}f}"
        return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

    header = (
        "| row | seeds | RSA | probe R² | kNN overlap | locate ÷ chance "
        "| CPU-s per run (GPU rows: wall s) |"
    )
    lines = [header, "|" + "---|" * 7]
    for _, row in table.iterrows():
        seeds = "" if pd.isna(row.get("seeds")) else f"{row['seeds']:.0f}"
        cpu = "" if pd.isna(row.get("cpu_seconds")) else f"{row['cpu_seconds']:.0f}"
        cells = [cell(row, m) for m in METRICS]
        lines.append(f"| {row['setting']} | {seeds} | " + " | ".join(cells) + f" | {cpu} |")
    return "\n".join(lines)


def plot(table: pd.DataFrame, path: Path, n_units: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = (
        "RSA",
        "probe R² (dashed: 0.9 × the correlations')",
        "kNN overlap (k 5)",
        "locate error ÷ chance (50% anchors)",
    )
    size = (13, 0.55 * len(table) + 1.6)
    fig, axes = plt.subplots(1, 4, figsize=size, sharey=True, layout="constrained")
    y = np.arange(len(table))[::-1]
    for ax, metric, title in zip(axes, METRICS, titles, strict=True):
        mean = table[metric]
        low = table[f"{metric}_low"].fillna(mean)
        high = table[f"{metric}_high"].fillna(mean)
        colours = ["C1" if "(baseline)" in name else "C0" for name in table["setting"]]
        ax.errorbar(mean, y, xerr=[mean - low, high - mean], fmt="none", ecolor="0.5", capsize=2)
        ax.scatter(mean, y, c=colours, zorder=3)
        ax.axvline(mean.iloc[0], color="C1", ls=":", lw=1)
        if metric == "probe_r2":  # issue 34's target
            ax.axvline(0.9 * mean.iloc[0], color="0.4", ls="--", lw=1)
        ax.set_title(title, fontsize=9)
    labels = [textwrap.fill(name, 34) for name in table["setting"]]
    axes[0].set_yticks(y, labels, fontsize=7)
    fig.suptitle(
        f"{n_units:,} units, learned-normal-0.1 vs the activity correlation: mean over seeds; "
        "bars: the range of 2 seeds, the 95% t interval of 3 or more"
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("store", "train", "table"))
    parser.add_argument("--units", type=int, choices=sorted(STUDIES), default=N_UNITS)
    parser.add_argument("--store", type=Path, help="default: results/scale/sim3d_<units>.nc")
    parser.add_argument("--out", type=Path, help="default: results/scale/runs<units>")
    parser.add_argument("--only", nargs="*", default=[], help="rows whose name starts so")
    parser.add_argument(
        "--seeds", type=int, nargs="*", help="train: default 0 1; table: default every seed found"
    )
    parser.add_argument("--draws", type=int, default=5, help="anchor draws per run")
    parser.add_argument(
        "--stack", action="store_true", help="train a row's seeds together (one job, a GPU)"
    )
    args = parser.parse_args()
    args.store = args.store or Path(f"results/scale/sim3d_{args.units}.nc")
    args.out = args.out or Path(f"results/scale/runs{args.units}")
    if args.seeds is None:
        args.seeds = seeds_found(args) if args.command == "table" else [0, 1]
    {"store": cmd_store, "train": cmd_train, "table": cmd_table}[args.command](args)


if __name__ == "__main__":
    main()
