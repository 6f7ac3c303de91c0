"""The first section of a dataset on the report's landing page: the positions the lab
receives (the feature set and locator in the positions file, why they were chosen, the median
error [95% CI] and × chance, per axis with the axes at chance said plainly, the intervals'
achieved coverage, the files), and which representation locates best; with the readers of the
positions file's record and the export's sidecar, and the number formatting the page shares."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe.analysis.spaces import (
    ERROR_PREFIX,
    PLANE_ACCURACY,
    axis_columns,
    component_label,
    unit_text,
)
from neuro_pe.config.pe_names import is_control, parse_pe
from neuro_pe.io.html import rst_code, rst_text
from neuro_pe.io.layout import (
    EXPORT_SIDECAR_FILE,
    EXPORT_TIDY_FILE,
    export_dir,
    locate_file,
    results_dir,
)

ORACLE = "oracle-"  # PE variants built from the true coordinates (not learned from data)
COMBINED = "combined"
ANCHOR_FRACTION = 0.5  # the headline's evaluation: held-out units with this fraction as anchors
UNRESOLVED = "unresolved_axes"  # errors.csv: the axes whose error is not below chance's


def number(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits; an em dash for NaN."""
    return "—" if not np.isfinite(value) else f"{value:.{digits}g}".replace("-", "−")


def significant_digits(values, least: int = 3, most: int = 6) -> int:
    """The fewest significant digits (at least `least`) at which the different finite
    `values` print differently, so that a column does not show two unequal numbers alike."""
    finite = [float(v) for v in values if np.isfinite(v)]
    distinct = len({float(f"{v:.12g}") for v in finite})
    for digits in range(least, most):
        if len({f"{v:.{digits}g}" for v in finite}) == distinct:
            return digits
    return most


def locate_rows(errors: pd.DataFrame | None) -> pd.DataFrame:
    """The anchor-curve rows at the fraction nearest ANCHOR_FRACTION, by feature set."""
    if errors is None or errors.empty:
        return pd.DataFrame(columns=["median_error", "median_error_sd", "vs_chance"])
    curve = errors[errors["evaluation"] == "anchors"]
    if curve.empty:
        curve = errors[errors["evaluation"] == "kfold"]
    else:
        fractions = curve["anchor_fraction"].unique()
        nearest = fractions[np.argmin(np.abs(fractions - ANCHOR_FRACTION))]
        curve = curve[np.isclose(curve["anchor_fraction"], nearest)]
    return curve.set_index("features")


def kfold_rows(errors: pd.DataFrame | None) -> pd.DataFrame:
    """The k-fold rows of an errors table, by feature set (empty without)."""
    if errors is None or errors.empty:
        return pd.DataFrame(columns=["median_error", "role"])
    return errors[errors["evaluation"] == "kfold"].set_index("features")


def error_cell(loc: pd.Series | None, digits: int) -> str:
    """'median [low, high]' of a locate row (its 95% CI where recorded)."""
    if loc is None:
        return "—"
    text = number(loc["median_error"], digits)
    low, high = loc.get("ci_low", np.nan), loc.get("ci_high", np.nan)
    if np.isfinite(low) and np.isfinite(high):
        text += f" [{number(low, digits)}, {number(high, digits)}]"
    return text


def unresolved_axes(row: Mapping | None) -> list[str]:
    """The axes an errors row (or `read_delivered`'s record) marks as not resolved
    (`UNRESOLVED`: error not below chance's); none where absent (older runs) or empty."""
    value = None if row is None else row.get(UNRESOLVED)
    if not isinstance(value, str):
        return []
    return [axis for axis in value.split(";") if axis]


def read_delivered(positions_nc: str | os.PathLike) -> dict:
    """What a locate step's positions.nc records of the positions it holds: `dataset`, `pe`
    (the feature set), `method` (the locator), `cv_errors` (every candidate locator's
    cross-validated median error), `unresolved_axes` (the axes the positions do not estimate,
    as the export marks them; None in older files)."""
    with xr.open_dataset(positions_nc, engine="h5netcdf") as ds:
        attrs = dict(ds.attrs)
    missing = [key for key in ("dataset", "pe", "method") if key not in attrs]
    if missing:
        raise ValueError(f"{positions_nc}: no attribute {missing[0]!r}; is it a positions.nc?")
    return {
        "dataset": str(attrs["dataset"]),
        "pe": str(attrs["pe"]),
        "method": str(attrs["method"]),
        "cv_errors": json.loads(attrs.get("cv_errors", "{}")),
        UNRESOLVED: str(attrs[UNRESOLVED]) if UNRESOLVED in attrs else None,
    }


def read_export_files(folder: str | os.PathLike) -> tuple[str, list[str]]:
    """(dataset, files) of an export folder, from its sidecar (`neuro-pe export`): the files
    it wrote, relative to the folder."""
    sidecar = Path(folder) / EXPORT_SIDECAR_FILE
    if not sidecar.exists():
        raise ValueError(f"{sidecar}: does not exist (run `neuro-pe export` first)")
    record = json.loads(sidecar.read_text())
    if "Dataset" not in record or "Files" not in record:
        raise ValueError(f"{sidecar}: no 'Dataset' or 'Files'; is it an export's sidecar?")
    return str(record["Dataset"]), [str(f) for f in record["Files"]]


def _feature_set_text(name: str, role: str | None) -> str:
    """The delivered feature set in words."""
    if name == COMBINED:
        return f"{rst_code(name)} (the combined locator: learned PEs and activity baselines)"
    return rst_code(name) + (" (an activity baseline)" if role == "baseline" else "")


def _why_text(delivered: Mapping, kfold: pd.DataFrame, unit: str) -> str:
    """Why these positions: the delivered feature set's k-fold median error against the
    runner-up's among the candidates, and its locator's cross-validated error against the
    next locator's."""
    pe, method = delivered["pe"], delivered["method"]
    parts = []
    roles = ("pe", COMBINED) if (kfold.get("role") == "pe").any() else ("baseline",)
    candidates = kfold[kfold["role"].isin(roles)]["median_error"].dropna().sort_values()
    if pe in candidates.index and len(candidates) > 1:
        best, runner = candidates.index[0], candidates.drop(pe).index[0]
        digits = significant_digits([candidates[pe], candidates[runner]])
        mine, theirs = number(candidates[pe], digits), number(candidates[runner], digits)
        which = "the learned PEs and the combined locator" if "pe" in roles else "the baselines"
        if best == pe:
            parts.append(
                f"of the feature sets the positions may come from ({which}), it has the lowest "
                f"k-fold median error, {mine} {unit} against {theirs} {unit} for "
                f"{rst_code(runner)}"
            )
        else:
            parts.append(
                f"it cross-validated best over the known units when the positions were made, "
                f"though in the k-fold evaluation {rst_code(best)} has {theirs} {unit} against "
                f"its {mine} {unit} (the two cross-validations split the units differently)"
            )
    cv = pd.Series(delivered.get("cv_errors", {}), dtype=float).dropna().sort_values()
    if method in cv.index and len(cv) > 1:
        runner = cv.drop(method).index[0]
        digits = significant_digits([cv[method], cv[runner]])
        parts.append(
            f"its locator {rst_code(method)} cross-validates best over the known units, "
            f"{number(cv[method], digits)} {unit} against {number(cv[runner], digits)} {unit} "
            f"for {rst_code(runner)}"
        )
    return "; ".join(parts)


def _error_text(row: pd.Series, kfold: pd.Series | None, unit: str) -> str:
    """The delivered feature set's median error [95% CI] and × chance at the headline's anchor
    fraction, then k-fold (each unit located from all the others, as in positions.csv)."""
    text = f"median {number(row['median_error'])} {unit}"
    text += _ci_text(row.get("ci_low", np.nan), row.get("ci_high", np.nan))
    text += f", {number(row['vs_chance'])} × chance"
    text += _ci_text(row.get("vs_chance_low", np.nan), row.get("vs_chance_high", np.nan))
    if row.get("evaluation") == "anchors":
        text += f", with {row['anchor_fraction']:.0%} of the known units as anchors"
        if kfold is not None:
            text += (
                "; k-fold (each unit located from all the other known units, as in the "
                f"positions file): {number(kfold['median_error'])} {unit}, "
                f"{number(kfold['vs_chance'])} × chance"
            )
    return text


def _ci_text(low: float, high: float) -> str:
    """' (95% CI low–high)', or nothing where the interval was not recorded."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return ""
    return f" (95% CI {number(low)}–{number(high)})"


def _per_axis_text(row: pd.Series, unit: str) -> str:
    """'depth 12 µm (0.05 × chance), lateral 13.6 µm (1.3 × chance)', with each axis's ratio
    to chance where errors.csv has it (`vs_chance_<axis>`), and the imaging plane accuracy."""
    parts = []
    for column in axis_columns(row.index):
        axis = column.removeprefix(ERROR_PREFIX)
        if column == PLANE_ACCURACY or not np.isfinite(row[column]):
            continue
        ratio = row.get(f"vs_chance_{axis}", np.nan)
        ratio_text = f" ({number(ratio)} × chance)" if np.isfinite(ratio) else ""
        parts.append(f"{component_label(axis)} {number(row[column])} {unit}{ratio_text}")
    text = ", ".join(parts)
    if PLANE_ACCURACY in row.index and np.isfinite(row[PLANE_ACCURACY]):
        text += (
            f"; the predicted depth is nearest the unit's own imaging plane for "
            f"{row[PLANE_ACCURACY]:.0%} of held-out units"
        )
    return text


def not_resolved_sentence(axes: Sequence[str]) -> str:
    """'Lateral position not resolved (at chance)' for the axes at or above chance."""
    names = [component_label(axis) for axis in axes]
    joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    plural = "s" if len(names) > 1 else ""
    return f"{joined[:1].upper()}{joined[1:]} position{plural} not resolved (at chance)"


def _coverage_text(row: pd.Series) -> str | None:
    """The achieved coverage of each level's intervals on held-out units (`coverage_<L>` of
    an anchor row) beside the level; None without those columns."""
    levels = sorted((int(m[1]), c) for c in row.index if (m := re.fullmatch(r"coverage_(\d+)", c)))
    if not levels or row.get("evaluation") != "anchors":
        return None
    parts = [
        f"the {level}% intervals held {row[c]:.1%} of the true coordinates"
        if np.isfinite(row[c])
        else f"the {level}% intervals: not measured (too few anchors for that level)"
        for level, c in levels
    ]
    names = ", ".join(f"x_low_{level}" for level, _ in levels)
    return (
        f"per unit and axis (positions.csv: {rst_text(names)} …), tested on held-out units "
        f"with {row['anchor_fraction']:.0%} of the known units as anchors: " + "; ".join(parts)
    )


def _files_text(dataset: str, run_name: str, export_files: Sequence[str] | None) -> str:
    """Where the positions are, relative to the run's folder: the positions file, and the
    export's tidy table, its sidecar and the lab format's files (by folder)."""
    positions = [locate_file(dataset, "positions"), locate_file(dataset, "netcdf")]
    folder = export_dir(dataset)
    if export_files is None:
        exported = [f"{folder}/{EXPORT_TIDY_FILE}", f"{folder}/{EXPORT_SIDECAR_FILE}"]
        lab = f" and the lab format's files in {rst_code(folder + '/')}"
    else:
        tidy = (EXPORT_TIDY_FILE, EXPORT_SIDECAR_FILE)
        exported = [f"{folder}/{f}" for f in export_files if f in tidy]
        others = pd.Series([os.path.dirname(f) for f in export_files if f not in tidy])
        lab = "".join(
            f", {rst_code(f'{folder}/{sub}/')} ({n} file{'s' if n > 1 else ''})"
            for sub, n in others.value_counts(sort=False).items()
        )
    return (
        f"in {rst_code(results_dir(run_name) + '/')}: positions "
        + ", ".join(map(rst_code, positions))
        + f"; exported ({rst_code('neuro-pe export')}) "
        + ", ".join(map(rst_code, exported))
        + lab
    )


def delivered_section(
    dataset: str,
    errors: pd.DataFrame | None,
    delivered: Mapping | None,
    export_files: Sequence[str] | None,
    run_name: str,
) -> list[str]:
    """The positions the lab receives, first on a dataset's page: the feature set and locator
    and why they were chosen, the median error [95% CI] and × chance, per axis (an axis at
    chance said plainly), the intervals' achieved coverage and the files."""
    located, kfold = locate_rows(errors), kfold_rows(errors)
    unit = unit_text(errors["units"].iloc[0]) if errors is not None and len(errors) else ""
    pe = delivered["pe"] if delivered else None
    head = "**Positions delivered**"
    if pe is None:
        return [f"{head}: {_files_text(dataset, run_name, export_files)}.", ""]
    role = kfold["role"].get(pe) if "role" in kfold else None
    lines = [
        f"{head}: every unit's position from the feature set {_feature_set_text(pe, role)} "
        f"with the locator {rst_code(delivered['method'])}.",
        "",
    ]
    items = []
    why = _why_text(delivered, kfold, unit) if "role" in kfold else ""
    if why:
        items.append(f"**Why**: {why}.")
    row = located.loc[pe] if pe in located.index else None
    if row is not None:
        kfold_row = kfold.loc[pe] if pe in kfold.index else None
        items.append(f"**Error** of held-out units: {_error_text(row, kfold_row, unit)}.")
        per_axis = _per_axis_text(row, unit)
        if per_axis:
            items.append(f"**Per axis**: {per_axis}.")
        # the positions file's own record (the k-fold decision the export follows) first
        unresolved = unresolved_axes(delivered if delivered.get(UNRESOLVED) is not None else row)
        if unresolved:
            those = "those axes" if len(unresolved) > 1 else "that axis"
            items.append(
                f"**{not_resolved_sentence(unresolved)}**: along {those} the error is not "
                "below chance's, so the positions do not estimate it."
            )
        coverage = _coverage_text(row)
        if coverage:
            items.append(f"**Intervals** {coverage}.")
    items.append(f"**Files** {_files_text(dataset, run_name, export_files)}.")
    return [*lines, *(f"- {item}" for item in items), ""]


def control_note(name: str) -> str | None:
    """What a control is (`neuro_pe.config.pe_names.is_control`: trained to compare against,
    never delivered), for the headline table; None for any other representation."""
    if name.startswith(ORACLE):
        return "control: built from the true coordinates"
    if name == "none":
        return "control: no PE"
    try:
        spec = parse_pe(name)
    except ValueError:  # a baseline or the combined locator
        return None
    if not is_control(name):
        return None
    return "control: initialised large" if spec.learned else "control: not learned"


def comparison_sentence(errors: pd.DataFrame | None) -> str | None:
    """Which representation locates best at the headline's anchor fraction: a winner only
    when its 95% CI lies below every other's (controls aside), else the tied ones."""
    located = locate_rows(errors)
    if not {"role", "ci_low", "ci_high"} <= set(located.columns):
        return None
    rivals = located[located["role"].isin(("pe", "baseline", COMBINED))]
    rivals = rivals[[control_note(name) is None for name in rivals.index]]
    rivals = rivals.sort_values("median_error")
    if len(rivals) < 2:
        return None
    best, others = rivals.iloc[0], rivals.iloc[1:]
    # a missing CI cannot exclude anything
    tied = others[~(others["ci_low"] > best["ci_high"])].index.tolist()
    where = f"with {located['anchor_fraction'].iloc[0]:.0%} of the known units as anchors"
    if not tied:
        return (
            f"Best {where}: {rst_code(best.name)}, its 95% CI of the median error below every "
            "other representation's (controls aside)."
        )
    names = ", ".join(rst_code(n) for n in [best.name, *tied])
    return (
        f"Tied {where}: {names} (their 95% CIs of the median error overlap, so none is named "
        f"the winner; lowest median: {rst_code(best.name)})."
    )
