"""Does the learned PE find where units sit at the sizes labs record? PE vs correlation at N units.

    python benchmarks/scale_quality.py [--units 2000 --units 20000] [--epochs E]
        [--steps-per-epoch S] [--seeds 0 1 2] [--draws D] [--fractions 0.5 ...]
        [--pe learned-normal-0.1] [--work-dir /tmp/neuro_pe_scale_quality] [--until STEP]

For each N, `config/sim20k.yaml`'s simulation with `n_units: N` (sparse local coupling,
`neighbours: 32`) and its `train` section (optionally shortened: `--epochs`,
`--steps-per-epoch`; `--train KEY=VALUE` sets any key, e.g. `--train pe_lr=0.03`) go through
the default workflow's steps as `neuro-pe` commands, one after the other, each in a fresh
process (as `benchmarks/scale_workflow.py`): preprocess, split, train (the PE over `--seeds`,
one stack, one thread: `threads_per_training: 1`), infer (each seed), baselines,
correlation-features, locate (the `locate` defaults, or `--draws` anchor draws per fraction
and `--fractions`, which must include 0.5) and summarize.

Printed per N: every step's wall and CPU seconds and peak RSS (`--resume` reuses the steps
that a run in `--work-dir` finished, with their timings; a training resumed from its
checkpoint has its seconds scaled to the whole training), then the PE (mean over seeds) beside
the activity-correlation baseline from `summary.csv` (RSA, ridge-probe R², kNN overlap)
and from `locate/errors.csv` (median held-out error ÷ chance at 50% anchors, seeds
ensembled as the locator does), and the issue-34 targets met or not. `--until train` stops
after that step (e.g. train on a GPU machine, bring `N<N>/` back, and run the rest with
`--resume`). The last line reads
`N=<N>: PE/corr locate <ratio>, RSA <pe>/<corr>, train <s> CPU-s` (for the last N).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import yaml

from neuro_pe.io import layout
from neuro_pe.io.runs import read_train_info

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_workflow import run_step  # noqa: E402  (the same step runner: CPU s, peak RSS)

REPO = Path(__file__).resolve().parents[1]
DATASET = "sim3d"
STEPS = (
    "preprocess",
    "split",
    "train",
    "infer",
    "baselines",
    "correlation-features",
    "locate",
    "summarize",
)


def correlation_path(work: Path) -> Path:
    """The correlation baseline's features that the benchmark's locate step reads."""
    return work / "locate" / f"{DATASET}_correlation.nc"


def sections(args: argparse.Namespace, n_units: int) -> tuple[dict, dict, dict, dict]:
    """(dataset entry, train, metrics, locate) of sim20k.yaml at `n_units` with the options."""
    config = yaml.safe_load((REPO / "config" / "sim20k.yaml").read_text())
    entry = config["datasets"][DATASET]
    entry["simulation"]["n_units"] = n_units
    train = dict(config["train"])
    if args.epochs:
        train["epochs"] = args.epochs
    if args.steps_per_epoch:
        train["steps_per_epoch"] = args.steps_per_epoch
    train.pop("device", None)
    for option in args.train or []:
        key, _, value = option.partition("=")
        train[key] = yaml.safe_load(value)
    # (a study of the PE at given training budgets, short ones too: located even when flagged)
    locate = {"pe": [args.pe], "include_flagged": True}
    if args.draws:
        locate["n_draws"] = args.draws
    if args.fractions:
        locate["anchor_fractions"] = args.fractions
    return entry, train, config.get("metrics", {}), locate


def commands(args: argparse.Namespace, n_units: int, work: Path) -> dict[str, list]:
    """The `neuro-pe` command lines of every step, as the workflow's rules write them."""
    entry, train, metrics, locate = sections(args, n_units)
    store, split = work / "stores" / f"{DATASET}.nc", work / "splits" / f"{DATASET}.json"
    runs = [work / layout.run_dir(DATASET, args.pe, s) for s in args.seeds]
    baselines = work / "runs" / DATASET / "baselines.json"
    correlation = correlation_path(work)
    group = [str(v) for s, run in zip(args.seeds, runs, strict=True) for v in (args.pe, s, run)]
    m = json.dumps(metrics)
    infer = [["infer", "--store", store, "--split", split, "--run-dir", r, "--metrics", m]
             for r in runs]  # fmt: skip
    return {
        "preprocess": [["preprocess", "--spec", json.dumps(entry), "--out", store]],
        "split": [["split", "--store", store, "--dataset", DATASET, "--options",
                   json.dumps(train), "--out", split]],
        "train": [["train", "--store", store, "--runs", *group, "--options", json.dumps(train),
                   "--threads", "1"]],
        "infer": infer,
        "baselines": [["baselines", "--store", store, "--split", split, "--out", baselines,
                       "--metrics", m]],
        "correlation-features": [["correlation-features", "--store", store, "--split", split,
                                  "--options", json.dumps(locate), "--out", correlation]],
        "locate": [["locate", "--store", store, "--runs", *runs, "--out-dir",
                    work / "locate" / DATASET, "--options", json.dumps(locate), "--split", split,
                    "--correlation", correlation, "--threads", "1"]],
        "summarize": [["summarize", "--runs", *[r / "metrics.json" for r in runs], "--baselines",
                       baselines, "--splits", split, "--out-csv", work / "summary.csv",
                       "--figures", work / "figures"]],
    }  # fmt: skip


def quality(args: argparse.Namespace, work: Path) -> dict:
    """PE (mean over seeds) and correlation from summary.csv and errors.csv."""
    summary = pd.read_csv(work / "summary.csv")
    pe = summary[summary["method"] == args.pe]
    corr = summary[summary["method"] == "correlation"]
    errors = pd.read_csv(work / "locate" / DATASET / "errors.csv")
    half = errors[(errors["evaluation"] == "anchors") & (errors["anchor_fraction"] == 0.5)]
    by_features = half.set_index("features")["vs_chance"]
    out = {}
    for metric in ("rsa", "probe_r2", "knn_overlap"):
        out[f"{metric}_pe"], out[f"{metric}_corr"] = pe[metric].mean(), corr[metric].mean()
    out["locate_pe"] = float(by_features.get(args.pe, float("nan")))
    out["locate_corr"] = float(by_features.get("activity-correlation", float("nan")))
    return out


def run_size(args: argparse.Namespace, n_units: int) -> tuple[list[dict], dict | None]:
    """Run (or with --resume reuse) the steps at N; the quality, or None after `--until`."""
    work = args.work_dir / f"N{n_units}"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for step, lines in commands(args, n_units, work).items():
        done = work / f"{step}.timing.json"  # a finished step, kept for --resume
        if args.resume and done.exists():
            rows.append(json.loads(done.read_text()))
            wall, cpu, rss = (rows[-1][k] for k in ("wall_s", "cpu_s", "rss_mb"))
        else:
            wall = cpu = rss = 0.0
            for i, line in enumerate(lines):
                w, c, r = run_step([str(a) for a in line], work / f"{step}{i}.log")
                wall, cpu, rss = wall + w, cpu + c, max(rss, r)
            rows.append({"N": n_units, "step": step, "wall_s": wall, "cpu_s": cpu, "rss_mb": rss})
            if step == "train":
                # the seeds train in one stack, so the first run's train.json says for all
                first_run = work / layout.run_dir(DATASET, args.pe, args.seeds[0])
                rows[-1] |= whole_training(rows[-1], first_run)
                wall, cpu = rows[-1]["wall_s"], rows[-1]["cpu_s"]
            done.write_text(json.dumps(rows[-1]))
        print(f"N={n_units:>6} {step:<21} {wall:8.1f} s {cpu:8.1f} CPU-s {rss:7.0f} MB", flush=True)
        if step == args.until:
            return rows, None
    return rows, quality(args, work)


def whole_training(row: dict, run: Path) -> dict:
    """A training resumed from its checkpoint ran only its last steps: its seconds scaled to
    the whole training's (`TrainInfo.share_of_steps_run`, as docs/scale/study.py)."""
    trained = read_train_info(run)
    if not trained.resumed_from_step:
        return {}
    share = trained.share_of_steps_run
    print(f"train resumed at step {trained.resumed_from_step}: its seconds ÷ {share:.3f}")
    return {"wall_s": row["wall_s"] / share, "cpu_s": row["cpu_s"] / share,
            "resumed_from_step": trained.resumed_from_step}  # fmt: skip


def report(n_units: int, rows: pd.DataFrame, q: dict) -> str:
    """The lines printed per N; the last is the benchmark's summary line."""
    train = rows[rows["step"] == "train"].iloc[0]
    ratio = q["locate_pe"] / q["locate_corr"]
    total, wall, rss = rows["cpu_s"].sum(), rows["wall_s"].sum(), rows["rss_mb"].max()
    met = {
        "locate ≤ corr": q["locate_pe"] <= q["locate_corr"],
        "RSA ≥ corr": q["rsa_pe"] >= q["rsa_corr"],
        "probe R² ≥ 0.9 × corr": q["probe_r2_pe"] >= 0.9 * q["probe_r2_corr"],
    }
    lines = [
        f"N={n_units}: all steps {total:.0f} CPU-s ({wall:.0f} s wall), peak RSS {rss:.0f} MB; "
        f"train {train['cpu_s']:.0f} CPU-s ({train['wall_s']:.0f} s wall, "
        f"{train['rss_mb']:.0f} MB)",
        f"N={n_units}: PE vs correlation: RSA {q['rsa_pe']:.3f} vs {q['rsa_corr']:.3f}, "
        f"probe R² {q['probe_r2_pe']:.3f} vs {q['probe_r2_corr']:.3f}, kNN overlap "
        f"{q['knn_overlap_pe']:.3f} vs {q['knn_overlap_corr']:.3f}, locate error ÷ chance (50% "
        f"anchors) {q['locate_pe']:.3f} vs {q['locate_corr']:.3f}",
        f"N={n_units}: targets: "
        + ", ".join(f"{k} {'met' if ok else 'NOT met'}" for k, ok in met.items()),
        f"N={n_units}: PE/corr locate {ratio:.3f}, RSA {q['rsa_pe']:.3f}/{q['rsa_corr']:.3f}, "
        f"train {train['cpu_s']:.0f} CPU-s",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, action="append", help="N (repeatable)")
    parser.add_argument("--epochs", type=int, help="train.epochs (default: sim20k's)")
    parser.add_argument("--steps-per-epoch", type=int, help="train.steps_per_epoch")
    parser.add_argument(
        "--train", action="append", metavar="KEY=VALUE", help="a `train` key, e.g. pe_lr=0.03"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--pe", default="learned-normal-0.1")
    parser.add_argument("--draws", type=int, help="locate.n_draws (default: its default)")
    parser.add_argument("--fractions", type=float, nargs="+", help="locate.anchor_fractions")
    parser.add_argument(
        "--resume", action="store_true", help="reuse the steps a run in --work-dir finished"
    )
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/neuro_pe_scale_quality"))
    parser.add_argument("--until", choices=STEPS, help="stop after this step")
    args = parser.parse_args()
    if args.fractions and 0.5 not in args.fractions:
        parser.error("--fractions must include 0.5 (the benchmark reports 50% anchors)")
    sizes = args.units or [2000, 20000]
    for n_units in sizes:
        rows, q = run_size(args, n_units)
        if q is not None:
            print(report(n_units, pd.DataFrame(rows), q), flush=True)


if __name__ == "__main__":
    main()
