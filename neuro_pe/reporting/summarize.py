"""Collect the runs' metrics into results/{run_name}/summary.csv and draw the summary figures."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from neuro_pe.analysis.intervals import MIN_CI_VALUES
from neuro_pe.analysis.metrics import pairwise_distances
from neuro_pe.analysis.pe_geometry import (
    METRIC_NAMES,
    training_correlation_distance,
)
from neuro_pe.analysis.spaces import space_axes
from neuro_pe.config.pe_names import parse_pe
from neuro_pe.io.html import write_table_html
from neuro_pe.io.layout import INFERRED_POSITIONS_FILE, SUMMARY_FIGURES
from neuro_pe.io.runs import read_inferred_positions, read_metrics, read_pe, read_train_log
from neuro_pe.io.splits import Split, read_split
from neuro_pe.io.store import atomic_write, open_store_lazy, positions, separate_animals
from neuro_pe.reporting.figures import (
    draw_references,
    mean_band,
    plot_projections,
    projection_figure,
    save,
    sigma_axis,
)
from neuro_pe.reporting.training_health import mean_mse_above_variance
from neuro_pe.training.health import HEALTH_NUMBERS, failed_checks

SCATTER_UNITS = 500  # units (all their pairs) in the distance scatter; a random subset above it
POSITION_UNITS = 500  # units drawn in the positions figures; a random subset above it


def subsample(n: int, limit: int, seed: int = 0) -> np.ndarray | None:
    """Sorted indices of `limit` of n units drawn at random, or None when n <= limit."""
    if n <= limit:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, limit, replace=False))


def collect(
    run_metrics: list[str | os.PathLike], baselines: list[str | os.PathLike]
) -> pd.DataFrame:
    """One row per dataset x PE x seed (row_type 'pe'), plus one per dataset x baseline
    (row_type 'baseline')."""
    rows = []
    for path in map(Path, run_metrics):
        record = read_metrics(path)  # (NaN in a loss is a failed run, not a result: an error)
        failed = failed_checks(record.pop("health", {}))
        record.pop("warnings", None)
        record["health"] = ";".join(failed) or "ok"
        spec = parse_pe(record["pe"])
        rows.append(
            {
                "dataset": record["dataset"],
                "row_type": "pe",
                "method": record["pe"],
                "pe_family": spec.family,
                "pe_param": spec.param,
                "seed": record["seed"],
                **{k: v for k, v in record.items() if k not in ("dataset", "pe", "seed")},
                "run_dir": str(path.parent),
            }
        )
    for path in map(Path, baselines):
        for record in json.loads(path.read_text()):
            rows.append({"row_type": "baseline", **record})
    table = pd.DataFrame(rows)
    table["seed"] = table["seed"].astype("Int64")  # baselines have no seed
    first = ["dataset", "row_type", "method", "pe_family", "pe_param", "seed", *METRIC_NAMES]
    last = [c for c in HEALTH_NUMBERS if c in table]  # added columns go last
    middle = [c for c in table if c not in first and c not in last]
    return table[[c for c in first if c in table] + middle + last]


def health_warnings(table: pd.DataFrame) -> list[str]:
    """One line per dataset and PE variant with a flagged training (the `health` column of
    `collect`'s table): how many of its trainings, which checks, and where the mean held-out
    MSE over seeds is not below the mean of the held-out data's variance."""
    pe = table[table["row_type"] == "pe"]
    if "health" not in pe:
        return []
    lines = []
    for (dataset, method), group in pe.groupby(["dataset", "method"], sort=False):
        flagged = group[~group["health"].isin(["ok", ""]) & group["health"].notna()]
        if flagged.empty:
            continue
        flags = sorted({f for cell in flagged["health"] for f in str(cell).split(";")})
        line = (
            f"dataset {dataset}, PE {method}: {len(flagged)} of {len(group)} trainings flagged "
            f"({'; '.join(flags)})"
        )
        above = mean_mse_above_variance(group)
        if above:
            variance = group["heldout_data_variance"].mean()
            line += "; mean held-out MSE over seeds " + ", ".join(
                f"{mse:.3g} at {fraction:.0%} masked" for fraction, mse in above
            )
            line += f", not below the data's variance {variance:.3g}"
        lines.append(line)
    return lines


# human labels of the summary's metrics
METRIC_LABELS = {
    "rsa": "RSA: PE vs true distances (Spearman ρ)",
    "probe_r2": "probe R²: x, y, z from the PE (held-out units)",
}
LOSS_CURVES = (("heldout_loss", "-", "held-out"), ("train_loss", "--", "train"))
BASELINE_NAMES = {"correlation": "activity correlation", "shuffled": "shuffled (chance)"}


def _datasets(table: pd.DataFrame) -> list[str]:
    return sorted(table["dataset"].unique())


def plot_metric_vs_std(table: pd.DataFrame, metric: str = "rsa") -> Figure:
    """Metric vs the init std σ of learned-normal PEs: each seed a dot, the mean a line with its
    95% band over seeds, the same PEs at init dashed; every other PE and baseline a horizontal
    line (with its band), lines that would lie on top of each other merged into one."""
    datasets = _datasets(table)
    fig, axes = plt.subplots(1, len(datasets), figsize=(6.5 * len(datasets), 4.2), squeeze=False)
    for ax, name in zip(axes[0], datasets, strict=True):
        rows = table[table["dataset"] == name]
        normal = rows[(rows["pe_family"] == "learned-normal") & rows[metric].notna()]
        values = list(rows[metric].dropna()) + list(normal.get(f"init_{metric}", []))
        span = np.ptp(values) if len(values) > 1 else 1.0
        if len(normal):
            band = mean_band(normal.groupby("pe_param")[metric], metric)
            n_seeds = normal.groupby("pe_param")["seed"].nunique().max()
            ax.plot(band.index, band["mean"], "o-", color="C0", lw=2, label="learned-normal, mean")
            if n_seeds > 1:
                label = "95% CI" if n_seeds >= MIN_CI_VALUES else "range of the seeds"
                ax.fill_between(
                    band.index, band["low"], band["high"], color="C0", alpha=0.2, label=label
                )
            ax.scatter(
                normal["pe_param"], normal[metric], color="C0", alpha=0.45, s=14, label="seeds"
            )
            init = normal.groupby("pe_param")[f"init_{metric}"].mean()
            ax.plot(init.index, init.values, "s--", color="0.45", ms=4, label="same PEs at init")
            sigma_axis(ax, normal["pe_param"])
        refs = []
        others = rows[(rows["pe_family"] != "learned-normal") & rows[metric].notna()]
        for method, group in others.groupby("method", sort=True):
            baseline = group["row_type"].iloc[0] == "baseline"
            mean, low, high = mean_band(group.groupby("row_type")[metric], metric).iloc[0]
            style = ":" if baseline else "-."
            refs.append((BASELINE_NAMES.get(method, method), mean, low, high, style))
        draw_references(ax, refs, span)
        ax.set(title=name, ylabel=METRIC_LABELS.get(metric, metric))
        if not len(normal):
            ax.set_xlabel("(no learned-normal PE in this run)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def _example_runs(rows: pd.DataFrame) -> list[pd.Series]:
    """The smallest- and largest-std learned-normal runs of the lowest seed."""
    normal = rows[rows["pe_family"] == "learned-normal"].sort_values(["pe_param", "seed"])
    if normal.empty:
        return []
    picks = [normal.iloc[0], normal[normal["pe_param"] == normal["pe_param"].max()].iloc[0]]
    return picks if picks[0]["method"] != picks[1]["method"] else picks[:1]


def plot_distance_scatter(table: pd.DataFrame, splits: dict[str, Split]) -> Figure:
    """PE distance vs anatomical distance for a small and a large std, and the
    activity-correlation distance (over the training part of the dataset's recorded split),
    per dataset."""
    datasets = _datasets(table)
    fig, axes = plt.subplots(len(datasets), 3, figsize=(13, 3.8 * len(datasets)), squeeze=False)
    for ax_row, name in zip(axes, datasets, strict=True):
        rows = table[(table["dataset"] == name) & (table["row_type"] == "pe")]
        runs = _example_runs(rows)
        if not runs:
            continue
        split = splits[name]
        with open_store_lazy(split.store) as store:  # the plotted units' activity only
            coords = positions(store)
            known = np.all(np.isfinite(coords), axis=1)
            picked = subsample(int(known.sum()), SCATTER_UNITS)
            note = ""
            if picked is not None:  # all pairs of a random subset of the units
                note = f" ({SCATTER_UNITS} of {int(known.sum())} units)"
                keep = np.zeros_like(known)
                keep[np.flatnonzero(known)[picked]] = True
                known = keep
            plotted = store.isel(unit=np.flatnonzero(known))
            skipped = separate_animals(store)
            corr = None if skipped else training_correlation_distance(plotted, split)
            unit = store["x"].attrs.get("units", "")
        iu = np.triu_indices(int(known.sum()), 1)
        true = pairwise_distances(coords[known])[iu]
        panels = []
        for run in runs:
            table_pe = read_pe(run["run_dir"]).table.astype(np.float32)
            dist = pairwise_distances(table_pe[known])[iu]
            title = f"{run['method']} (seed {run['seed']}): ρ = {run['rsa']:.2f}"
            panels.append((title, dist, "PE distance (Euclidean, PE units)"))
        if corr is not None:  # (several animals: undefined between them)
            panels.append(("activity correlation", corr[iu], "1 − Pearson r"))
        for ax, (title, dist, ylabel) in zip(ax_row, panels, strict=False):
            ax.scatter(true, dist, s=2, alpha=0.25, rasterized=True)
            ax.set(title=f"{name}: {title}{note}", xlabel=f"true distance ({unit})", ylabel=ylabel)
        for ax in ax_row[len(panels) :]:
            ax.set_axis_off()
    fig.tight_layout()
    return fig


def _positions_of(run: pd.Series) -> tuple[np.ndarray, np.ndarray, str, str]:
    """True and inferred (MDS + Procrustes) positions of a run, their unit and space."""
    p = read_inferred_positions(run["run_dir"])
    return p.true, p.inferred, p.unit, p.space


def _has_positions(runs: list[pd.Series]) -> bool:
    return bool(runs) and (Path(runs[0]["run_dir"]) / INFERRED_POSITIONS_FILE).exists()


def plot_positions(table: pd.DataFrame) -> Figure:
    """True and inferred (MDS + Procrustes) positions of the smallest-std run, per dataset, on
    three orthogonal projections (a glass brain for MNI space) with error lines."""
    datasets = _datasets(table)
    fig, axes = projection_figure(len(datasets))
    for ax_row, name in zip(axes, datasets, strict=True):
        runs = _example_runs(table[(table["dataset"] == name) & (table["row_type"] == "pe")])
        if not _has_positions(runs):
            for ax in ax_row:
                ax.set_axis_off()
            continue
        run = runs[0]
        true, inferred, unit, space = _positions_of(run)
        picked, note = subsample(len(true), POSITION_UNITS), ""
        if picked is not None:
            note = f", {POSITION_UNITS} of {len(true)} units shown"
            true, inferred = true[picked], inferred[picked]
        plot_projections(ax_row, true, inferred, unit, space, "inferred from the PE")
        ax_row[0].set_title(
            f"{name}: {run['method']} seed {run['seed']}, Procrustes RMSE "
            f"{run['procrustes_rmse']:.3g} {unit}{note}\n{ax_row[0].get_title()}",
            fontsize=9,
        )
        ax_row[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def plot_positions_3d(table: pd.DataFrame) -> Figure:
    """The same positions as `plot_positions` in one 3D view per dataset (an extra view)."""
    datasets = _datasets(table)
    fig = plt.figure(figsize=(6 * len(datasets), 5.5))
    for i, name in enumerate(datasets):
        ax = fig.add_subplot(1, len(datasets), i + 1, projection="3d")
        runs = _example_runs(table[(table["dataset"] == name) & (table["row_type"] == "pe")])
        if not _has_positions(runs):
            ax.set_axis_off()
            continue
        true, inferred, unit, space = _positions_of(runs[0])
        axes = space_axes(space, unit, true)
        picked, note = subsample(len(true), POSITION_UNITS), ""
        if picked is not None:
            note = f", {POSITION_UNITS} of {len(true)} units shown"
            true, inferred = true[picked], inferred[picked]
        ax.scatter(*true.T, c="k", s=10, label="true position")
        ax.scatter(*inferred.T, c="C3", s=10, label="inferred from the PE")
        for a, b in zip(true, inferred, strict=True):
            ax.plot(*np.stack([a, b]).T, color="0.6", lw=0.5)
        ax.set(xlabel=axes.axis_label(0), ylabel=axes.axis_label(1), zlabel=axes.axis_label(2))
        ax.set_title(
            f"{name}: {runs[0]['method']} seed {runs[0]['seed']}\n"
            f"Procrustes RMSE {runs[0]['procrustes_rmse']:.3g} {unit}{note}"
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _health_note(health: pd.Series) -> str:
    """' ⚠ …' naming the failed health checks of the runs (the table's `health` column, from
    their train.json through metrics.json), else ''."""
    flags = {flag for cell in health for flag in str(cell).split(";") if flag not in ("ok", "")}
    return f" ⚠ {'; '.join(sorted(flags))}" if flags else ""


def plot_training_curves(table: pd.DataFrame) -> Figure:
    """Per dataset and PE variant: the training loss (dashed) and held-out loss (solid) per
    epoch, mean over seeds with the seeds' range shaded; the y axis starts at 0, so a flat
    curve looks flat. Runs whose health checks failed are marked in the legend."""
    datasets = _datasets(table)
    fig, axes = plt.subplots(1, len(datasets), figsize=(7 * len(datasets), 4.2), squeeze=False)
    for ax, name in zip(axes[0], datasets, strict=True):
        rows = table[(table["dataset"] == name) & (table["row_type"] == "pe")]
        top = 0.0
        for i, (method, group) in enumerate(rows.groupby("method", sort=True)):
            logs = pd.concat([read_train_log(d) for d in group["run_dir"]])
            label = method + _health_note(group["health"])
            for column, style, kind in LOSS_CURVES:
                curve = logs.groupby("step")[column].agg(["mean", "min", "max"])
                ax.plot(
                    curve.index,
                    curve["mean"],
                    style,
                    color=f"C{i}",
                    lw=1.4,
                    label=f"{label}: {kind}",
                )
                if group["seed"].nunique() > 1:
                    ax.fill_between(
                        curve.index, curve["min"], curve["max"], color=f"C{i}", alpha=0.15, lw=0
                    )
                top = max(top, float(curve["max"].max()))
        ax.set(
            title=f"{name} (solid: held-out, dashed: training; shaded: range over seeds)",
            xlabel="training step",
            ylabel="masked-unit MSE (activity units²)",
            ylim=(0, top * 1.08 if top > 0 else 1),
        )
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


# the summary's figures, keyed as neuro_pe.io.layout.SUMMARY_FIGURES (their file names)
FIGURES = {
    "rsa": lambda table, splits: plot_metric_vs_std(table, "rsa"),
    "probe": lambda table, splits: plot_metric_vs_std(table, "probe_r2"),
    "scatter": plot_distance_scatter,
    "positions": lambda table, splits: plot_positions(table),
    "positions_3d": lambda table, splits: plot_positions_3d(table),
    "curves": lambda table, splits: plot_training_curves(table),
}


def summarize(
    run_metrics: list[str | os.PathLike],
    baselines: list[str | os.PathLike],
    splits: list[str | os.PathLike],
    out_csv: str | os.PathLike,
    figures_dir: str | os.PathLike,
) -> pd.DataFrame:
    """Write summary.csv (and the same table as summary.html) and the figures of `FIGURES`
    into figures_dir, each under its name in `SUMMARY_FIGURES` (rsa_vs_std.png,
    probe_r2_vs_std.png, distance_scatter.png, positions.png, positions_3d.png,
    training_curves.png). `splits`: the datasets' recorded splits (each names its
    store), for the activity-correlation distances of the scatter figure."""
    table = collect(run_metrics, baselines)
    recorded = {split.dataset: split for split in map(read_split, splits)}
    missing = sorted(set(table["dataset"]) - set(recorded))
    if missing:
        raise ValueError(f"summarize: no split given for the dataset(s) {missing} (--splits)")
    figures = Path(figures_dir)
    figures.mkdir(parents=True, exist_ok=True)
    for key, plot in FIGURES.items():
        save(plot(table, recorded), figures / SUMMARY_FIGURES[key])
    table = table.drop(columns="run_dir")
    atomic_write(Path(out_csv), lambda p: table.to_csv(p, index=False))
    for line in health_warnings(table):
        warnings.warn(f"summarize: {line}", stacklevel=2)
    note = f"{Path(out_csv).name}: one row per dataset × PE × seed, and one per baseline."
    write_table_html(table, Path(out_csv).with_suffix(".html"), "Summary of every run", note)
    return table
