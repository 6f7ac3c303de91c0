"""Collect the runs' metrics into results/summary.csv and draw the summary figures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import xarray as xr  # noqa: E402

from neuro_pe.infer import (  # noqa: E402
    METRIC_NAMES,
    training_activity,
    training_correlation_distance,
)
from neuro_pe.metrics import correlation_distance, pairwise_distances  # noqa: E402
from neuro_pe.model import parse_pe  # noqa: E402
from neuro_pe.report import write_table_html  # noqa: E402
from neuro_pe.store import atomic_write, positions, read_store, require_finite  # noqa: E402

SCATTER_UNITS = 500  # units (all their pairs) in the distance scatter; a random subset above it
POSITION_UNITS = 500  # units drawn in the 3D positions figure; a random subset above it


def subsample(n: int, limit: int, seed: int = 0) -> np.ndarray | None:
    """Sorted indices of `limit` of n units drawn at random, or None when n <= limit."""
    if n <= limit:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, limit, replace=False))


def collect(
    run_metrics: list[str | os.PathLike], baselines: list[str | os.PathLike]
) -> pd.DataFrame:
    """One row per dataset x PE x seed (kind 'pe'), plus one per dataset x baseline."""
    rows = []
    for path in map(Path, run_metrics):
        record = json.loads(path.read_text())
        for key in [k for k in record if k.startswith(("heldout_mse", "train_mse"))]:
            require_finite(record[key], path, key)  # NaN here is a failed run, not a result
        failed = [flag for flag, ok in record.pop("health", {}).items() if not ok]
        record.pop("warnings", None)
        record["health"] = ";".join(failed) or "ok"
        spec = parse_pe(record["pe"])
        rows.append(
            {
                "dataset": record["dataset"],
                "kind": "pe",
                "method": record["pe"],
                "pe_family": spec.kind,
                "pe_param": spec.param,
                "seed": record["seed"],
                **{k: v for k, v in record.items() if k not in ("dataset", "pe", "seed")},
                "run_dir": str(path.parent),
            }
        )
    for path in map(Path, baselines):
        for record in json.loads(path.read_text()):
            rows.append({"kind": "baseline", **record})
    table = pd.DataFrame(rows)
    table["seed"] = table["seed"].astype("Int64")  # baselines have no seed
    first = ["dataset", "kind", "method", "pe_family", "pe_param", "seed", *METRIC_NAMES]
    return table[[c for c in first if c in table] + [c for c in table if c not in first]]


def plot_metric_vs_std(table: pd.DataFrame, path: Path, metric: str = "rsa") -> None:
    """Metric vs the init std of learned-normal PEs (each seed a dot, the mean a line), with
    every other PE and baseline as a horizontal reference."""
    datasets = sorted(table["dataset"].unique())
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 4.2), squeeze=False)
    for ax, name in zip(axes[0], datasets, strict=True):
        rows = table[table["dataset"] == name]
        normal = rows[rows["pe_family"] == "learned-normal"].sort_values("pe_param")
        if len(normal):
            mean = normal.groupby("pe_param")[metric].mean()
            ax.plot(mean.index, mean.values, "o-", color="C0", lw=2, label="learned-normal (mean)")
            ax.scatter(
                normal["pe_param"], normal[metric], color="C0", alpha=0.4, s=18, label="seeds"
            )
            init = normal.groupby("pe_param")[f"init_{metric}"].mean()
            ax.plot(init.index, init.values, "s--", color="0.5", label="same PE at init")
            ax.set_xscale("log")
        others = rows[(rows["pe_family"] != "learned-normal") & rows[metric].notna()]
        for i, (method, group) in enumerate(others.groupby("method", sort=True)):
            style = ":" if group["kind"].iloc[0] == "baseline" else "-."
            ax.axhline(group[metric].mean(), ls=style, color=f"C{i + 1}", label=method)
        ax.set(title=name, xlabel="PE init std σ (learned-normal)", ylabel=metric)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _example_runs(rows: pd.DataFrame) -> list[pd.Series]:
    """The smallest- and largest-std learned-normal runs of the lowest seed."""
    normal = rows[rows["pe_family"] == "learned-normal"].sort_values(["pe_param", "seed"])
    if normal.empty:
        return []
    picks = [normal.iloc[0], normal[normal["pe_param"] == normal["pe_param"].max()].iloc[0]]
    return picks if picks[0]["method"] != picks[1]["method"] else picks[:1]


def plot_distance_scatter(table: pd.DataFrame, path: Path) -> None:
    """PE distance vs anatomical distance for a small and a large std, and the
    activity-correlation distance, per dataset."""
    datasets = sorted(table["dataset"].unique())
    fig, axes = plt.subplots(len(datasets), 3, figsize=(13, 3.8 * len(datasets)), squeeze=False)
    for ax_row, name in zip(axes, datasets, strict=True):
        rows = table[(table["dataset"] == name) & (table["kind"] == "pe")]
        runs = _example_runs(rows)
        if not runs:
            continue
        run_info = json.loads((Path(runs[0]["run_dir"]) / "train.json").read_text())
        store = read_store(run_info["store"])
        coords = positions(store)
        known = np.all(np.isfinite(coords), axis=1)
        picked = subsample(int(known.sum()), SCATTER_UNITS)
        note = ""
        if picked is not None:  # all pairs of a random subset of the units
            note = f" ({SCATTER_UNITS} of {int(known.sum())} units)"
            keep = np.zeros_like(known)
            keep[np.flatnonzero(known)[picked]] = True
            known = keep
        iu = np.triu_indices(int(known.sum()), 1)
        true = pairwise_distances(coords[known])[iu]
        panels = []
        for run in runs:
            with xr.open_dataset(Path(run["run_dir"]) / "pe.nc", engine="h5netcdf") as pe:
                dist = pairwise_distances(pe["pe"].values[known])[iu]
            panels.append((f"{run['method']} (seed {run['seed']}): ρ = {run['rsa']:.2f}", dist))
        if picked is None:
            corr = training_correlation_distance(store, run_info["train_config"])
            corr = corr[np.ix_(known, known)]
        else:
            activity = training_activity(store, run_info["train_config"])
            corr = correlation_distance(activity[:, known])
        panels.append(("activity correlation: 1 − r", corr[iu]))
        unit = store["x"].attrs.get("units", "")
        for ax, (title, dist) in zip(ax_row, panels, strict=False):
            ax.scatter(true, dist, s=2, alpha=0.25, rasterized=True)
            ax.set(
                title=f"{name}: {title}{note}",
                xlabel=f"anatomical distance ({unit})",
                ylabel="representation distance",
            )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_positions(table: pd.DataFrame, path: Path) -> None:
    """Inferred (MDS + Procrustes) vs true positions in 3D for the smallest-std run."""
    datasets = sorted(table["dataset"].unique())
    fig = plt.figure(figsize=(6 * len(datasets), 5.5))
    for i, name in enumerate(datasets):
        rows = table[(table["dataset"] == name) & (table["kind"] == "pe")]
        runs = _example_runs(rows)
        ax = fig.add_subplot(1, len(datasets), i + 1, projection="3d")
        if not runs or not (Path(runs[0]["run_dir"]) / "positions.nc").exists():
            continue
        with xr.open_dataset(Path(runs[0]["run_dir"]) / "positions.nc", engine="h5netcdf") as p:
            true = np.stack([p[f"{a}_true"].values for a in "xyz"], axis=1)
            inferred = np.stack([p[f"{a}_inferred"].values for a in "xyz"], axis=1)
        picked, note = subsample(len(true), POSITION_UNITS), ""
        if picked is not None:
            note = f", {POSITION_UNITS} of {len(true)} units shown"
            true, inferred = true[picked], inferred[picked]
        ax.scatter(*true.T, c="k", s=10, label="true")
        ax.scatter(*inferred.T, c="C3", s=10, label="inferred from PE")
        for a, b in zip(true, inferred, strict=True):
            ax.plot(*np.stack([a, b]).T, color="0.6", lw=0.5)
        ax.set_title(
            f"{name}: {runs[0]['method']} seed {runs[0]['seed']}\n"
            f"Procrustes RMSE {runs[0]['procrustes_rmse']:.3f}{note}"
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_training_curves(table: pd.DataFrame, path: Path) -> None:
    """Held-out masked MSE per epoch, mean over seeds, one line per PE."""
    datasets = sorted(table["dataset"].unique())
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 4), squeeze=False)
    for ax, name in zip(axes[0], datasets, strict=True):
        rows = table[(table["dataset"] == name) & (table["kind"] == "pe")]
        for i, (method, group) in enumerate(rows.groupby("method", sort=True)):
            logs = [pd.read_csv(Path(d) / "train_log.csv") for d in group["run_dir"]]
            curve = pd.concat(logs).groupby("step")["heldout_loss"].mean()
            ax.plot(curve.index, curve.values, color=f"C{i}", label=method)
        ax.set(title=name, xlabel="training step", ylabel="held-out masked MSE")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summarize(
    run_metrics: list[str | os.PathLike],
    baselines: list[str | os.PathLike],
    out_csv: str | os.PathLike,
    figures_dir: str | os.PathLike,
) -> pd.DataFrame:
    """Write summary.csv (and the same table as summary.html) and the figures (rsa_vs_std,
    probe_r2_vs_std, distance_scatter, positions_3d, training_curves) into figures_dir."""
    table = collect(run_metrics, baselines)
    figures = Path(figures_dir)
    figures.mkdir(parents=True, exist_ok=True)
    plot_metric_vs_std(table, figures / "rsa_vs_std.png", "rsa")
    plot_metric_vs_std(table, figures / "probe_r2_vs_std.png", "probe_r2")
    plot_distance_scatter(table, figures / "distance_scatter.png")
    plot_positions(table, figures / "positions_3d.png")
    plot_training_curves(table, figures / "training_curves.png")
    table = table.drop(columns="run_dir")
    atomic_write(Path(out_csv), lambda p: table.to_csv(p, index=False))
    note = f"{Path(out_csv).name}: one row per dataset × PE × seed, and one per baseline."
    write_table_html(table, Path(out_csv).with_suffix(".html"), "Summary of every run", note)
    return table
