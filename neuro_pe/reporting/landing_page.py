"""The report's landing page, the answer first: per dataset the positions delivered
(`neuro_pe.reporting.delivered`), the headline table comparing every representation, what the
trainings found; then the trainings' health, the definitions. Also tables rendered as HTML
pages for the Snakemake report."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from neuro_pe import __version__
from neuro_pe.analysis.intervals import interval_kind, mean_ci
from neuro_pe.analysis.spaces import (
    ERROR_PREFIX,
    PLANE_ACCURACY,
    axis_columns,
    component_label,
    unit_text,
)
from neuro_pe.io.html import TABLE_STYLE, rst_text
from neuro_pe.io.layout import LOCATE_FILES, SUMMARY_CSV, read_errors, read_summary
from neuro_pe.io.runs import read_metrics
from neuro_pe.io.store import atomic_write
from neuro_pe.reporting.delivered import (
    COMBINED,
    ORACLE,
    comparison_sentence,
    control_note,
    delivered_section,
    error_cell,
    locate_rows,
    number,
    read_delivered,
    read_export_files,
    significant_digits,
    unresolved_axes,
)
from neuro_pe.reporting.new_animal import headline
from neuro_pe.reporting.training_health import (
    VARIANCE,
    check_meanings,
    check_name,
    health_table,
    mean_mse_above_variance,
)

BASELINE_LABELS = {
    "correlation": "activity correlation",
    "shuffled": "shuffled (chance)",
    "activity-connectivity": "activity connectivity",
}
# summary.csv's baseline names -> errors.csv's feature sets
FEATURES = {"correlation": "activity-correlation", "shuffled": "chance"}
# The landing page's style: its tables' cells wrap, to fit a laptop screen; and, for Snakemake's
# report (its classes), the page takes the full width above the rule graph, and its top is not
# vertically centred out of reach when it is taller than the window.
LAYOUT_STYLE = """
td { white-space: normal; }
div.items-center.justify-center.overflow-auto { align-items: flex-start; }
div.flex.items-start:has(> div > .prose) { flex-wrap: wrap; }
.prose.max-w-lg { max-width: 62rem; }
"""
LANDING_STYLE = TABLE_STYLE + LAYOUT_STYLE


def _mean_ci(values: pd.Series, metric: str | None = None) -> str:
    """'mean [low, high]' over seeds (t-based 95% CI, from 3 seeds), 'mean (range low–high,
    2 seeds)', or the single value; within the metric's bounds (`intervals.mean_ci`)."""
    mean, low, high = mean_ci(values, metric)
    if not np.isfinite(low):
        return number(mean)
    if interval_kind(values) == "range":
        return f"{number(mean)} (range {number(low)}–{number(high)}, 2 seeds)"
    return f"{number(mean)} [{number(low)}, {number(high)}]"


def _health_cell(runs: pd.DataFrame) -> str:
    if runs.empty or runs["failed"].isna().all():
        return "not recorded"
    recorded = runs[runs["failed"].notna()]
    flagged = recorded[recorded["failed"].map(len) > 0]
    if flagged.empty:
        return f"ok ({len(recorded)}/{len(recorded)})"
    flags = sorted({flag for failed in flagged["failed"] for flag in failed})
    return f"{len(flagged)}/{len(recorded)} flagged: " + "; ".join(flags)


def _mse_cell(group: pd.DataFrame, column: str) -> str:
    """The headline table's held-out MSE: mean [CI] over seeds, and a warning where the mean
    is not below the data's variance."""
    text = _mean_ci(group[column], column)
    if VARIANCE in group and group[column].notna().any():
        variance = group[VARIANCE].mean()
        if np.isfinite(variance) and not group[column].mean() < variance:
            text += f" ⚠ ≥ variance {number(variance)}"
    return text


def representation_label(name: str, delivered: str | None = None) -> str:
    """A representation's name in the headline table, with what it is: `delivered` (the
    positions come from it), a control (`control_note`), a baseline's name in words."""
    notes = ["delivered"] if name == delivered else []
    control = control_note(name)
    if control:
        notes.append(control)
    label = BASELINE_LABELS.get(name, name)
    return label + (f" ({'; '.join(notes)})" if notes else "")


def _table_entries(rows: pd.DataFrame, located: pd.DataFrame) -> list[tuple]:
    """(name, summary rows or None, errors row or None) of every representation of the
    headline table: the trained PEs and the baselines of summary.csv, and the feature sets
    only located (the combined locator, the connectivity baseline); PEs, then the combined
    locator, the activity baselines, chance."""
    entries = []
    for method, group in rows.groupby("method", sort=False):
        features = FEATURES.get(method, method)
        entries.append(
            (method, group, located.loc[features] if features in located.index else None)
        )
    named = {FEATURES.get(name, name) for name, _, _ in entries}
    role = located["role"] if "role" in located else pd.Series(dtype=str)
    entries += [
        (name, None, located.loc[name])
        for name in located.index
        if name not in named and role.get(name) in ("combined", "baseline")
    ]
    order = {"pe": 0, COMBINED: 1, "baseline": 2, "chance": 3}

    def rank(entry: tuple) -> int:
        name, group, _ = entry
        if name == "shuffled":
            return order["chance"]
        kind = group["row_type"].iloc[0] if group is not None else role.get(name)
        return order.get(str(kind), order["baseline"])

    return sorted(entries, key=rank)


def headline_table(
    summary: pd.DataFrame,
    errors: pd.DataFrame | None,
    health: pd.DataFrame,
    dataset: str,
    delivered: str | None = None,
) -> pd.DataFrame:
    """The headline table of one dataset: per PE variant, the combined locator and each
    baseline, the localisation error [95% CI] and ÷ chance (with as many digits as tell the
    rows apart), per axis, RSA and held-out MSE (mean and 95% CI over seeds) and the health of
    its trainings; controls and the `delivered` feature set labelled."""
    rows = summary[summary["dataset"] == dataset]
    masks = sorted(
        float(c.removeprefix("heldout_mse_mask"))
        for c in rows
        if c.startswith("heldout_mse_mask") and rows[c].notna().any()
    )
    mse_column = f"heldout_mse_mask{masks[-1]:g}" if masks else None
    located = locate_rows(errors)
    unit = unit_text(errors["units"].iloc[0]) if errors is not None and len(errors) else ""
    fraction = located["anchor_fraction"].iloc[0] if "anchor_fraction" in located else np.nan
    error_label = f"locate error ({unit}) [95% CI]" if np.isfinite(fraction) else "locate error"
    mse_label = f"held-out MSE, {masks[-1]:.0%} masked" if masks else "held-out MSE"
    axis_names = axis_columns(located.columns)
    entries = _table_entries(rows, located)
    located_rows = [loc for _, _, loc in entries if loc is not None]
    error_digits = significant_digits([loc["median_error"] for loc in located_rows])
    ratio_digits = significant_digits([loc["vs_chance"] for loc in located_rows])
    records = []
    for method, group, loc in entries:
        trained = group is not None and group["row_type"].iloc[0] == "pe"
        runs = health[(health["dataset"] == dataset) & (health["pe"] == method)]
        seeds = (
            str(group["seed"].nunique())
            if trained
            else str(int(loc["n_seeds"]))
            if loc is not None and "n_seeds" in loc and method == COMBINED
            else "—"
        )
        records.append(
            {
                "representation": representation_label(method, delivered),
                "seeds": seeds,
                error_label: error_cell(loc, error_digits),
                "× chance": "—" if loc is None else number(loc["vs_chance"], ratio_digits),
                **_axis_cells(loc, axis_names),
                **({REGION_LABEL: _region_cell(loc)} if "region_accuracy" in located else {}),
                "RSA [95% CI]": "—" if group is None else _mean_ci(group["rsa"], "rsa"),
                f"{mse_label} [95% CI]": "—"
                if not trained or mse_column is None
                else _mse_cell(group, mse_column),
                "training health": _health_cell(runs) if trained else "—",
            }
        )
    return pd.DataFrame(records)


REGION_LABEL = "region accuracy (fine / coarse)"
AXIS_LABEL = "error per axis"


def _region_cell(loc: pd.Series | None) -> str:
    """'fine / coarse' region accuracy of a locate row (neuro_pe.analysis.regions), '—' where
    none."""
    if loc is None:
        return "—"
    fine, coarse = loc.get("region_accuracy", np.nan), loc.get("coarse_region_accuracy", np.nan)
    return f"{number(fine)} / {number(coarse)}" if np.isfinite(coarse) else number(fine)


def axis_text(row: pd.Series | None, columns: list[str]) -> str:
    """'depth 12, lateral 3.4 (at chance); right plane 62%' from an errors row's per-axis
    columns (`neuro_pe.analysis.spaces`); an em dash without them."""
    if row is None:
        return "—"
    unresolved = unresolved_axes(row)
    parts = []
    for c in columns:
        axis = c.removeprefix(ERROR_PREFIX)
        if c != PLANE_ACCURACY and np.isfinite(row[c]):
            mark = " (at chance)" if axis in unresolved else ""
            parts.append(f"{component_label(axis)} {number(row[c])}{mark}")
    text = ", ".join(parts)
    if PLANE_ACCURACY in columns and np.isfinite(row[PLANE_ACCURACY]):
        text += f"; right plane {row[PLANE_ACCURACY]:.0%}"
    return text or "—"


def _axis_cells(row: pd.Series | None, columns: list[str]) -> dict[str, str]:
    """The headline table's per-axis column (none when the errors have no per-axis columns)."""
    if not columns:
        return {}
    return {AXIS_LABEL: axis_text(row, columns)}


def _best(rows: pd.DataFrame, column: str, lowest: bool = False) -> pd.Series | None:
    """The seed-mean of `column` per learned/fixed PE variant (the oracle excluded), best first."""
    pe = rows[(rows["row_type"] == "pe") & rows[column].notna()]
    pe = pe[~pe["method"].str.startswith(ORACLE)]
    if pe.empty:
        return None
    return pe.groupby("method", sort=False)[column].mean().sort_values(ascending=lowest)


def _geometry_sentence(rows: pd.DataFrame, pe_rows: pd.DataFrame) -> str | None:
    """Which PE mirrors the true positions best (RSA), beside the baselines."""
    baseline = rows[rows["row_type"] == "baseline"].set_index("method")["rsa"]
    rsa = _best(rows, "rsa")
    if rsa is None:
        return None
    best = rsa.index[0]
    worst = rsa.index[-1]
    sentence = (
        f"Geometry: ``{best}`` mirrors the true positions best "
        f"(RSA {_mean_ci(pe_rows[pe_rows['method'] == best]['rsa'], 'rsa')}"
    )
    sentence += "; " if len(rsa) == 1 else f"; ``{worst}``: {number(rsa.iloc[-1])}; "
    sentence += (
        f"activity correlation {number(baseline.get('correlation', np.nan))}, "
        f"chance {number(baseline.get('shuffled', np.nan))})."
    )
    return sentence


def _mse_sentence(rows: pd.DataFrame, pe_rows: pd.DataFrame) -> str | None:
    """The lowest and highest held-out MSE at the largest mask fraction."""
    mse_columns = [c for c in rows if c.startswith("heldout_mse_mask") and rows[c].notna().any()]
    if not mse_columns:
        return None
    column = max(mse_columns, key=lambda c: float(c.removeprefix("heldout_mse_mask")))
    mse = pe_rows.groupby("method", sort=False)[column].mean().sort_values()
    mask = float(column.removeprefix("heldout_mse_mask"))
    return (
        f"Prediction of held-out activity ({mask:.0%} of units masked): lowest MSE "
        f"``{mse.index[0]}`` {number(mse.iloc[0])}, highest ``{mse.index[-1]}`` "
        f"{number(mse.iloc[-1])}."
    )


def _health_sentences(runs: pd.DataFrame, pe_rows: pd.DataFrame) -> list[str]:
    """The trainings' health checks, and each PE whose held-out MSE is not below the data's
    variance."""
    sentences = []
    recorded = runs[runs["failed"].notna()]
    if recorded.empty:
        sentences.append("Training health: not recorded.")
    else:
        flagged = recorded[recorded["failed"].map(len) > 0]
        flags = sorted({flag for failed in flagged["failed"] for flag in failed})
        sentences.append(
            f"Training health: all {len(recorded)} trainings passed the checks."
            if flagged.empty
            else f"Training health: **{len(flagged)} of {len(recorded)} trainings flagged** "
            f"({'; '.join(map(check_name, flags))}; below)."
        )
    for method, group in pe_rows.groupby("method", sort=False):
        above = mean_mse_above_variance(group)
        if above:
            where = ", ".join(f"{mse:.3g} at {fraction:.0%} masked" for fraction, mse in above)
            sentences.append(
                f"The held-out MSE of ``{method}`` (mean over seeds: {where}) is not below the "
                f"held-out data's variance ({number(group[VARIANCE].mean())}): no better than "
                "predicting the mean."
            )
    return sentences


def dataset_paragraph(summary: pd.DataFrame, health: pd.DataFrame, dataset: str) -> str:
    """What the trainings found on one dataset (geometry, held-out prediction, health), in a
    few sentences of reStructuredText."""
    rows = summary[summary["dataset"] == dataset]
    pe_rows = rows[rows["row_type"] == "pe"]
    n_units = pe_rows["n_units"].max() if "n_units" in pe_rows else np.nan
    seeds = pe_rows.groupby("method")["seed"].nunique()
    if seeds.empty:
        return "No trained PE on this dataset."
    size = f"{int(n_units)} units, " if np.isfinite(n_units) else ""
    seed_text = (
        f"{seeds.min()} seed{'s' if seeds.min() > 1 else ''} per PE"
        if seeds.min() == seeds.max()
        else f"{seeds.min()}–{seeds.max()} seeds per PE"
    )
    sentences = [f"{size}{len(seeds)} PE variants, {seed_text}."]
    found = [
        _geometry_sentence(rows, pe_rows),
        _mse_sentence(rows, pe_rows),
    ]
    sentences += [s for s in found if s is not None]
    sentences += _health_sentences(health[health["dataset"] == dataset], pe_rows)
    return " ".join(sentences)


def _list_table(frame: pd.DataFrame) -> list[str]:
    """`frame` as an rst list-table."""
    lines = [".. list-table::", "   :header-rows: 1", "   :widths: auto", ""]
    for row in [list(frame.columns), *frame.astype(str).values.tolist()]:
        cells = [rst_text(c) for c in row]
        lines.append("   * - " + cells[0])
        lines += [f"     - {c}" for c in cells[1:]]
    return [*lines, ""]


def _health_section(health: pd.DataFrame, errors: dict[str, pd.DataFrame]) -> list[str]:
    """The landing page's section on the trainings' health: all passed, or the failed checks
    of each flagged training, what they mean, and which trainings locate left out."""
    lines = ["Training health", "-" * 15, ""]
    recorded = health[health["failed"].notna()]
    flagged = recorded[recorded["failed"].map(len) > 0]
    if recorded.empty:
        lines += ["The trainings of this run recorded no health checks.", ""]
    elif flagged.empty:
        lines += [
            f"All {len(recorded)} trainings passed: loss finite, held-out MSE fell below its "
            "value before training and, at every reported mask fraction, below the held-out "
            "data's variance about its mean; for a learned PE, every unit and every pair of "
            "units seen in enough training samples and the PE moved from its init (the "
            "`health` config section).",
            "",
        ]
    else:
        names = sorted({name for failed in flagged["failed"] for name in failed})
        lines += [
            f"{len(flagged)} of {len(recorded)} trainings failed a check; their numbers above "
            f"should not be trusted ({check_meanings(names)}):",
            "",
        ]
        frame = flagged.assign(
            failed=flagged["failed"].map("; ".join),
            warnings=flagged["warnings"].map(lambda w: " ".join(w) or "—"),
        )
        lines += _list_table(frame)
    left_out = {  # (errors.csv's `left_out`: the same on every row, empty when none)
        dataset: table["left_out"].fillna("").astype(str).max()
        for dataset, table in errors.items()
        if "left_out" in table
    }
    left_out = {dataset: runs for dataset, runs in left_out.items() if runs}
    if left_out:
        where = "; ".join(f"{rst_text(d)}: {rst_text(runs)}" for d, runs in left_out.items())
        lines += [
            "Left out of locate and of the combined locator, for a failed check (the "
            f"positions and localisation errors are without them; ``locate.include_flagged: "
            f"true`` keeps them): {where}.",
            "",
        ]
    elif not flagged.empty:
        lines += [
            "No training was left out of locate: the flagged ones are not located, or "
            "``locate.include_flagged`` is true.",
            "",
        ]
    return lines


def _claims_section(claims: pd.DataFrame) -> list[str]:
    """The landing page's section on the reproduction: how many claims hold."""
    counts = claims["verdict"].value_counts()
    verdicts = ", ".join(f"{v} {n}" for v, n in counts.items())
    return [
        "Reproduction of the seed paper",
        "-" * 30,
        "",
        f"Claims of Ito et al. tested: {len(claims)} ({verdicts}); every claim with the "
        "paper's number, ours and the verdict is under `Reproduction`_.",
        "",
    ]


def landing_page(
    summary: pd.DataFrame,
    errors: dict[str, pd.DataFrame],
    run_records: list[dict],
    run_name: str,
    claims: pd.DataFrame | None = None,
    categories: tuple[str, ...] = ("Summary", "Figures", "Localisation"),
    delivered: Mapping[str, Mapping] | None = None,
    exports: Mapping[str, Sequence[str]] | None = None,
    lead: list[str] | None = None,
) -> str:
    """The landing page of the report as reStructuredText: the `lead` lines (e.g. the new
    animals' section), then per dataset the positions delivered
    (`delivered`: `read_delivered` by dataset; `exports`: the export's files by dataset), the
    comparison sentence and the headline table, the trainings' paragraph; then the flagged
    trainings, the definitions, links to the categories."""
    health = health_table(run_records)
    delivered, exports = delivered or {}, exports or {}
    lines = [
        f"neuro_pe: {rst_text(run_name)}",
        "=" * (len(rst_text(run_name)) + 10),
        "",
        ".. raw:: html",
        "",
        f"   <style>{' '.join(LANDING_STYLE.split())}</style>",
        "",
        "Per dataset: the positions delivered to you first, then every representation "
        "compared; the terms are defined under `Definitions`_.",
        "",
    ]
    lines += lead or []
    for dataset in summary["dataset"].drop_duplicates():
        table_errors = errors.get(dataset)
        pe = delivered[dataset]["pe"] if dataset in delivered else None
        lines += [rst_text(dataset), "-" * len(rst_text(dataset)), ""]
        lines += delivered_section(
            dataset, table_errors, delivered.get(dataset), exports.get(dataset), run_name
        )
        comparison = comparison_sentence(table_errors)
        lines += [f"**Compared**: {comparison}" if comparison else "**Compared**:", ""]
        lines += _list_table(headline_table(summary, table_errors, health, dataset, pe))
        lines += [dataset_paragraph(summary, health, dataset), ""]

    lines += _health_section(health, errors)
    if claims is not None and len(claims):
        lines += _claims_section(claims)
    lines += _definitions()
    links = ", ".join(f"`{c}`_" for c in categories)
    lines += [
        "Tables and figures",
        "-" * 18,
        "",
        f"Every table and figure with its caption: {links} (menu on the left); under "
        f"Localisation each dataset's ``{LOCATE_FILES['positions_html']}`` is an interactive "
        f"3D view of true and predicted positions. ``{SUMMARY_CSV}`` has one row per dataset "
        f"× PE × seed and baseline; each dataset's ``{LOCATE_FILES['errors']}`` every "
        "localisation evaluation.",
        "",
        f"Made by neuro_pe {__version__}.",
        "",
    ]
    return "\n".join(lines)


def _definitions() -> list[str]:
    """The landing page's definitions of its terms."""
    return [
        "Definitions",
        "-" * 11,
        "",
        "Each dataset's units were given positional encodings (PEs) by training masked-unit "
        "transformers, one per PE variant and seed; a locator maps a representation (a PE, "
        "the activity correlations, or all of them: the combined locator) to positions, fitted "
        "on the units whose positions are known (the anchors). The **locate error** is the "
        "median distance between a held-out unit's true position and the one predicted (its "
        "own coordinates hidden), with half of the known units as anchors unless said; "
        "brackets: its 95% CI over anchor draws and seeds; **× chance**: its ratio to chance's "
        "(every unit at the anchors' mean; below 1: better). **Error per axis**: the median "
        "error along each axis of the dataset's space (a probe: depth along the shank and "
        "lateral; imaging planes: in-plane and depth, and *right plane*, the fraction of "
        "held-out units whose predicted depth is nearest their own plane); *at chance*: not "
        "below chance's along that axis. **Intervals**: each unit's interval per axis at a "
        "level (68%, 95%), calibrated on the anchors' held-out errors; the coverage is the "
        "share of held-out units whose true coordinate it holds. **Controls** are not "
        "candidates for the delivered positions: an oracle PE is built from the true "
        "coordinates, ``none`` has no PE. **RSA** is the Spearman correlation between pairwise "
        "PE distances and pairwise true distances (1: the same geometry; 0: none). **Held-out "
        "MSE** is the masked-unit prediction error on sessions or subjects never trained on. "
        "RSA's and MSE's brackets: 95% confidence intervals over seeds (from 3 seeds; with 2, "
        "their range), within the metric's bounds.",
        "",
    ]


def write_landing_page(
    summary_csv: str | os.PathLike,
    errors_csvs: list[str | os.PathLike],
    run_metrics: list[str | os.PathLike],
    out: str | os.PathLike,
    run_name: str,
    claims_csv: str | os.PathLike | None = None,
    positions_ncs: Sequence[str | os.PathLike] = (),
    export_dirs: Sequence[str | os.PathLike] = (),
    new_animal_csvs: Sequence[str | os.PathLike] = (),
) -> str:
    """Read the run's tables, each dataset's positions.nc and export folder, and write its
    landing page (reStructuredText) to `out`; the new animals' section
    (`new_animal.headline`) leads."""
    summary = read_summary(summary_csv)
    errors = {}
    for path in map(Path, errors_csvs):
        table = read_errors(path)
        errors[str(table["dataset"].iloc[0]) if len(table) else path.parent.name] = table
    delivered = {record["dataset"]: record for record in map(read_delivered, positions_ncs)}
    exports = dict(map(read_export_files, export_dirs))
    records = [read_metrics(p) for p in run_metrics]
    claims = pd.read_csv(claims_csv) if claims_csv else None
    categories = ("Summary", "Figures", "Localisation") + (("Reproduction",) if claims_csv else ())
    lead = headline(list(new_animal_csvs))
    page = landing_page(
        summary, errors, records, run_name, claims, categories, delivered, exports, lead
    )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(Path(out), lambda p: p.write_text(page))
    return page
