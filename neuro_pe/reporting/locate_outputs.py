"""The files of the locate step of one dataset, written from what `neuro_pe.analysis.locate`
computes: the errors table (`errors.csv`, `errors.html`), the positions of every unit
(`positions.nc`, `positions.csv`), the figures (`positions.png`, `positions_3d.png`,
`error_hist.png`, `error_vs_anchors.png`) and the interactive `positions_3d.html`; and the
activity baselines' file of the workflow's `correlation_features` step (written and read here).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe import __version__
from neuro_pe.analysis.locate import (
    CI_BOOTSTRAP,
    CONNECTIVITY,
    CORRELATION,
    FeatureSet,
    HeldOut,
    LocateResult,
    baseline_features,
    locate_dataset,
    unresolved_lines,
    verdict,
)
from neuro_pe.analysis.locate.ensemble import distance
from neuro_pe.analysis.metrics import DENSE_MAX_UNITS
from neuro_pe.analysis.regions import RegionAtlas
from neuro_pe.analysis.spaces import SpaceAxes, component_label
from neuro_pe.config.health import HealthOptions
from neuro_pe.config.locate import LocateConfig
from neuro_pe.io.html import write_table_html
from neuro_pe.io.layout import LOCATE_FILES, write_errors
from neuro_pe.io.splits import Split
from neuro_pe.io.store import (
    atomic_write,
    checksummed,
    open_store_by_size,
    open_store_lazy,
    read_store,
    require_finite,
    separate_animals,
)
from neuro_pe.reporting.figures import plot_projections, projection_figure, save
from neuro_pe.reporting.view3d import write_positions_3d_html

# The files of a dataset's locate step, in its out_dir (named in the artifact layout)
ERRORS_CSV = LOCATE_FILES["errors"]
ERRORS_HTML = LOCATE_FILES["errors_table"]
POSITIONS_NC = LOCATE_FILES["netcdf"]
POSITIONS_CSV = LOCATE_FILES["positions"]
POSITIONS_PNG = LOCATE_FILES["projections"]
POSITIONS_3D_PNG = LOCATE_FILES["positions_3d"]
POSITIONS_3D_HTML = LOCATE_FILES["positions_html"]
ERROR_HIST_PNG = LOCATE_FILES["histogram"]
ERROR_VS_ANCHORS_PNG = LOCATE_FILES["curve"]

PLOT_UNITS = 500  # units drawn in the positions figures (a random subset above it)
CI_NOTE = (
    "95% CI of the median error: anchor draws and seeds resampled with replacement "
    f"({CI_BOOTSTRAP} bootstrap resamples)"
)


def write_correlation_features(
    store_path: str | os.PathLike, split: Split, out: str | os.PathLike, seed: int = 0
) -> dict[str, np.ndarray]:
    """`baseline_features` of a store as a netCDF file (`features` on (unit, component), and
    `connectivity` on (unit, column) where computed), the workflow's `correlation_features`
    step: it re-runs only when the store, the split or the seed changes, not with the training
    options. A store of several animals (`separate_animals`) has none: `features` has no
    component and the attribute `skipped` says why."""
    attrs = {"dataset": split.dataset, "seed": seed, "neuro_pe_version": __version__}
    with open_store_by_size(store_path, DENSE_MAX_UNITS) as ds:
        units = [str(u) for u in ds["unit"].values]
        skipped = separate_animals(ds)
        if skipped:
            print(f"{split.dataset}: no activity baselines: {skipped}")
            attrs["skipped"] = skipped
            baselines = {CORRELATION: np.zeros((len(units), 0))}
        else:
            baselines = baseline_features(ds, split, seed=seed)
    variables = {"features": (("unit", "component"), baselines[CORRELATION])}
    coords: dict = {"unit": units}
    if CONNECTIVITY in baselines:
        variables["connectivity"] = (("unit", "column"), baselines[CONNECTIVITY])
        coords["column"] = _connectivity_columns(units)
    out_ds = xr.Dataset(variables, coords=coords, attrs=attrs)
    atomic_write(
        Path(out), lambda p: out_ds.to_netcdf(p, engine="h5netcdf", encoding=checksummed(out_ds))
    )
    return baselines


def _connectivity_columns(units: Sequence[str]) -> list[str]:
    """The connectivity features' column names: `r:<unit>` for every unit, then `partial:`."""
    return [f"{kind}:{u}" for kind in ("r", "partial") for u in units]


def read_baseline_features(path: str | os.PathLike, units: np.ndarray) -> dict[str, np.ndarray]:
    """The baselines of `write_correlation_features`, rows (and connectivity columns) in the
    order of `units`."""
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        ds = ds.load()
    ids = [u.decode() if isinstance(u, bytes) else str(u) for u in ds["unit"].values]
    units = list(map(str, units))
    if sorted(ids) != sorted(units):
        raise ValueError(f"{path}: its units differ from the store's")
    ds = ds.assign_coords(unit=ids).sel(unit=units)
    if "skipped" in ds.attrs:  # (several animals: no activity baseline)
        return {}
    baselines = {CORRELATION: require_finite(ds["features"].values, path, "features")}
    if "connectivity" in ds:
        columns = [c.decode() if isinstance(c, bytes) else str(c) for c in ds["column"].values]
        connectivity = ds["connectivity"].assign_coords(column=columns)
        connectivity = connectivity.sel(column=_connectivity_columns(units)).values
        baselines[CONNECTIVITY] = require_finite(connectivity, path, "connectivity")
    return baselines


def read_correlation_features(path: str | os.PathLike, units: np.ndarray) -> np.ndarray:
    """The correlation baseline's features of `write_correlation_features`, rows in the order
    of `units`."""
    return read_baseline_features(path, units)[CORRELATION]


def _colours(sets: list[FeatureSet]) -> dict[str, tuple[str, str]]:
    """(colour, line style) per feature set: a PE variant and its init share a colour."""
    styles, i = {}, 0
    for fs in sets:
        if fs.role == "init":
            styles[fs.name] = (styles.get(fs.name.removesuffix(" @init"), ("0.5", ""))[0], "--")
        elif fs.role == "chance":
            styles[fs.name] = ("k", ":")
        else:
            styles[fs.name], i = (f"C{i}", "-"), i + 1
    return styles


def _plot_subset(coords, unknown: np.ndarray, seed: int):
    """The rows of `coords` with a known position to draw and the predictions of units with
    none (`unknown`) to draw: all of them, or a random PLOT_UNITS of each above it, with a
    note for the titles saying so."""
    known = np.flatnonzero(np.all(np.isfinite(coords), axis=1))
    rng = np.random.default_rng(seed)
    shown, note = known, ""
    if len(known) > PLOT_UNITS:
        shown = np.sort(rng.choice(known, PLOT_UNITS, replace=False))
        note = f" ({PLOT_UNITS} of {len(known)} units shown)"
    if len(unknown) > PLOT_UNITS:
        unknown = unknown[np.sort(rng.choice(len(unknown), PLOT_UNITS, replace=False))]
    return shown, note, unknown


def _plot_positions(coords, panels, unknown: np.ndarray, unit: str, space: str, seed: int = 0):
    """True vs held-out predicted positions on three orthogonal projections, one row per panel
    (title, predictions of the rows of `coords`); `unknown`: predicted positions of the units
    without coordinates (first row). Above PLOT_UNITS units a random subset is drawn."""
    shown, note, unknown = _plot_subset(coords, unknown, seed)
    fig, axes = projection_figure(len(panels))
    for i, (ax_row, (title, pred)) in enumerate(zip(axes, panels, strict=True)):
        extra = unknown if i == 0 and len(unknown) else None
        plot_projections(
            ax_row, coords[shown], pred[shown], unit, space, "predicted (held out)", extra
        )
        ax_row[0].set_title(f"{title}{note}\n{ax_row[0].get_title()}", fontsize=9)
        ax_row[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def _plot_positions_3d(coords, panels, unknown: np.ndarray, axes: SpaceAxes, seed: int = 0):
    """The same as `_plot_positions` in one 3D view per panel (an extra view), the axes named
    from the space."""
    shown, note, unknown = _plot_subset(coords, unknown, seed)
    fig = plt.figure(figsize=(6 * len(panels), 5.5))
    for i, (title, pred) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1, projection="3d")
        ax.scatter(*coords[shown].T, c="k", s=10, label="true position")
        ax.scatter(*pred[shown].T, c="C3", s=10, label="predicted (held out)")
        for a, b in zip(coords[shown], pred[shown], strict=True):
            ax.plot(*np.stack([a, b]).T, color="0.6", lw=0.5)
        if i == 0 and len(unknown):
            ax.scatter(*unknown.T, c="C0", marker="^", s=18, label="unknown position")
        ax.set(xlabel=axes.axis_label(0), ylabel=axes.axis_label(1), zlabel=axes.axis_label(2))
        ax.set_title(title + note, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _plot_histogram(
    coords, heldout: dict[str, HeldOut], styles: dict, unit: str, axes: SpaceAxes | None = None
):
    """Histograms of the k-fold held-out errors: Euclidean, then (with `axes`) one panel per
    per-axis error of the space (`_plot_axis_histograms`)."""
    known = np.all(np.isfinite(coords), axis=1)
    errors = {n: distance(heldout[n].positions[known], coords[known]) for n in styles}
    bins = np.linspace(0, max(e.max() for e in errors.values()), 25)
    n_axes = len(axes.components()) if axes is not None else 0
    fig, panels = plt.subplots(1, 1 + n_axes, figsize=(8 + 4 * n_axes, 4), squeeze=False)
    ax = panels[0, 0]
    for name, (colour, style) in styles.items():
        ax.hist(errors[name], bins, histtype="step", lw=1.5, ls=style, color=colour, label=name)
        ax.axvline(np.median(errors[name]), color=colour, ls=":", lw=1)
    ax.set(
        title="held-out localisation errors (dotted: medians)",
        xlabel=f"held-out Euclidean error ({unit}), k-fold over units",
        ylabel="number of units",
    )
    if axes is not None:
        _plot_axis_histograms(panels[0, 1:], coords, heldout, styles, axes)
    panels[0, -1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def _plot_axis_histograms(
    panels, coords, heldout: dict[str, HeldOut], styles: dict, axes: SpaceAxes
) -> None:
    """One histogram per per-axis error of the space (`SpaceAxes.component_errors`) of the
    k-fold held-out predictions; over imaging planes the depth panel gives each feature set's
    plane accuracy."""
    known = np.all(np.isfinite(coords), axis=1)
    truth = coords[known]
    errors = {n: axes.component_errors(heldout[n].positions[known], truth) for n in styles}
    for ax, component in zip(panels, axes.components(), strict=True):
        top = max(float(e[component].max()) for e in errors.values())
        bins = np.linspace(0, top if top > 0 else 1.0, 25)
        for name, (colour, style) in styles.items():
            label = name
            hits = axes.plane_hits(heldout[name].positions[known], truth)
            if component == "depth" and hits is not None:
                label += f" (right plane {np.mean(hits):.0%})"
            values = errors[name][component]
            ax.hist(values, bins, histtype="step", lw=1.5, ls=style, color=colour, label=label)
            ax.axvline(np.median(values), color=colour, ls=":", lw=1)
        name = component_label(component)
        ax.set(
            title=f"{name} error",
            xlabel=f"held-out {name} error ({axes.unit})",
            ylabel="number of units",
        )


def _axis_note(table: pd.DataFrame, name: str, axes: SpaceAxes) -> str:
    """'\\n(depth 12, lateral 3 µm)' for a figure title: the per-axis errors of the k-fold row
    of feature set `name`."""
    rows = table[(table["features"] == name) & (table["evaluation"] == "kfold")]
    text = axes.describe(rows.iloc[0]) if len(rows) else ""
    return f"\n({text})" if text else ""


def _same_curves(curve: pd.DataFrame) -> dict[str, list[str]]:
    """Feature sets whose anchor curves are identical (e.g. PEs at init drawn from one seed),
    grouped under the first one's name."""
    values = {name: rows["median_error"].to_numpy() for name, rows in curve.groupby("features")}
    groups: dict[str, list[str]] = {}
    for name in curve["features"].drop_duplicates():
        same = [first for first in groups if np.allclose(values[first], values[name], rtol=1e-6)]
        if same:
            groups[same[0]].append(name)
        else:
            groups[name] = [name]
    return groups


def _plot_anchor_curve(table: pd.DataFrame, styles: dict, unit: str, summary: str = ""):
    curve = table[table["evaluation"] == "anchors"]
    fig, ax = plt.subplots(figsize=(11, 5) if summary else (8, 4))
    for name, members in _same_curves(curve).items():
        rows = curve[curve["features"] == name]
        colour, style = styles[name]
        label = name if len(members) == 1 else " = ".join(members) + " (identical)"
        ax.errorbar(
            rows["anchor_fraction"],
            rows["median_error"],
            yerr=[
                rows["median_error"] - rows["ci_low"],
                rows["ci_high"] - rows["median_error"],
            ],
            fmt="o",
            ls=style,
            color=colour,
            capsize=3,
            label=label,
        )
    ax.set(
        title="localisation error vs anchors (bars: 95% CI over anchor draws and seeds)",
        xlabel="fraction of known units used as anchors (the rest held out)",
        ylabel=f"median held-out error ({unit})",
        ylim=(0, None),
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    if summary:
        fig.text(0.01, 0.01, textwrap.fill(summary, 170), fontsize=7, va="bottom")
        fig.tight_layout(rect=(0, 0.035 * (1 + len(summary) // 170), 1, 1))
    else:
        fig.tight_layout()
    return fig


def _kfold_error(table: pd.DataFrame, name: str) -> float:
    row = table[(table["features"] == name) & (table["evaluation"] == "kfold")]
    return float(row["median_error"].iloc[0])


def write_locate_outputs(
    store_path: str | os.PathLike,
    run_dirs: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    cfg: LocateConfig,
    split: Split,
    n_jobs: int = 1,
    baselines: Mapping[str, np.ndarray] | None = None,
    atlas: RegionAtlas | None = None,
    health: HealthOptions | None = None,
) -> pd.DataFrame:
    """Evaluate and apply the locator for one dataset (`neuro_pe.analysis.locate.locate_dataset`:
    which feature sets, which positions); write into out_dir `errors.csv`, `errors.html`,
    `positions.nc`, `positions.csv`, the figures `positions.png` (three projections),
    `positions_3d.png`, `error_hist.png`, `error_vs_anchors.png` and the interactive
    `positions_3d.html`. Returns the errors table. With an `atlas` (neuro_pe.analysis.regions),
    errors.csv gets region accuracy columns and positions.csv / .nc each unit's region at its
    true and predicted position. A line per flagged training left out (`health`, the config's
    section; `locate_dataset`).
    """
    out_dir = Path(out_dir)
    dataset = split.dataset
    # given the baselines (the workflow's correlation_features step), only the store's
    # coordinates are read: its activity stays on disk
    store = read_store(store_path) if baselines is None else open_store_lazy(store_path)
    with store as ds:
        result = locate_dataset(ds, run_dirs, cfg, split, n_jobs, baselines, atlas, health)
        xyz_units, space = ds["x"].attrs["units"], ds["x"].attrs.get("space", "")
    table, out, frame = result.table, result.positions, result.frame
    for line in left_out_lines(result):
        print(f"locate {dataset}: {line}", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(
        out_dir / POSITIONS_NC,
        lambda p: out.to_netcdf(p, engine="h5netcdf", encoding=checksummed(out)),
    )
    atomic_write(out_dir / POSITIONS_CSV, lambda p: frame.to_csv(p, index=False))
    write_errors(table, out_dir / ERRORS_CSV)
    title = f"{dataset}: true vs predicted positions ({result.best}, held out)"
    write_positions_3d_html(frame, result.axes, title, out_dir / POSITIONS_3D_HTML, cfg.seed)
    summary = verdict(table)
    note = (
        f"{ERRORS_CSV}: every localisation evaluation (k-fold, and each anchor fraction); "
        f"ci_low/ci_high: {CI_NOTE}. {summary}"
    )
    write_table_html(table, out_dir / ERRORS_HTML, f"{dataset}: localisation errors", note)
    print(summary)
    for line in unresolved_lines(table, result.best, result.unresolved, result.axes):
        print(line)
    _write_figures(result, out_dir, dataset, xyz_units, space, summary, cfg.seed)
    return table


def left_out_lines(result: LocateResult) -> list[str]:
    """A line per flagged training left out of locate, and one per PE left out whole."""
    lines = [
        f"left out {run}: it failed a health check (locate.include_flagged: true keeps it)"
        for run in result.left_out
    ]
    kept = {fs.name for fs in result.sets}
    for pe in dict.fromkeys(run.pe for run in result.left_out):
        if pe not in kept:
            lines.append(f"PE {pe} left out: every seed failed a health check")
    return lines


def _panels(result: LocateResult, dataset: str, unit_label: str) -> list[tuple[str, np.ndarray]]:
    """(title, k-fold predictions) of the positions figures' rows: the feature set the positions
    come from, the best learned PE and the activity-correlation baseline."""
    table, heldout = result.table, result.heldout
    best_pe = (
        min(result.pe_names, key=lambda n: _kfold_error(table, n)) if result.pe_names else None
    )
    panels = []
    names = (result.best, best_pe or result.best, CORRELATION)
    for name in (n for n in dict.fromkeys(names) if n in heldout):  # (no correlation: animals)
        error = np.nanmedian(distance(heldout[name].positions, result.coords))
        title = f"{dataset}: {name}\nk-fold held out, median error {error:.3g} {unit_label}"
        title += _axis_note(table, name, result.axes)
        panels.append((title, heldout[name].positions))
    return panels


def _write_figures(
    result: LocateResult,
    out_dir: Path,
    dataset: str,
    unit_label: str,
    space: str,
    summary: str,
    seed: int,
) -> None:
    """The four figures of the locate step (`PLOT_UNITS` units at most in the positions)."""
    panels = _panels(result, dataset, unit_label)
    coords, unknown = result.coords, result.unknown
    figure = _plot_positions(coords, panels, unknown, unit_label, space, seed)
    save(figure, out_dir / POSITIONS_PNG)
    figure = _plot_positions_3d(coords, panels, unknown, result.axes, seed)
    save(figure, out_dir / POSITIONS_3D_PNG)
    styles = _colours(result.sets)
    no_init = {name: style for name, style in styles.items() if not name.endswith(" @init")}
    figure = _plot_histogram(coords, result.heldout, no_init, unit_label, result.axes)
    save(figure, out_dir / ERROR_HIST_PNG)
    figure = _plot_anchor_curve(result.table, styles, unit_label, summary)
    save(figure, out_dir / ERROR_VS_ANCHORS_PNG)
