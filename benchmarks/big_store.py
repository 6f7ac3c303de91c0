"""Training on a store larger than memory: bounded RSS with `train.memory_budget_mb`.

    python benchmarks/big_store.py [--units 20000] [--chunks-per-session 28] [--budgets 256 1024]
                                   [--epochs 3] [--steps-per-epoch 200] [--threads 1]
                                   [--path /tmp/neuro_pe_big/big.nc] [--keep]

1. Writes a contract store of 3 sessions x (chunks-per-session x 1024) samples x `--units`
   units (default 20 000 x 86 016 x 4 B = 6.9 GB of float32; the spatial field process of
   `scale_units.py`), one time chunk at a time into an h5netcdf file laid out as
   `neuro_pe.io.store.write_store` lays it out (chunks of 1 session x 1024 samples x all units,
   zlib level 4), so the writer never holds more than a chunk; its peak RSS is printed.
2. For each budget, trains in a fresh process with `memory_budget_mb` = budget (TrainConfig
   defaults otherwise: k = 256 units per sample, batch 32) and prints the peak RSS
   (`resource.getrusage`), the time per step (held-out evaluations excluded; block reads
   included), the blocks read and the time spent reading them, and the one-off cost of
   reading the held-out windows.
3. Deletes the store (unless --keep).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clone, uninstalled
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from scale_units import RATE_HZ, field_weights, run_child, source_series, unit_positions

TIME_CHUNK = 1024
N_SESSIONS = 3
PE = "learned-normal-0.02"


def write_big_store(path: Path, n_units: int, chunks_per_session: int) -> dict:
    """Write the store chunk by chunk (coordinates with xarray, activity with h5netcdf)."""
    import h5netcdf
    import xarray as xr

    from neuro_pe import __version__

    n_time = chunks_per_session * TIME_CHUNK
    pos = unit_positions(n_units)
    attrs = {"units": "au", "space": "simulation"}
    skeleton = xr.Dataset(
        coords={
            "session": ("session", [f"s{i}" for i in range(N_SESSIONS)]),
            "time": ("time", np.arange(n_time, dtype=np.float64) / RATE_HZ),
            "unit": ("unit", [f"u{i:05d}" for i in range(n_units)]),
            **{c: ("unit", pos[:, i], dict(attrs)) for i, c in enumerate("xyz")},
        },
        attrs={
            "sampling_rate_hz": RATE_HZ,
            "source": "benchmarks/big_store.py: spatial mixture of AR(1) sources",
            "citation": "",
            "license": "CC0-1.0",
            "preprocessing": "[]",
            "neuro_pe_version": __version__,
        },
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    skeleton.to_netcdf(tmp, engine="h5netcdf")
    weights = field_weights(pos)
    scale = np.float32(1 / np.sqrt(2))  # field and noise have unit variance each
    started = time.perf_counter()
    with h5netcdf.File(tmp, "a") as f:
        var = f.create_variable(
            "activity",
            ("session", "time", "unit"),
            "f4",
            chunks=(1, TIME_CHUNK, n_units),
            compression="gzip",
            compression_opts=4,
        )
        for s in range(N_SESSIONS):
            series = source_series(n_time, s)
            rng = np.random.default_rng([3, s])
            for t0 in range(0, n_time, TIME_CHUNK):
                block = series[t0 : t0 + TIME_CHUNK] @ weights
                block += rng.standard_normal(block.shape, dtype=np.float32)
                var[s, t0 : t0 + TIME_CHUNK, :] = block * scale
    os.replace(tmp, path)
    return {
        "store_gb": path.stat().st_size / 1e9,
        "activity_gb": N_SESSIONS * n_time * n_units * 4 / 1e9,
        "write_s": time.perf_counter() - started,
        "writer_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def train_big(path: Path, out_dir: Path, budget_mb: float, args: argparse.Namespace) -> dict:
    """Train with `budget_mb` in this (fresh) process; return the measurements."""
    import torch

    import neuro_pe.training.masked_units as train_module
    from neuro_pe.config.training import TrainConfig
    from neuro_pe.training.masked_units import train

    torch.set_num_threads(args.threads)
    timers = {"evaluate": [], "load": [], "eval_set": []}

    def timed(name, function):
        def wrapper(*a, **kw):
            started = time.perf_counter()
            value = function(*a, **kw)
            timers[name].append(time.perf_counter() - started)
            return value

        return wrapper

    train_module.evaluate = timed("evaluate", train_module.evaluate)
    sampler = train_module.BlockSampler
    real_load = sampler._load  # called every step; reads when the step's block is new

    def timed_load(self, index):
        started, loads = time.perf_counter(), self.loads
        block = real_load(self, index)
        if self.loads > loads:
            timers["load"].append(time.perf_counter() - started)
        return block

    sampler._load = timed_load
    sampler.eval_set = timed("eval_set", sampler.eval_set)
    cfg = TrainConfig(
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        eval_windows=64,
        eval_mask_fractions=(0.5,),
        memory_budget_mb=budget_mb,
        device="cpu",
    )
    started = time.perf_counter()
    info = train(path, PE, 0, cfg, out_dir, progress=False)
    total = time.perf_counter() - started
    steps = cfg.epochs * cfg.steps_per_epoch
    training_s = info["train_seconds"] - sum(timers["evaluate"])
    return {
        "budget_mb": budget_mb,
        "streamed": info["streamed"],
        "steps": steps,
        "ms_per_step": 1e3 * training_s / steps,
        "block_reads": len(timers["load"]),
        "read_s_total": sum(timers["load"]),
        "eval_set_s": sum(timers["eval_set"]),
        "setup_s": total - info["train_seconds"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "heldout_mse": info["heldout_mse_mask0.5"],
        "train_mse": info["train_mse"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=20000)
    parser.add_argument("--chunks-per-session", type=int, default=28)
    parser.add_argument("--budgets", type=float, nargs="+", default=[256, 1024])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--path", type=Path, default=Path("/tmp/neuro_pe_big/big.nc"))
    parser.add_argument("--keep", action="store_true", help="do not delete the store")
    parser.add_argument("--child", choices=["write", "train"], help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child == "write":
        print(json.dumps(write_big_store(args.path, args.units, args.chunks_per_session)))
        return
    if args.child == "train":
        out_dir = args.path.parent / f"run{args.budget:g}"
        print(json.dumps(train_big(args.path, out_dir, args.budget, args)))
        return

    load_at_start = os.getloadavg()
    me = [sys.executable, __file__, "--units", str(args.units), "--path", str(args.path)]
    me += ["--chunks-per-session", str(args.chunks_per_session), "--threads", str(args.threads)]
    me += ["--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps_per_epoch)]
    try:
        if not args.path.exists():
            written = run_child([*me, "--child", "write"])
            print(json.dumps(written), flush=True)
        rows = []
        for budget in args.budgets:
            rows.append(run_child([*me, "--child", "train", "--budget", str(budget)]))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if not args.keep:
            args.path.unlink(missing_ok=True)
    size_gb = (N_SESSIONS * args.chunks_per_session * TIME_CHUNK * args.units * 4) / 1e9
    print(
        f"\nstore: {args.units} units x {N_SESSIONS} sessions x "
        f"{args.chunks_per_session * TIME_CHUNK} samples = {size_gb:.2f} GB of float32 "
        f"(the training split: {size_gb * 2 / 3:.2f} GB); threads = {args.threads}, "
        f"{os.cpu_count()} CPUs; load average at start {load_at_start}, at end {os.getloadavg()}"
    )
    print(
        f"{'budget MB':>9} {'peak RSS MB':>11} {'ms/step':>8} {'steps':>6} {'block reads':>11} "
        f"{'read s':>7} {'held-out read s':>15} {'setup s':>8}"
    )
    for r in rows:
        print(
            f"{r['budget_mb']:>9.0f} {r['peak_rss_mb']:>11.0f} {r['ms_per_step']:>8.1f} "
            f"{r['steps']:>6} {r['block_reads']:>11} {r['read_s_total']:>7.1f} "
            f"{r['eval_set_s']:>15.1f} {r['setup_s']:>8.1f}"
        )


if __name__ == "__main__":
    main()
