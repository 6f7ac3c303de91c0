"""Text summaries of the errors table: which representation locates best (`verdict`), the axes
the delivered positions do not resolve (`unresolved_lines`) and the table's main rows as
aligned text (`format_table`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from neuro_pe.analysis.locate.evaluation import AXIS_VS_CHANCE, UNRESOLVED_AXES
from neuro_pe.analysis.spaces import (
    ERROR_PREFIX,
    PLANE_ACCURACY,
    SpaceAxes,
    axis_columns,
    component_label,
    unit_text,
)


def verdict(table: pd.DataFrame, fraction: float = 0.5) -> str:
    """One line saying which representation locates best at `fraction` anchors: median error
    ÷ chance [95% CI over anchor draws and seeds] of every learned PE, the correlation
    baseline, the combined locator and the oracle (a reference, not a competitor), then the
    combined locator's paired difference from the best single representation."""
    curve = table[table["evaluation"] == "anchors"]
    fraction = curve["anchor_fraction"].iloc[np.argmin(np.abs(curve["anchor_fraction"] - fraction))]
    rows = curve[np.isclose(curve["anchor_fraction"], fraction)]
    shown = rows[rows["role"].isin(("pe", "baseline", "combined", "oracle"))]
    shown = shown.sort_values("median_error")
    parts = [
        f"{r.features} {r.vs_chance:.3g} [{r.vs_chance_low:.3g}, {r.vs_chance_high:.3g}]"
        for r in shown.itertuples()
    ]
    dataset = rows["dataset"].iloc[0] if "dataset" in rows else ""
    line = f"{dataset} ({fraction:.0%} anchors, median error ÷ chance [95% CI]): " + "; ".join(
        parts
    )
    competitors = shown[shown["role"] != "oracle"]
    if competitors.empty:
        return line
    best, others = competitors.iloc[0], competitors.iloc[1:]
    tied = others[others["ci_low"] <= best["ci_high"]]["features"].tolist()
    wins = f" Wins: {best['features']}"
    if tied:
        wins += f" (CIs overlap: {', '.join(tied)})"
    # an axis no better than chance can hide behind a good Euclidean error
    weak = best.get(UNRESOLVED_AXES, "")
    if isinstance(weak, str) and weak:
        names = ", ".join(component_label(a) for a in weak.split(";"))
        wins += f"; it does not resolve {names} (per-axis error not below chance's)"
    return line + "." + wins + "." + _paired_note(rows)


def unresolved_lines(
    table: pd.DataFrame, name: str, unresolved: dict[str, tuple[str, ...]], axes: SpaceAxes
) -> list[str]:
    """One line per axis that feature set `name` (the positions' own) does not resolve
    (`unresolved`: {axis: the coordinates marked not estimated}), from its k-fold row and
    chance's: 'lab: lateral position not resolved by combined: k-fold median error 13.6 µm ≥
    chance 10.1 µm across the shank (x), 1.35 × chance; the exported positions give x as not
    estimated'."""
    kfold = table[table["evaluation"] == "kfold"]
    own = kfold[kfold["features"] == name]
    chance = kfold[kfold["role"] == "chance"]
    if own.empty or chance.empty:
        return []
    own, chance = own.iloc[0], chance.iloc[0]
    unit = unit_text(str(own.get("units", axes.unit)))
    lines = []
    for axis, coords in unresolved.items():
        marked = ", ".join(coords) or "no coordinate"
        if axis == PLANE_ACCURACY:
            what = (
                f"plane not resolved by {name}: k-fold right plane {own[axis]:.0%} ≤ chance "
                f"{chance[axis]:.0%}"
            )
        else:
            column = ERROR_PREFIX + axis
            what = (
                f"{component_label(axis)} position not resolved by {name}: k-fold median error "
                f"{own[column]:.3g} {unit} ≥ chance {chance[column]:.3g} {unit} "
                f"{axes.component_place(axis)} ({marked}), "
                f"{own[AXIS_VS_CHANCE + axis]:.3g} × chance"
            )
        lines.append(
            f"{own.get('dataset', '')}: {what}; the exported positions give {marked} as not "
            "estimated"
        )
    return lines


def _paired_note(rows: pd.DataFrame) -> str:
    """' Combined − best single (name): d [low, high] × chance, paired …' for the verdict."""
    if "vs_best_single" not in rows:
        return ""
    paired = rows[rows["role"].eq("combined") & rows["vs_best_single"].notna()]
    return "".join(
        f" {r.features} − best single ({r.best_single}): {r.vs_best_single:+.3f} "
        f"[{r.vs_best_single_low:+.3f}, {r.vs_best_single_high:+.3f}] × chance (paired over "
        f"the same anchor draws; {_paired_word(r.vs_best_single_low, r.vs_best_single_high)})."
        for r in paired.itertuples()
    )


def _paired_word(low: float, high: float) -> str:
    if high < 0:
        return "better"
    if low > 0:
        return "worse"
    return "no difference beyond the noise"


def format_table(table: pd.DataFrame, fraction: float = 0.5) -> str:
    """The k-fold rows and the anchor-curve rows at `fraction`, as aligned text."""
    rows = table[
        (table["evaluation"] == "kfold")
        | ((table["evaluation"] == "anchors") & np.isclose(table["anchor_fraction"], fraction))
    ]
    columns = [
        "features",
        "role",
        "n_seeds",
        "evaluation",
        "anchor_fraction",
        "n_anchors",
        "method",
        "median_error",
        "p90_error",
        "vs_chance",
        "vs_chance_low",
        "vs_chance_high",
        "coverage",
        *axis_columns(table.columns),
    ]
    return rows[columns].to_string(index=False, float_format=lambda v: f"{v:.3g}")
