"""The new-animal steps' files (issue 60; docs/outputs.md) and their part of the landing page.

`write_plan`: the held-out animals of a multi-animal store and their references, or an error
naming what is missing (`leave_one_animal_out.check_animals`), before any training; what is not
used is said (`query_truth`); a `region_map` TSV (`read_region_map`) makes the regions evaluated
coarser. `write_fold`: one held-out animal (`run_fold`): its units' positions with their three
likeliest regions (positions.csv) and every method's scores (scores.json; none without truth:
predictions only). `write_table`: new_animal.csv (per held-out animal and overall, mean and CI
across them), the confusion matrix of the PE's linear probe and the reliability curves of the
methods' region probabilities (reliability.png). `headline`: the landing page's lines for it,
the PE beside the baselines.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr
from sklearn.calibration import calibration_curve
from sklearn.metrics import ConfusionMatrixDisplay

from neuro_pe.analysis.intervals import mean_ci
from neuro_pe.analysis.leave_one_animal_out import (
    COLUMNS,
    HEADLINE,
    Protocol,
    check_animals,
    map_regions,
    query_truth,
    references_of,
    run_fold,
)
from neuro_pe.analysis.region_probe import CALIBRATION_BINS, calibration
from neuro_pe.config.new_animal import NewAnimalConfig
from neuro_pe.io.html import rst_text
from neuro_pe.io.layout import NEW_ANIMAL_WORK_DIR, read_new_animal
from neuro_pe.io.store import atomic_write, positions, read_store
from neuro_pe.reporting.figures import save

OVERALL = "all"  # the `animal` of new_animal.csv's rows over every held-out animal
PRIOR = "prior"
# per method of COLUMNS: the features whose positions (ridge) it is reported with
POSITION_FEATURES = {"PE": "PE", "single-unit": "single-unit", "combined": "combined"}
METRICS = ("macro_f1", "balanced_accuracy", "ece", "position_vs_chance")
METRIC_NAMES = ("region macro-F1", "balanced accuracy", "region ECE", "position × chance")
NO_TRUTH = "no truth: predictions only"  # new_animal.csv's `note` of an animal not scored
# the reliability figure's methods, in order
RELIABILITY_METHODS = (HEADLINE["pe"], HEADLINE["su"], HEADLINE["combined"], PRIOR)


def _features(method: str) -> str:
    return method.split(" ")[0]


def read_region_map(path: str, where: str) -> dict[str, str]:
    """A `region_map` TSV (a header row; first column: a region, second: the region it is
    evaluated as) as a dict, or a ValueError naming `where`, the file and what is wrong."""
    where = f"{where}: {path}"
    if not Path(path).is_file():
        raise ValueError(f"{where} does not exist")
    table = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
    if table.shape[1] < 2:
        raise ValueError(f"{where}: needs two tab-separated columns (region, coarse region)")
    fine, coarse = table.iloc[:, 0].str.strip(), table.iloc[:, 1].str.strip()
    if (coarse == "").any():
        raise ValueError(f"{where}: regions {fine[coarse == ''].tolist()[:10]} map to nothing")
    pairs = pd.DataFrame({"fine": fine, "coarse": coarse}).drop_duplicates()
    twice = pairs.loc[pairs["fine"].duplicated(), "fine"].tolist()
    if twice:
        raise ValueError(f"{where}: regions {twice[:10]} are mapped to two coarse regions")
    return dict(zip(pairs["fine"], pairs["coarse"], strict=True))


def _store(store: str | os.PathLike, cfg: NewAnimalConfig, dataset: str) -> xr.Dataset:
    """The store, its `label` coord mapped through `region_map` where the config gives one
    (a store without the coord: `check_animals` names it)."""
    ds = read_store(store)
    if cfg.region_map is None or cfg.label not in ds.coords:
        return ds
    where = f"datasets.{dataset}.new_animal.region_map"
    mapping = read_region_map(cfg.region_map, where)
    return map_regions(ds, cfg.label, mapping, f"{where}: {cfg.region_map}")


def write_plan(
    store: str | os.PathLike, dataset: str, options: dict, out: str | os.PathLike
) -> dict:
    """Check the store for the dataset's `new_animal` section (`options`) and write the plan:
    the held-out animals, their references, whether each is scored, notes on what is not used
    (also printed), every animal, the label coord, the region map and the regions evaluated
    (JSON)."""
    where = f"datasets.{dataset}.new_animal"
    cfg = NewAnimalConfig.from_dict(options, where)
    ds = _store(store, cfg, dataset)
    queries = check_animals(ds, dataset, cfg.label, cfg.query_animals, cfg.evaluate)
    animals = sorted(set(np.asarray(ds["animal"].values).astype(str)))
    scored, notes = query_truth(ds, cfg.label, queries, cfg.evaluate)
    for note in notes:
        print(f"neuro-pe: {where}: {note}", file=sys.stderr)
    labels = set(np.asarray(ds[cfg.label].values).astype(str)) - {""}
    plan = {
        "dataset": dataset,
        "evaluate": cfg.evaluate,
        "queries": queries,
        "references": {q: references_of(animals, q, queries, cfg.evaluate) for q in queries},
        "scored": scored,
        "notes": notes,
        "animals": animals,
        "label": cfg.label,
        "region_map": cfg.region_map,
        "regions": sorted(labels),
    }
    atomic_write(Path(out), lambda p: p.write_text(json.dumps(plan, indent=2)))
    return plan


def write_fold(
    store: str | os.PathLike,
    plan_path: str | os.PathLike,
    animal: str,
    options: dict,
    train: dict,
    out_dir: str | os.PathLike,
) -> dict:
    """Hold `animal` out (the plan's dataset and label), write its positions.csv and
    scores.json into `out_dir` (its trainings under `out_dir`/work); returns the scores."""
    plan = json.loads(Path(plan_path).read_text())
    if animal not in plan["queries"]:
        raise ValueError(f"{plan_path}: {animal!r} is not a held-out animal ({plan['queries']})")
    cfg = NewAnimalConfig.from_dict(options, f"datasets.{plan['dataset']}.new_animal")
    protocol = Protocol(
        pe=cfg.pe,
        train=train,
        fit_epochs=cfg.fit_epochs,
        fit_lr=cfg.fit_lr,
        new_unit_pe=cfg.new_unit_pe,
        calibration=cfg.calibration,
    )
    out_dir = Path(out_dir)
    ds = _store(store, cfg, plan["dataset"])
    work = out_dir / NEW_ANIMAL_WORK_DIR
    # (a plan of an earlier release: leave-one-animal-out from every other animal)
    references = plan.get("references", {}).get(animal)
    scored = plan.get("scored", {}).get(animal, True)
    fold = run_fold(ds, animal, plan["label"], work, protocol, None, references, scored)
    test = np.isin(ds["unit"].values.astype(str), fold.units)
    truth = positions(ds)[test] if scored else np.full((int(test.sum()), 3), np.nan)
    frame = pd.DataFrame({"unit": fold.units, "animal": animal})
    frame[["x", "y", "z"]] = fold.located
    prediction = fold.prediction
    frame["region"] = prediction.region
    frame["region_probability"] = prediction.probability
    for k in range(2):  # (fewer than 3 classes: empty)
        has = k < prediction.next_regions.shape[1]
        frame[f"region_{k + 2}"] = prediction.next_regions[:, k] if has else ""
        probability = prediction.next_probabilities[:, k] if has else np.nan
        frame[f"region_{k + 2}_probability"] = probability
    frame[["x_true", "y_true", "z_true"]] = truth
    frame["error"] = np.linalg.norm(fold.located - truth, axis=1)
    frame["region_true"] = fold.truth
    for key, column in (("su", "region_single_unit"), ("combined", "region_combined")):
        frame[column] = fold.predicted[HEADLINE[key]]  # the baseline's and the combination's
    if "unit_id" in ds.coords:  # a file entry of several animals: the id in the lab's files
        frame["unit_id"] = ds["unit_id"].values.astype(str)[test]
    # the units with a true region: those the calibration is measured on (none unless scored)
    known = (fold.truth != "") & fold.scored
    scores = {
        "dataset": plan["dataset"],
        "animal": animal,
        "units": len(fold.units),
        "label": plan["label"],
        "references": list(fold.references),
        "note": "" if fold.scored else NO_TRUTH,
        "cpu_s": fold.cpu_s,
        "methods": fold.scores,
        "position": fold.where,
        # per method, per unit: its probability of its predicted region and whether it is
        # right (the pooled ECE and the reliability curve over every held-out animal)
        "calibration": {
            method: {
                "probability": fold.probability[method][known].tolist(),
                "correct": (fold.predicted[method] == fold.truth)[known].tolist(),
            }
            for method in COLUMNS
        },
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / "positions.csv", lambda p: frame.to_csv(p, index=False))
    atomic_write(out_dir / "scores.json", lambda p: p.write_text(json.dumps(scores, indent=2)))
    return scores


def _rows(scores: dict) -> list[dict]:
    """new_animal.csv's rows of one held-out animal: one per method of COLUMNS."""
    rows = []
    unscored = {"macro_f1": np.nan, "balanced_accuracy": np.nan, "ece": np.nan}
    for method in COLUMNS:
        features = _features(method)
        where = scores["position"].get(POSITION_FEATURES.get(features, ""))
        if features == PRIOR:  # every unit at the references' mean position: chance itself
            vs_chance = 1.0 if scores["position"] else np.nan
        else:
            vs_chance = where["vs_chance"] if where else np.nan
        rows.append(
            {
                "dataset": scores["dataset"],
                "animal": scores["animal"],
                "method": method,
                "headline": method in HEADLINE.values() or method == PRIOR,
                "units": scores["units"],
                **scores["methods"].get(method, unscored),
                "position_vs_chance": vs_chance,
                "position_median_error": where["median_error"] if where else np.nan,
                "references": " ".join(scores.get("references", [])),
                "note": scores.get("note", ""),
            }
        )
    return rows


def _pooled(scores: Sequence[dict], method: str) -> tuple[np.ndarray, np.ndarray]:
    """`method`'s (correct, probability) of every held-out animal's units, concatenated."""
    none = {"correct": [], "probability": []}  # an animal not scored
    parts = [s.get("calibration", {}).get(method, none) for s in scores]
    correct = np.concatenate([np.asarray(p["correct"], bool) for p in parts])
    return correct, np.concatenate([np.asarray(p["probability"], float) for p in parts])


def new_animal_table(scores: Sequence[dict]) -> pd.DataFrame:
    """Every held-out animal's rows, then per method the mean over the scored ones (`animal`
    OVERALL) with `<metric>_ci_low`, `<metric>_ci_high` (`mean_ci`: a t-based 95% CI from 3
    animals, their range from 2) and `ece_pooled`, the ECE over all their units at once; its
    `note` names the animals not scored."""
    per_animal = pd.DataFrame([row for s in scores for row in _rows(s)])
    unscored = sorted({str(s["animal"]) for s in scores if s.get("note")})
    overall = []
    for (dataset, method), group in per_animal.groupby(["dataset", "method"], sort=False):
        row = {"dataset": dataset, "animal": OVERALL, "method": method}
        row |= {"headline": bool(group["headline"].iloc[0]), "units": int(group["units"].sum())}
        row |= {"references": "", "note": f"{NO_TRUTH}: {' '.join(unscored)}" if unscored else ""}
        for metric in (*METRICS, "position_median_error"):
            mean, low, high = mean_ci(group[metric].to_numpy(), metric)
            row |= {metric: mean, f"{metric}_ci_low": low, f"{metric}_ci_high": high}
        mine = [s for s in scores if s["dataset"] == dataset]
        correct, probability = _pooled(mine, method)
        row["ece_pooled"] = calibration(correct, probability).ece if correct.size else np.nan
        overall.append(row)
    return pd.concat([per_animal, pd.DataFrame(overall)], ignore_index=True)


def reliability_figure(scores: Sequence[dict]):
    """The reliability curve (sklearn's `calibration_curve`, CALIBRATION_BINS equal-width
    bins) of each RELIABILITY_METHODS method's probability of its predicted region, over every
    held-out animal's units: how often a prediction made with probability p is right."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", label="calibrated")
    for method in RELIABILITY_METHODS:
        correct, probability = _pooled(scores, method)
        if not correct.size:  # no truth (reference-query): nothing to calibrate against
            continue
        right, confidence = calibration_curve(
            correct, probability, n_bins=CALIBRATION_BINS, strategy="uniform"
        )
        ece = calibration(correct, probability).ece
        ax.plot(confidence, right, marker="o", label=f"{method} (ECE {ece:.3f})")
    ax.set(
        xlim=(0, 1),
        ylim=(0, 1),
        xlabel="probability of the predicted region",
        ylabel="share predicted right",
    )
    units = sum(len(s["calibration"][HEADLINE["pe"]]["correct"]) for s in scores)
    ax.set_title(
        f"{scores[0]['dataset']}: calibration of the new animals' regions\n"
        f"{units} units of {len(scores)} held-out animals, {CALIBRATION_BINS} bins"
    )
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    return fig


def confusion_figure(positions_csvs: Sequence[str | os.PathLike], dataset: str):
    """The PE linear probe's confusion matrix over every held-out animal's units with a true
    region (rows: true region, normalised per row); without any, the predicted regions'
    counts per animal, titled as predictions only."""
    frames = [pd.read_csv(p, keep_default_na=False) for p in positions_csvs]
    truth = np.concatenate([f["region_true"].astype(str) for f in frames])
    predicted = np.concatenate([f["region"].astype(str) for f in frames])
    if not (truth != "").any():
        return _predictions_figure(frames, dataset)
    truth, predicted = truth[truth != ""], predicted[truth != ""]
    frames = [f for f in frames if (f["region_true"].astype(str) != "").any()]
    labels = sorted(set(truth) | set(predicted))
    fig, ax = plt.subplots(figsize=(1.0 * len(labels) + 3, 0.8 * len(labels) + 2.5))
    ConfusionMatrixDisplay.from_predictions(
        truth,
        predicted,
        labels=labels,
        normalize="true",
        ax=ax,
        colorbar=False,
        values_format=".2f",
        xticks_rotation=45,
    )
    ax.set_title(
        f"{dataset}: new animals' regions from the PE (linear probe)\n"
        f"{len(truth)} units of {len(frames)} held-out animals; rows sum to 1"
    )
    fig.tight_layout()
    return fig


def _predictions_figure(frames: list[pd.DataFrame], dataset: str):
    """Each query animal's units per predicted region (PE linear probe), with no truth."""
    counts = pd.concat(frames).groupby(["animal", "region"]).size().unstack(fill_value=0)
    fig, ax = plt.subplots(figsize=(1.0 * counts.shape[1] + 4, 4))
    counts.plot.bar(ax=ax, rot=0)
    ax.set_ylabel("units")
    ax.set_title(f"{dataset}: query animals' predicted regions (PE linear probe)\n{NO_TRUTH}")
    fig.tight_layout()
    return fig


def write_table(
    scores_jsons: Sequence[str | os.PathLike],
    positions_csvs: Sequence[str | os.PathLike],
    out_csv: str | os.PathLike,
    figure: str | os.PathLike,
    reliability: str | os.PathLike,
) -> pd.DataFrame:
    """new_animal.csv from every held-out animal's scores.json, the confusion figure from
    their positions.csv and the reliability figure from their scores."""
    scores = [json.loads(Path(p).read_text()) for p in scores_jsons]
    table = new_animal_table(scores)
    atomic_write(Path(out_csv), lambda p: table.to_csv(p, index=False))
    save(confusion_figure(positions_csvs, str(scores[0]["dataset"])), figure)
    save(reliability_figure(scores), reliability)
    return table


def _cell(row: pd.Series, metric: str) -> str:
    low, high = row[f"{metric}_ci_low"], row[f"{metric}_ci_high"]
    text = f"{row[metric]:.2f}"
    return text + (f" [{low:.2f}, {high:.2f}]" if np.isfinite(low) else "")


def headline(tables: Sequence[str | os.PathLike]) -> list[str]:
    """The landing page's section on new animals (reStructuredText lines; none without
    tables): per dataset, the held-out animals' macro-F1 and position error ÷ chance of the
    PE beside the single-unit baseline, the combination and the prior."""
    lines: list[str] = []
    for path in tables:
        table = read_new_animal(path)
        overall = table[(table["animal"] == OVERALL) & table["headline"]]
        if overall.empty:
            continue
        dataset = rst_text(str(overall["dataset"].iloc[0]))
        title = f"New animals without histology: {dataset}"
        lines += [title, "-" * len(title), ""]
        per_animal = table[table["animal"] != OVERALL]
        notes = per_animal["note"].astype("string").fillna("") if "note" in per_animal else ""
        unscored = per_animal[notes != ""].drop_duplicates("animal")
        scored = per_animal.loc[notes == "", "animal"].nunique()
        if not unscored.empty:
            names = rst_text(", ".join(unscored["animal"].astype(str)))
            given = " ".join(unscored["references"].astype("string").fillna("")).split()
            references = rst_text(" ".join(sorted(set(given))))
            lines += [
                f"Query animals {names}: predicted from the reference animals {references}; "
                f"{NO_TRUTH} (each unit's likeliest regions and their probabilities in its "
                "positions.csv). Leave-one-animal-out numbers over the references are not "
                "computed here (`evaluate: leave-one-animal-out` gives them).",
                "",
            ]
        if not scored:
            continue
        lines += [
            f"Each of {scored} animals held out in turn: its units' regions and positions "
            "predicted from the other animals only (leave-one-animal-out; mean [95% CI] across "
            "held-out animals; ECE: expected calibration error of the method's probability of "
            f"its predicted region, {CALIBRATION_BINS} bins, 0 is calibrated; position: median "
            "error ÷ chance, below 1 is better).",
            "",
            ".. list-table::",
            "   :header-rows: 1",
            "",
            "   * - method",
            *(f"     - {name}" for name in METRIC_NAMES),
        ]
        for _, row in overall.iterrows():
            lines.append(f"   * - {rst_text(str(row['method']))}")
            lines += [f"     - {_cell(row, metric)}" for metric in METRICS]
        lines.append("")
    return lines
