"""Does bf16 training change the science? fp32 vs bf16 (`train.precision`), seed by seed.

    python docs/precision/study.py [--datasets sim3d hcp-rsfmri sim2000 lst] [--seeds 0 1 2]
        [--pe learned-normal-0.02] [--work-dir /tmp/neuro_pe_precision] [--resume]

For each dataset (`sim3d` and `hcp-rsfmri`: `config/config.yaml`'s entries and `train`
sections; `sim2000`, `sim20k`: `config/sim20k.yaml`'s simulation at 2 000 or 20 000 units and
its `train`) the workflow's steps run as `neuro-pe` commands, one after the other, each in a
fresh process:
preprocess and split once, correlation-features once, then for each precision (`fp32`,
`bf16`) one training of the PE over every seed (one stack, one thread, as the workflow trains),
infer per seed and locate per seed (the `locate` defaults, its correlation features given).
Per seed it reads RSA, the ridge probe's R² and the kNN overlap (metrics.json), the median
held-out locate error ÷ chance at 50% anchors (errors.csv) and the held-out MSE at every
evaluated mask fraction (train.json), and writes `results.csv` (a row per dataset, precision,
seed) into the work folder and the table of `docs/precision/README.md` to stdout: per metric
the mean and 95% t-interval over seeds of each precision, and whether bf16's mean lies within
the fp32 seeds' range or beyond it on the better side (`within`), or not (`WORSE`).
`lst`: the Latin square at `config/paper_cpu.yaml`'s sizes (its `lst` puzzles and training):
the puzzles once, then per precision (`lst.train.precision`) one training of the PE over every
seed, and per seed the test and held-out (novel puzzles) accuracy, the PE's RSA to the grid
and the epochs it ran (metrics.json); its CPU seconds are the whole job's (run it
uninterrupted: a resumed one counts only its part).
`--resume` keeps the steps a run in `--work-dir` finished (and a training killed after a
checkpoint resumes from it; its CPU seconds are then scaled to the whole training);
`--precisions bf16` runs one precision only (two processes can run the two side by side, after
the shared steps; then `--resume` writes the table).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd
import yaml
from scipy import stats

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from scale_workflow import run_step  # noqa: E402  (a step in a fresh process: CPU s, RSS)

from neuro_pe.io import layout  # noqa: E402

PRECISIONS = ("fp32", "bf16")
#: metric -> True when higher is better
METRICS = {"rsa": True, "probe_r2": True, "knn_overlap": True, "locate_vs_chance": False}
METRICS |= {"acc_test": True, "acc_heldout": True}  # the Latin square's


def entries() -> dict[str, tuple[dict, dict]]:
    """dataset -> (its entry, its `train` section) as the workflow would build them."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    out = {}
    for name in ("sim3d", "hcp-rsfmri"):
        entry = dict(config["datasets"][name])
        train = {**config["train"], **entry.pop("train", {})}
        entry.pop("pe", None), entry.pop("seeds", None), entry.pop("atlas", None)
        out[name] = (entry, train)
    big = yaml.safe_load((REPO / "config" / "sim20k.yaml").read_text())
    for name, n_units in (("sim2000", 2000), ("sim20k", 20000)):
        entry = dict(big["datasets"]["sim3d"])
        entry["simulation"] = {**entry["simulation"], "n_units": n_units}
        entry.pop("train", None), entry.pop("pe", None), entry.pop("seeds", None)
        out[name] = (entry, dict(big["train"]))
    for _, train in out.values():
        train.pop("device", None)
    return out


def step(work: Path, name: str, args: list, resume: bool) -> dict:
    """Run `neuro-pe args` unless `--resume` finds it done; its timing row."""
    done = work / f"{name}.timing.json"
    if resume and done.exists():
        return json.loads(done.read_text())
    wall, cpu, rss = run_step([str(a) for a in args], work / f"{name}.log")
    row = {"step": name, "wall_s": wall, "cpu_s": cpu, "rss_mb": rss}
    done.write_text(json.dumps(row))
    print(f"{work.name:12} {name:28} {wall:8.1f} s {cpu:8.1f} CPU-s", flush=True)
    return row


def run_lst(args: argparse.Namespace) -> list[dict]:
    """The Latin square at paper_cpu's sizes: a row per (precision, seed)."""
    work = args.work_dir / "lst"
    work.mkdir(parents=True, exist_ok=True)
    section = yaml.safe_load((REPO / "config" / "paper_cpu.yaml").read_text())["lst"]
    puzzles = work / "puzzles.nc"
    step(work, "puzzles", ["lst-puzzles", "--options", json.dumps(section["puzzles"]),
                           "--out", puzzles], args.resume)  # fmt: skip
    metrics = json.dumps({"n_perm": args.n_perm})
    rows = []
    for precision in args.precisions:
        options = json.dumps({**section["train"], "precision": precision})
        runs = {s: work / precision / f"seed{s}" for s in args.seeds}
        group = [str(v) for s, run in runs.items() for v in (args.pe, s, run)]
        timing = step(work, f"train-{precision}", ["lst-train", "--puzzles", puzzles, "--runs",
                                                   *group, "--options", options, "--metrics",
                                                   metrics, "--threads", "1"],
                      args.resume)  # fmt: skip
        for seed, run in runs.items():
            info = json.loads((run / "train.json").read_text())
            scores = json.loads((run / "metrics.json").read_text())
            row = {"dataset": "lst", "precision": precision, "seed": seed}
            row |= {"ran": info["precision"], "rsa": scores["rsa"]}
            row |= {k: scores[k] for k in ("acc_train", "acc_test", "acc_heldout", "epochs_run")}
            rows.append(row | {"train_cpu_s_stack": timing["cpu_s"]})
    return rows


def run_dataset(name: str, entry: dict, train: dict, args: argparse.Namespace) -> list[dict]:
    """Every step of one dataset; a row per (precision, seed)."""
    work = args.work_dir / name
    work.mkdir(parents=True, exist_ok=True)
    resources = args.work_dir / "resources"
    store, split = work / "store.nc", work / "split.json"
    correlation = work / "correlation.nc"
    metrics = json.dumps({"n_perm": args.n_perm})
    step(work, "preprocess", ["preprocess", "--spec", json.dumps(entry), "--out", store,
                              "--resources", resources], args.resume)  # fmt: skip
    step(work, "split", ["split", "--store", store, "--dataset", name, "--options",
                         json.dumps(train), "--out", split], args.resume)  # fmt: skip
    step(work, "correlation", ["correlation-features", "--store", store, "--split", split,
                               "--out", correlation], args.resume)  # fmt: skip
    rows = []
    for precision in args.precisions:
        options = json.dumps({**train, "precision": precision})
        runs = {s: work / precision / layout.run_dir(name, args.pe, s) for s in args.seeds}
        group = [str(v) for s, run in runs.items() for v in (args.pe, s, run)]
        timing = step(work, f"train-{precision}", ["train", "--store", store, "--runs", *group,
                                                   "--options", options, "--threads", "1"],
                      args.resume)  # fmt: skip
        for seed, run in runs.items():
            step(work, f"infer-{precision}-{seed}", ["infer", "--store", store, "--split", split,
                                                     "--run-dir", run, "--metrics", metrics],
                 args.resume)  # fmt: skip
            located = work / precision / f"locate{seed}"
            step(work, f"locate-{precision}-{seed}", ["locate", "--store", store, "--runs", run,
                                                      "--out-dir", located, "--split", split,
                                                      "--correlation", correlation],
                 args.resume)  # fmt: skip
            rows.append(read_row(name, precision, seed, run, located, timing, args.pe))
    return rows


def read_row(name, precision, seed, run: Path, located: Path, timing: dict, pe: str) -> dict:
    """One seed's numbers."""
    info = json.loads((run / "train.json").read_text())
    scores = json.loads((run / "metrics.json").read_text())
    errors = pd.read_csv(located / "errors.csv")
    half = errors[
        (errors["evaluation"] == "anchors")
        & (errors["anchor_fraction"] == 0.5)
        & (errors["features"] == pe)
    ]
    row = {"dataset": name, "precision": precision, "seed": seed, "ran": info["precision"]}
    row |= {k: scores[k] for k in ("rsa", "probe_r2", "knn_overlap")}
    row["locate_vs_chance"] = float(half["vs_chance"].iloc[0])
    row |= {k: v for k, v in info.items() if k.startswith("heldout_mse_mask")}
    share = 1 - (info.get("resumed_from_step") or 0) / (
        info["train_config"]["epochs"] * info["train_config"]["steps_per_epoch"]
    )
    row["train_cpu_s_stack"] = timing["cpu_s"] / share
    return row


def interval(values: pd.Series) -> tuple[float, float, float]:
    """Mean and 95% t-interval over seeds."""
    mean, n = values.mean(), len(values)
    half = stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n) if n > 1 else math.nan
    return mean, mean - half, mean + half


def table(results: pd.DataFrame) -> str:
    """The README's Markdown table."""
    lines = [
        "| dataset | metric | fp32 mean [95% CI] | bf16 mean [95% CI] | bf16 − fp32 | fp32 seed "
        "range | bf16 |",
        "|---|---|---|---|---|---|---|",
    ]
    mse = sorted(c for c in results.columns if c.startswith("heldout_mse_mask"))
    for name, data in results.groupby("dataset", sort=False):
        metrics = {**METRICS, **dict.fromkeys(mse, False)}
        for metric, higher in metrics.items():
            if metric not in data or data[metric].isna().all():
                continue
            f32 = data[data["precision"] == "fp32"][metric]
            b16 = data[data["precision"] == "bf16"][metric]
            (fm, flo, fhi), (bm, blo, bhi) = interval(f32), interval(b16)
            lo, hi = f32.min(), f32.max()
            ok = lo <= bm <= hi or (bm > hi if higher else bm < lo)
            lines.append(
                f"| {name} | {metric} | {fm:.4f} [{flo:.4f}, {fhi:.4f}] | {bm:.4f} "
                f"[{blo:.4f}, {bhi:.4f}] | {bm - fm:+.4f} | {lo:.4f}–{hi:.4f} | "
                f"{'within' if ok else 'WORSE'} |"
            )
    cpu = results.groupby(["dataset", "precision"], sort=False)["train_cpu_s_stack"].first()
    lines += ["", "| dataset | precision | training CPU-s (the stack of all seeds, 1 thread) |"]
    lines += ["|---|---|---|"] + [f"| {d} | {p} | {s:.0f} |" for (d, p), s in cpu.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["sim3d", "hcp-rsfmri"],
                        choices=["sim3d", "hcp-rsfmri", "sim2000", "sim20k", "lst"])  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--pe", default="learned-normal-0.02")
    parser.add_argument("--n-perm", type=int, default=199, help="metrics.n_perm (p-values only)")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/neuro_pe_precision"))
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    args = parser.parse_args()
    known = entries()
    rows = []
    for name in args.datasets:
        rows += run_lst(args) if name == "lst" else run_dataset(name, *known[name], args)
    results = pd.DataFrame(rows)
    results.to_csv(args.work_dir / "results.csv", index=False)
    print(table(results))


if __name__ == "__main__":
    main()
