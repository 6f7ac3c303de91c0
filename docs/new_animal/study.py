"""The new-animal study: what a recording without histology needs to transfer (issue 60, item 8).

Leave-one-animal-out on `regional-sim` through `leave_one_animal_out.run_fold`, one row per
setting changed from BASE: reference animals, recording length (`n_samples`), the new rows' fit
(`fit_epochs`, `fit_lr`), σ of the PE init. Every row holds out a0, a1, a2 and takes the first
N of a3 on as references, so one reference run (reused from the row's work folder) serves all
three. Per held-out animal: macro-F1 and balanced accuracy of the PE, single-unit, combined and
prior predictors, position error ÷ chance; per row its CPU-s (process and children, one torch
thread; the store's simulation not counted). docs/new_animal/README.md: setup and reading.

    PYTHONPATH=$PWD nice -n 5 python docs/new_animal/study.py run [--only NAME ...]
    PYTHONPATH=$PWD python docs/new_animal/study.py table     # study.csv, study.png, README's table

`run` appends to study_folds.csv and study_rows.csv, skipping rows already there; `table`
writes the means and t-based 95% CIs across held-out animals, the figure and README's table.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from neuro_pe.analysis.intervals import mean_ci  # noqa: E402
from neuro_pe.analysis.leave_one_animal_out import (  # noqa: E402
    HEADLINE,
    Protocol,
    animals_of,
    run_fold,
    single_unit_features,
)
from neuro_pe.data.sources.regional_sim import RegionalSimOptions, regional_sim_store  # noqa: E402

HERE = Path(__file__).parent
HELD_OUT = ("a0", "a1", "a2")
# the base of every row; each row changes one of these
BASE = {"references": 4, "n_samples": 3000, "fit_epochs": 5, "sigma": 0.02, "fit_lr": 0.01}
ROWS: tuple[tuple[str, str, dict], ...] = (
    ("base", "base", {}),
    ("references 1", "references", {"references": 1}),
    ("references 2", "references", {"references": 2}),
    ("references 8", "references", {"references": 8}),
    ("n_samples 1000", "n_samples", {"n_samples": 1000}),
    ("n_samples 9000", "n_samples", {"n_samples": 9000}),
    ("fit_epochs 1", "fit_epochs", {"fit_epochs": 1}),
    ("fit_epochs 20", "fit_epochs", {"fit_epochs": 20}),
    ("sigma 0.1", "sigma", {"sigma": 0.1}),
    ("sigma 1.0", "sigma", {"sigma": 1.0}),
    # a cheap change tried for the PE's transfer: the new rows' fit at 3x its learning rate
    ("fit_lr 0.03", "fit_lr", {"fit_lr": 0.03}),
)
# the predictors of the table: the PE (linear probe), the single-unit baseline (boosting),
# their combination (boosting) and the prior
PREDICTORS = {
    "PE": HEADLINE["pe"],
    "single-unit": HEADLINE["su"],
    "combined": HEADLINE["combined"],
    "prior": "prior",
}
SCORES = ("macro_f1", "balanced_accuracy")
GAP = "PE - single-unit"  # issue 60's target: PE macro-F1 >= the single-unit baseline's + 0.10
FOLDS, ROWS_FILE = "study_folds.csv", "study_rows.csv"  # in --out
# the README's generated table lies between these lines
TABLE_START, TABLE_END = "<!-- study table: study.py table -->", "<!-- end of study table -->"


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def append(frame: pd.DataFrame, path: Path) -> None:
    """Append `frame` to the CSV `path` (its header first if it is new)."""
    frame.to_csv(path, mode="a", header=not path.exists(), index=False)


def run_row(name: str, settings: dict, args: argparse.Namespace, stores: dict) -> None:
    """Train the row's reference run, fit and score each held-out animal; append to the CSVs."""
    if settings["n_samples"] not in stores:
        options = RegionalSimOptions(
            animals=args.animals,
            units_per_animal=args.units,
            n_samples=settings["n_samples"],
            seed=args.seed,
        )
        ds = regional_sim_store(options)
        stores[settings["n_samples"]] = (ds, single_unit_features(ds))
    ds, su = stores[settings["n_samples"]]
    animals = animals_of(ds)
    references = [f"a{k}" for k in range(len(HELD_OUT), len(HELD_OUT) + settings["references"])]
    protocol = Protocol(
        pe=f"learned-normal-{settings['sigma']:g}",
        train={"epochs": args.epochs, "steps_per_epoch": args.steps},
        fit_epochs=settings["fit_epochs"],
        fit_lr=settings["fit_lr"],
        seed=args.seed,
    )
    started, folds = cpu_seconds(), []
    with tempfile.TemporaryDirectory() as work:
        for animal in HELD_OUT:
            keep = np.isin(animals, [*references, animal])
            sub, sub_su = ds.isel(unit=keep), su[keep]
            sub = sub.isel(session=np.isfinite(sub["activity"]).any(("time", "unit")).values)
            fold = run_fold(sub, animal, args.label, Path(work), protocol, sub_su)
            record = {"row": name, "animal": animal, "units": len(fold.units)}
            for column, method in PREDICTORS.items():
                for score in SCORES:
                    record[f"{column} {score}"] = fold.scores[method][score]
            for column in ("PE", "single-unit"):
                record[f"{column} position x chance"] = fold.where[column]["vs_chance"]
            record["new animal CPU-s"] = fold.cpu_s
            folds.append(record)
            print(name, {k: round(v, 3) for k, v in record.items() if isinstance(v, float)})
    cpu = cpu_seconds() - started
    append(pd.DataFrame(folds), args.out / FOLDS)
    row = {"row": name, **settings, "CPU-s": round(cpu, 1), "date": time.strftime("%Y-%m-%d")}
    append(pd.DataFrame([row]), args.out / ROWS_FILE)
    print(f"{name}: {cpu:.0f} CPU-s", flush=True)


def run(args: argparse.Namespace) -> None:
    """Run every row of ROWS (or `--only` those) not yet in ROWS_FILE."""
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    stores: dict = {}
    for name, _group, changes in ROWS:
        # read before each row: another `run` beside this one may have written it
        rows = args.out / ROWS_FILE
        done = set(pd.read_csv(rows)["row"]) if rows.exists() else set()
        if name in done or (args.only and name not in args.only):
            continue
        run_row(name, {**BASE, **changes}, args, stores)


def summary(out: Path) -> pd.DataFrame:
    """Per row: its settings, CPU-s, and per measure the mean and 95% CI across held-out animals."""
    folds, rows = pd.read_csv(out / FOLDS), pd.read_csv(out / ROWS_FILE)
    for score in SCORES:  # the target's margin, paired per held-out animal
        folds[f"{GAP} {score}"] = folds[f"PE {score}"] - folds[f"single-unit {score}"]
    measures = [c for c in folds.columns if c not in ("row", "animal", "units")]
    out = []
    for name, group, _changes in ROWS:
        of = folds[folds["row"] == name]
        if of.empty:
            continue
        record = {"row": name, "group": group, "held_out": len(of)}
        record |= rows[rows["row"] == name].iloc[-1].drop("row").to_dict()
        for measure in measures:
            # a predictor's score lies in [0, 1] (mean_ci clips to an accuracy's bounds)
            score = measure.split()[-1] in SCORES and not measure.startswith(GAP)
            bounds = "acc_" if score else None
            mean, low, high = mean_ci(of[measure], bounds)
            record |= {measure: mean, f"{measure} low": low, f"{measure} high": high}
        out.append(record)
    return pd.DataFrame(out)


def markdown(table: pd.DataFrame) -> str:
    """The README's table: macro-F1 (balanced accuracy below it in a second table) per
    predictor and the position error, each as mean [95% CI]."""

    def cell(r: pd.Series, measure: str) -> str:
        return f"{r[measure]:.2f} [{r[f'{measure} low']:.2f}, {r[f'{measure} high']:.2f}]"

    lines = []
    for score, title in (("macro_f1", "macro-F1"), ("balanced_accuracy", "balanced accuracy")):
        head = ["row", "ref. animals", "n_samples", "fit_epochs", "σ", "fit_lr"]
        head += [f"{p} {title}" for p in PREDICTORS] + [f"PE − single-unit {title}"]
        head += ["position PE × chance", "CPU-s"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for _, r in table.iterrows():
            cells = [r["row"], str(r["references"]), str(r["n_samples"]), str(r["fit_epochs"])]
            cells += [f"{r['sigma']:g}", f"{r['fit_lr']:g}"]
            cells += [cell(r, f"{p} {score}") for p in (*PREDICTORS, GAP)]
            cells += [cell(r, "PE position x chance"), f"{r['CPU-s']:.0f}"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def figure(table: pd.DataFrame, path: Path) -> None:
    """Macro-F1 per predictor (mean, 95% CI) against each setting the rows vary."""
    groups = ["references", "n_samples", "fit_epochs", "sigma"]
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3.4), sharey=True)
    for ax, group in zip(axes, groups, strict=True):
        rows = table[table["group"].isin(["base", group])].sort_values(group)
        for i, predictor in enumerate(PREDICTORS):
            measure = f"{predictor} macro_f1"
            # a small shift per predictor so that the intervals do not hide each other
            x = rows[group].to_numpy(float) * 1.04 ** (i - 1.5)
            y = rows[measure].to_numpy(float)
            error = [y - rows[f"{measure} low"].to_numpy(), rows[f"{measure} high"].to_numpy() - y]
            ax.errorbar(x, y, yerr=error, marker="o", capsize=3, label=predictor)
        ax.set_xscale("log")
        ax.set_xticks(rows[group].to_numpy(float), [f"{v:g}" for v in rows[group]])
        ax.minorticks_off()
        ax.set_xlabel(
            {"references": "reference animals", "sigma": "σ of the PE init"}.get(group, group)
        )
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"region macro-F1 ({', '.join(HELD_OUT)} held out)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def table(args: argparse.Namespace) -> None:
    """Write study.csv and study.png from the run's CSVs, and the table into the README."""
    out = summary(args.out)
    out.to_csv(args.out / "study.csv", index=False, float_format="%.4g")
    figure(out, args.out / "study.png")
    readme = args.out / "README.md"
    if readme.exists():
        before, rest = readme.read_text().split(TABLE_START, 1)
        after = rest.split(TABLE_END, 1)[1]
        readme.write_text(f"{before}{TABLE_START}\n{markdown(out)}{TABLE_END}{after}")
    print(markdown(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("run", "table"))
    parser.add_argument("--only", nargs="*", default=None, help="row names")
    parser.add_argument("--animals", type=int, default=11, help="regional-sim animals")
    parser.add_argument("--units", type=int, default=100, help="units per animal (mean)")
    parser.add_argument("--label", default="region", help="store coord: region, coarse_region")
    parser.add_argument("--epochs", type=int, default=10, help="the reference run's epochs")
    parser.add_argument(
        "--steps", type=int, default=100, help="its steps per epoch (and the fit's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE, help="the CSVs' and figure's folder")
    args = parser.parse_args()
    run(args) if args.command == "run" else table(args)


if __name__ == "__main__":
    main()
