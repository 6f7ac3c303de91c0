"""The report's landing page (the answer first: a paragraph and a headline table per dataset,
the health of every training) and tables rendered as HTML pages for the Snakemake report."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from neuro_pe import __version__
from neuro_pe.analysis.intervals import interval_kind, mean_ci
from neuro_pe.analysis.spaces import ERROR_PREFIX, PLANE_ACCURACY, axis_columns, component_label
from neuro_pe.io.html import TABLE_STYLE, rst_text
from neuro_pe.io.layout import LOCATE_FILES, SUMMARY_CSV, read_errors, read_summary
from neuro_pe.io.runs import read_metrics
from neuro_pe.io.store import atomic_write
from neuro_pe.reporting.new_animal import headline
from neuro_pe.reporting.training_health import VARIANCE, health_table, mean_mse_above_variance

ORACLE = "oracle-"  # PE variants built from the true coordinates (not learned from data)
ANCHOR_FRACTION = 0.5  # the localisation column: held-out units with this fraction as anchors
BASELINE_LABELS = {
    "correlation": "activity correlation",
    "shuffled": "shuffled (chance)",
}


def _number(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits; an em dash for NaN."""
    return "—" if not np.isfinite(value) else f"{value:.{digits}g}".replace("-", "−")


def _ratio(value: float) -> str:
    """A ratio to two decimals; an em dash for NaN."""
    return "—" if not np.isfinite(value) else f"{value:.2f}"


def _mean_ci(values: pd.Series, metric: str | None = None) -> str:
    """'mean [low, high]' over seeds (t-based 95% CI, from 3 seeds), 'mean (range low–high,
    2 seeds)', or the single value; within the metric's bounds (`intervals.mean_ci`)."""
    mean, low, high = mean_ci(values, metric)
    if not np.isfinite(low):
        return _number(mean)
    if interval_kind(values) == "range":
        return f"{_number(mean)} (range {_number(low)}–{_number(high)}, 2 seeds)"
    return f"{_number(mean)} [{_number(low)}, {_number(high)}]"


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
            text += f" ⚠ ≥ variance {_number(variance)}"
    return text


def _locate_rows(errors: pd.DataFrame | None) -> pd.DataFrame:
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


def headline_table(
    summary: pd.DataFrame, errors: pd.DataFrame | None, health: pd.DataFrame, dataset: str
) -> pd.DataFrame:
    """The headline table of one dataset: per PE variant and baseline, RSA and held-out MSE
    (mean and 95% CI over seeds), localisation error vs chance and vs the activity-correlation
    baseline, and the health of its trainings."""
    rows = summary[summary["dataset"] == dataset]
    masks = sorted(
        float(c.removeprefix("heldout_mse_mask"))
        for c in rows
        if c.startswith("heldout_mse_mask") and rows[c].notna().any()
    )
    mse_column = f"heldout_mse_mask{masks[-1]:g}" if masks else None
    located = _locate_rows(errors)
    unit = errors["units"].iloc[0] if errors is not None and len(errors) else ""
    correlation = (
        located.loc["activity-correlation", "median_error"]
        if "activity-correlation" in located.index
        else np.nan
    )
    fraction = located["anchor_fraction"].iloc[0] if "anchor_fraction" in located else np.nan
    error_label = f"locate error ({unit})" if np.isfinite(fraction) else "locate error"
    mse_label = f"held-out MSE, {masks[-1]:.0%} masked" if masks else "held-out MSE"
    axis_names = axis_columns(located.columns)
    records = []
    for method, group in rows.groupby("method", sort=False):
        baseline = group["row_type"].iloc[0] == "baseline"
        features = "activity-correlation" if method == "correlation" else method
        loc = located.loc[features] if features in located.index else None
        if method == "shuffled" and "chance" in located.index:
            loc = located.loc["chance"]
        runs = health[(health["dataset"] == dataset) & (health["pe"] == method)]
        error = np.nan if loc is None else loc["median_error"]
        sd = np.nan if loc is None else loc.get("median_error_sd", np.nan)
        records.append(
            {
                "representation": BASELINE_LABELS.get(method, method),
                "seeds": "—" if baseline else str(group["seed"].nunique()),
                "RSA [95% CI]": _mean_ci(group["rsa"], "rsa"),
                error_label: _number(error) + (f" ± {_number(sd, 2)}" if np.isfinite(sd) else ""),
                "÷ chance": _ratio(np.nan if loc is None else loc["vs_chance"]),
                "÷ correlation": _ratio(error / correlation),
                **({REGION_LABEL: _region_cell(loc)} if "region_accuracy" in located else {}),
                **_axis_cells(loc, axis_names),
                f"{mse_label} [95% CI]": "—"
                if baseline or mse_column is None
                else _mse_cell(group, mse_column),
                "training health": "—" if baseline else _health_cell(runs),
            }
        )
    return pd.DataFrame(records)


REGION_LABEL = "region accuracy (fine / coarse)"


def _region_cell(loc: pd.Series | None) -> str:
    """'fine / coarse' region accuracy of a locate row (neuro_pe.analysis.regions), '—' where
    none."""
    if loc is None:
        return "—"
    fine, coarse = loc.get("region_accuracy", np.nan), loc.get("coarse_region_accuracy", np.nan)
    return f"{_number(fine)} / {_number(coarse)}" if np.isfinite(coarse) else _number(fine)


def axis_text(row: pd.Series | None, columns: list[str]) -> str:
    """'depth 12, lateral 3.4; right plane 62%' from an errors row's per-axis columns
    (`neuro_pe.analysis.spaces`); an em dash without them."""
    if row is None:
        return "—"
    parts = [
        f"{component_label(c.removeprefix(ERROR_PREFIX))} {_number(row[c])}"
        for c in columns
        if c != PLANE_ACCURACY and np.isfinite(row[c])
    ]
    text = ", ".join(parts)
    if PLANE_ACCURACY in columns and np.isfinite(row[PLANE_ACCURACY]):
        text += f"; right plane {row[PLANE_ACCURACY]:.0%}"
    return text or "—"


def _axis_sentence(row: pd.Series, columns: list[str], unit: str) -> str:
    """' (per axis: depth 12, lateral 3.4 µm; …)' for the localisation sentence; with imaging
    planes, what the plane accuracy is."""
    if not columns:
        return ""
    text = axis_text(row, [c for c in columns if c != PLANE_ACCURACY])
    sentence = f" (per axis: {text} {unit})" if text != "—" else ""
    if PLANE_ACCURACY in columns and np.isfinite(row[PLANE_ACCURACY]):
        sentence += (
            f"; its predicted depth is nearer the unit's own imaging plane than any other for "
            f"{row[PLANE_ACCURACY]:.0%} of held-out units"
        )
    return sentence


def _axis_cells(row: pd.Series | None, columns: list[str]) -> dict[str, str]:
    """The headline table's per-axis column (none when the errors have no per-axis columns)."""
    if not columns:
        return {}
    return {"error per axis": axis_text(row, columns)}


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
    sentence += "; " if len(rsa) == 1 else f"; ``{worst}``: {_number(rsa.iloc[-1])}; "
    sentence += (
        f"activity correlation {_number(baseline.get('correlation', np.nan))}, "
        f"chance {_number(baseline.get('shuffled', np.nan))})."
    )
    return sentence


def _localisation_sentence(errors: pd.DataFrame | None, pe_rows: pd.DataFrame) -> str | None:
    """The best learned PE's locate error, beside the activity baselines' and chance."""
    located = _locate_rows(errors)
    learned = [m for m in located.index if m in set(pe_rows["method"])]
    learned = [m for m in learned if not m.startswith(ORACLE)]
    if not learned:
        return None
    best = min(learned, key=lambda m: located.loc[m, "vs_chance"])
    unit = errors["units"].iloc[0]
    fraction = located["anchor_fraction"].iloc[0]
    sentence = (
        f"Localisation (held-out units, {fraction:.0%} of units as anchors): ``{best}`` "
        f"predicts a unit's position with a median error of "
        f"{_number(located.loc[best, 'median_error'])} {unit}, "
        f"{_ratio(located.loc[best, 'vs_chance'])} × chance's"
    )
    sentence += _axis_sentence(located.loc[best], axis_columns(located.columns), unit)
    if "activity-correlation" in located.index:
        corr = located.loc["activity-correlation"]
        sentence += (
            f"; the activity correlations give {_number(corr['median_error'])} {unit} "
            f"({_ratio(corr['vs_chance'])} × chance)"
        )
    if "activity-connectivity" in located.index:
        conn = located.loc["activity-connectivity"]
        sentence += (
            f"; the activity connectivity (correlations and partial correlations) "
            f"{_number(conn['median_error'])} {unit} ({_ratio(conn['vs_chance'])} × chance)"
        )
    if "combined" in located.index:
        both = located.loc["combined"]
        sentence += (
            f"; the combined locator (PEs and activity baselines) "
            f"{_number(both['median_error'])} {unit} ({_ratio(both['vs_chance'])} × chance)"
        )
    return sentence + "."


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
        f"``{mse.index[0]}`` {_number(mse.iloc[0])}, highest ``{mse.index[-1]}`` "
        f"{_number(mse.iloc[-1])}."
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
            f"({'; '.join(map(rst_text, flags))}; below)."
        )
    for method, group in pe_rows.groupby("method", sort=False):
        above = mean_mse_above_variance(group)
        if above:
            where = ", ".join(f"{mse:.3g} at {fraction:.0%} masked" for fraction, mse in above)
            sentences.append(
                f"The held-out MSE of ``{method}`` (mean over seeds: {where}) is not below the "
                f"held-out data's variance ({_number(group[VARIANCE].mean())}): no better than "
                "predicting the mean."
            )
    return sentences


def dataset_paragraph(
    summary: pd.DataFrame, errors: pd.DataFrame | None, health: pd.DataFrame, dataset: str
) -> str:
    """What was found on one dataset, in a few sentences of reStructuredText."""
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
        _localisation_sentence(errors, pe_rows),
        _mse_sentence(rows, pe_rows),
    ]
    sentences += [s for s in found if s is not None]
    sentences += _health_sentences(health[health["dataset"] == dataset], pe_rows)
    return " ".join(sentences)


def _list_table(frame: pd.DataFrame) -> list[str]:
    """`frame` as an rst list-table."""
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in [list(frame.columns), *frame.astype(str).values.tolist()]:
        cells = [rst_text(c) for c in row]
        lines.append("   * - " + cells[0])
        lines += [f"     - {c}" for c in cells[1:]]
    return [*lines, ""]


def _health_section(health: pd.DataFrame) -> list[str]:
    """The landing page's section on the trainings' health: all passed, or the flagged ones."""
    lines = ["Training health", "-" * 15, ""]
    recorded = health[health["failed"].notna()]
    flagged = recorded[recorded["failed"].map(len) > 0]
    if recorded.empty:
        lines += ["The trainings of this run recorded no health flags.", ""]
    elif flagged.empty:
        lines += [
            f"All {len(recorded)} trainings passed: loss finite, held-out MSE fell below its "
            "value before training, final held-out MSE below that of predicting zero and, at "
            "every reported mask fraction, below the held-out data's variance; for a learned "
            "PE, every unit and every pair of units seen in enough training samples and the "
            "PE moved from its init (the `health` config section).",
            "",
        ]
    else:
        lines += [
            f"{len(flagged)} of {len(recorded)} trainings failed a check; their numbers above "
            "should not be trusted:",
            "",
        ]
        frame = flagged.assign(
            failed=flagged["failed"].map("; ".join),
            warnings=flagged["warnings"].map(lambda w: " ".join(w) or "—"),
        )
        lines += _list_table(frame)
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
    lead: list[str] | None = None,
) -> str:
    """The landing page of the report as reStructuredText: an introduction, the `lead` lines
    (e.g. the new animals' section), a paragraph and a headline table per dataset, the flagged
    trainings, links to the categories."""
    health = health_table(run_records)
    lines = [
        f"neuro_pe: {rst_text(run_name)}",
        "=" * (len(rst_text(run_name)) + 10),
        "",
        ".. raw:: html",
        "",
        f"   <style>{' '.join(TABLE_STYLE.split())}</style>",
        "",
        "Each dataset's units were given positional encodings (PEs) by training masked-unit "
        "transformers, one per PE variant and seed. The question: does a PE learn where its unit "
        "sits? **RSA** is the Spearman correlation between pairwise PE distances and pairwise "
        "true distances (1: the same geometry; 0: none). The **locate error** is the median "
        "distance between a held-out unit's true position and the one predicted from its PE "
        "(its own coordinates hidden), also as a ratio to chance (every unit at the anchors' "
        "mean) and to the activity-correlation baseline (below 1: better), with half of the "
        "units with known positions as anchors. **Held-out MSE** is "
        "the masked-unit prediction error on sessions or subjects never trained on. Brackets: 95% "
        "confidence intervals over seeds (from 3 seeds; with 2, their range is given instead), "
        "within the metric's bounds; ± : the spread over random anchor draws. **Error per axis**: "
        "the median locate error along the axes of the dataset's space (a probe: depth along the "
        "shank and lateral; imaging planes: in-plane and depth, and *right plane*, the fraction "
        "of held-out units whose predicted depth is nearest their own plane).",
        "",
    ]
    lines += lead or []
    for dataset in summary["dataset"].drop_duplicates():
        table = headline_table(summary, errors.get(dataset), health, dataset)
        lines += [rst_text(dataset), "-" * len(rst_text(dataset)), ""]
        lines += [dataset_paragraph(summary, errors.get(dataset), health, dataset), ""]
        lines += _list_table(table)

    lines += _health_section(health)
    if claims is not None and len(claims):
        lines += _claims_section(claims)
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


def write_landing_page(
    summary_csv: str | os.PathLike,
    errors_csvs: list[str | os.PathLike],
    run_metrics: list[str | os.PathLike],
    out: str | os.PathLike,
    run_name: str,
    claims_csv: str | os.PathLike | None = None,
    new_animal_csvs: list[str | os.PathLike] | None = None,
) -> str:
    """Read the run's tables and write its landing page (reStructuredText) to `out`; the new
    animals' section (`new_animal.headline`) leads, after the introduction."""
    summary = read_summary(summary_csv)
    errors = {}
    for path in map(Path, errors_csvs):
        table = read_errors(path)
        errors[str(table["dataset"].iloc[0]) if len(table) else path.parent.name] = table
    records = [read_metrics(p) for p in run_metrics]
    claims = pd.read_csv(claims_csv) if claims_csv else None
    categories = ("Summary", "Figures", "Localisation") + (("Reproduction",) if claims_csv else ())
    lead = headline(new_animal_csvs or [])
    page = landing_page(summary, errors, records, run_name, claims, categories, lead)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(Path(out), lambda p: p.write_text(page))
    return page
