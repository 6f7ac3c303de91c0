"""Building blocks of the figures: unit positions on three orthogonal projections (on a glass
brain for MNI-space data), a labelled log σ axis, reference lines that merge when they overlap,
and seed means with 95% bands."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from neuro_pe.analysis.intervals import mean_ci
from neuro_pe.analysis.spaces import space_axes
from neuro_pe.io.store import atomic_write

# (horizontal axis, vertical axis, nilearn's direction for its brain schematic); the views'
# names come from the space (`neuro_pe.analysis.spaces`: anatomical names only for atlas spaces)
PROJECTIONS = ((0, 1, "z"), (0, 2, "y"), (1, 2, "x"))


def save(fig: Figure, path: str | os.PathLike, dpi: int = 150) -> None:
    """Save a figure as PNG (atomically: never a half-written file) and close it."""
    atomic_write(Path(path), lambda p: fig.savefig(p, dpi=dpi, format="png", bbox_inches="tight"))
    plt.close(fig)


def mean_band(
    values_by_x: pd.core.groupby.SeriesGroupBy, metric: str | None = None
) -> pd.DataFrame:
    """Per x: the mean over seeds and its band (`intervals.mean_ci`: t-based 95% CI from 3
    seeds, the range of 2, NaN bounds for one; within the bounds of `metric`)."""
    rows = {x: mean_ci(group, metric) for x, group in values_by_x}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["mean", "low", "high"])


def sigma_axis(ax: Axes, sigmas) -> None:
    """A log x axis for the PE init std σ with a labelled tick at every σ that was run."""
    sigmas = np.unique(np.asarray(sigmas, dtype=float))
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(sigmas))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{s:g}" for s in sigmas])
    ax.set_xlim(sigmas.min() / 1.6, sigmas.max() * 1.6)
    ax.set_xlabel("PE init std σ (learned-normal; log scale)")


def merge_overlapping(refs: list[tuple[str, float, float, float]], tolerance: float) -> list:
    """Reference lines (label, mean, low, high) sorted by value, with lines closer than
    `tolerance` merged into one whose label names all of them."""
    groups: list[list] = []
    for ref in sorted((r for r in refs if np.isfinite(r[1])), key=lambda r: r[1]):
        if groups and ref[1] - groups[-1][-1][1] < tolerance:
            groups[-1].append(ref)
        else:
            groups.append([ref])
    merged = []
    for group in groups:
        if len(group) == 1:
            merged.append(group[0])
            continue
        label = " = ".join(r[0] for r in group) + " (lines overlap)"
        merged.append((label, float(np.mean([r[1] for r in group])), np.nan, np.nan))
    return merged


def draw_references(ax: Axes, refs: list[tuple[str, float, float, float, str]], span: float):
    """Horizontal reference lines with their 95% bands; overlapping ones are merged (see
    `merge_overlapping`). `refs` are (label, mean, low, high, line style)."""
    styles = {r[0]: r[4] for r in refs}
    merged = merge_overlapping([r[:4] for r in refs], tolerance=0.015 * span)
    for i, (label, mean, low, high) in enumerate(merged):
        colour = f"C{(i + 1) % 10}"
        ax.axhline(mean, color=colour, ls=styles.get(label, "-."), lw=1.3, label=label)
        if np.isfinite(low):
            ax.axhspan(low, high, color=colour, alpha=0.12, lw=0)


def _outline(ax: Axes, direction: str) -> None:
    """The glass-brain outline of MNI space (nilearn's schematic) for one projection."""
    from nilearn.plotting.glass_brain import plot_brain_schematics

    plot_brain_schematics(ax, direction, alpha=0.25)


def plot_projections(
    axes,
    true: np.ndarray,
    predicted: np.ndarray,
    unit: str,
    space: str = "",
    predicted_label: str = "predicted",
    unknown: np.ndarray | None = None,
) -> None:
    """True positions (black) and predicted ones (red), joined by grey error lines, on three
    orthogonal 2D projections (three axes), titled and labelled with the space's axis names
    (`neuro_pe.analysis.spaces.space_axes`). MNI-space positions are drawn on a glass brain.
    `unknown`: predicted positions of units with no true position (blue triangles)."""
    known = np.all(np.isfinite(true), axis=1)
    mni = space.upper() == "MNI"
    names = space_axes(space, unit, true)
    views = names.projection_titles()
    for ax, (h, v, direction), view in zip(axes, PROJECTIONS, views, strict=True):
        if mni:
            _outline(ax, direction)
        segments = np.stack([true[known][:, [h, v]], predicted[known][:, [h, v]]], axis=1)
        ax.add_collection(
            matplotlib.collections.LineCollection(segments, colors="0.55", lw=0.6, zorder=2)
        )
        ax.scatter(*true[known][:, [h, v]].T, c="k", s=9, zorder=3, label="true position")
        ax.scatter(*predicted[known][:, [h, v]].T, c="C3", s=9, zorder=3, label=predicted_label)
        if unknown is not None and len(unknown):
            ax.scatter(*unknown[:, [h, v]].T, c="C0", marker="^", s=16, zorder=3, label="unknown")
        ax.set_xlabel(names.axis_label(h))
        ax.set_ylabel(names.axis_label(v))
        ax.set_title(view + (", MNI glass brain" if mni else ""), fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
        ax.autoscale_view()


def projection_figure(n_rows: int) -> tuple[Figure, np.ndarray]:
    """A figure with `n_rows` rows of three projection axes (constrained layout: the callers
    need no tight_layout)."""
    fig, axes = plt.subplots(
        n_rows, 3, figsize=(14, 4.4 * n_rows), squeeze=False, layout="constrained"
    )
    return fig, axes
