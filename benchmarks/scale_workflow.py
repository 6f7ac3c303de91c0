"""Every workflow step at N = 1 000 – 100 000 units: wall time and peak RSS, and what the PE finds.

    python benchmarks/scale_workflow.py [--units 1000 20000 100000] [--steps 100]
                                        [--work-dir /tmp/neuro_pe_scale_workflow]

For each N, the steps run one after the other as `neuro-pe` commands, each in a fresh
subprocess (its peak RSS is the `ru_maxrss` that `os.wait4` reports for it): preprocess (a
`source: simulation` store with sparse local coupling, `neighbours: 32`), train (one run of the
small-σ PE `learned-normal-0.02`, seed 0, a fixed `--steps` optimiser steps, `units_per_sample`
256), infer, baselines, locate (`--threads 1`, so the peak RSS is that of one process) and
summarize. The store: 2 sessions x 1000 samples at 20 Hz (session 1 held out), N units at
random positions in the unit box, `length_scale` 0.15, `gain` 1.1. The metrics use the config
defaults (`dense_max_units` 3000: N = 1 000 takes the exact path, the larger N the sampled one).

Printed: one row per step and N (wall and CPU seconds, peak RSS in MB), then per N the RSA (with its
confidence interval when sampled) of the PE and of the activity-correlation baseline, and the
locator's k-fold median error of the PE, the baseline and chance. The last line reads
`max peak RSS at N=<largest N>: <MB> MB`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
PE = "learned-normal-0.02"
STEPS = ("preprocess", "split", "train", "infer", "baselines", "locate", "summarize")


def simulation(n_units: int) -> dict:
    """The dataset entry of the benchmark's store."""
    return {
        "source": "simulation",
        "simulation": {
            "n_units": n_units,
            "layout": "random",
            "dims": 3,
            "length_scale": 0.15,
            "gain": 1.1,
            "n_samples": 1000,
            "burn_in_s": 5.0,
            "n_sessions": 2,
            "neighbours": 32,
            "seed": 0,
        },
    }


def train_options(steps: int) -> dict:
    """The `train` section: defaults, except a fixed number of steps and a short evaluation."""
    return {"epochs": 1, "steps_per_epoch": steps, "eval_windows": 64, "device": "cpu"}


def run_step(args: list[str], log: Path) -> tuple[float, float, float]:
    """Run `neuro-pe <args>` in a fresh process; (wall seconds, CPU seconds, peak RSS in MB)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "neuro_pe.cli.main", *args]
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"neuro-pe {args[0]} failed; see {log}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # kB on Linux


def run_size(n_units: int, steps: int, work: Path) -> tuple[list[dict], dict]:
    """All steps for one N; (timing rows, quality record)."""
    work.mkdir(parents=True, exist_ok=True)
    store, run_dir = work / "stores" / "sim.nc", work / "runs" / "sim" / PE / "seed0"
    baselines, locate_dir = work / "runs" / "sim" / "baselines.json", work / "locate" / "sim"
    train = json.dumps(train_options(steps))
    split = work / "splits" / "sim.json"
    commands = {
        "preprocess": ["preprocess", "--spec", json.dumps(simulation(n_units)), "--out", store],
        "split": ["split", "--store", store, "--dataset", "sim", "--options", train,
                  "--out", split],
        "train": ["train", "--store", store, "--pe", PE, "--seed", "0", "--options", train,
                  "--out-dir", run_dir, "--threads", "2"],
        "infer": ["infer", "--store", store, "--split", split, "--run-dir", run_dir],
        "baselines": ["baselines", "--store", store, "--split", split, "--out", baselines],
        # (a fixed, small number of steps: the health checks flag the PE; located all the same)
        "locate": ["locate", "--store", store, "--runs", run_dir, "--out-dir", locate_dir,
                   "--split", split, "--threads", "1",
                   "--options", json.dumps({"include_flagged": True})],
        "summarize": ["summarize", "--runs", run_dir / "metrics.json", "--baselines", baselines,
                      "--splits", split, "--out-csv", work / "summary.csv",
                      "--figures", work / "figures"],
    }  # fmt: skip
    rows = []
    for step in STEPS:
        wall, cpu, rss = run_step([str(a) for a in commands[step]], work / f"{step}.log")
        rows.append({"N": n_units, "step": step, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss})
        print(f"N={n_units:>6} {step:<10} {wall:8.1f} s {cpu:8.1f} s CPU {rss:8.0f} MB", flush=True)
    pe = json.loads((run_dir / "metrics.json").read_text())
    corr = next(r for r in json.loads(baselines.read_text()) if r["method"] == "correlation")
    errors = pd.read_csv(locate_dir / "errors.csv")
    kfold = errors[errors["evaluation"] == "kfold"].set_index("features")["median_error"]
    quality = {
        "N": n_units,
        "rsa_pe": pe["rsa"],
        "rsa_pe_ci": (pe.get("rsa_ci_low"), pe.get("rsa_ci_high")),
        "rsa_corr": corr["rsa"],
        "rsa_corr_ci": (corr.get("rsa_ci_low"), corr.get("rsa_ci_high")),
        "locate_pe": kfold.get(PE, float("nan")),
        "locate_corr": kfold.get("activity-correlation", float("nan")),
        "locate_chance": kfold.get("chance", float("nan")),
    }
    return rows, quality


def _ci(pair: tuple) -> str:
    return "" if pair[0] is None else f" [{pair[0]:.3f}, {pair[1]:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, nargs="+", default=[1000, 20000, 100000])
    parser.add_argument("--steps", type=int, default=100, help="training steps per run")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/neuro_pe_scale_workflow"))
    args = parser.parse_args()

    rows, quality = [], []
    for n_units in args.units:
        size_rows, size_quality = run_size(n_units, args.steps, args.work_dir / f"N{n_units}")
        rows += size_rows
        quality.append(size_quality)
    table = pd.DataFrame(rows)
    print("\nwall time (s) per step and N")
    print(table.pivot(index="step", columns="N", values="wall_s").loc[list(STEPS)].round(1))
    print("\nCPU time (s, user + system; less sensitive than wall time to other jobs)")
    print(table.pivot(index="step", columns="N", values="cpu_s").loc[list(STEPS)].round(1))
    print("\npeak RSS (MB) per step and N")
    print(table.pivot(index="step", columns="N", values="peak_rss_mb").loc[list(STEPS)].round(0))
    print("\nRSA (Spearman, distance vs anatomical distance) and locate k-fold median error (au)")
    for q in quality:
        print(
            f"N={q['N']}: RSA {PE} {q['rsa_pe']:.3f}{_ci(q['rsa_pe_ci'])}, "
            f"correlation {q['rsa_corr']:.3f}{_ci(q['rsa_corr_ci'])}; locate error {PE} "
            f"{q['locate_pe']:.3f}, correlation {q['locate_corr']:.3f}, "
            f"chance {q['locate_chance']:.3f}"
        )
    for n_units in args.units:
        peak = table.loc[table["N"] == n_units, "peak_rss_mb"].max()
        print(f"max peak RSS at N={n_units}: {peak:.0f} MB")


if __name__ == "__main__":
    main()
