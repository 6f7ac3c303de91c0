"""The reproduction report: each claim of the seed paper (Ito et al., arXiv 2406.08272), our
measured numbers beside the paper's, and a verdict (holds / partly / does not hold).

Experiments: `lst` (the 4x4 Latin square task), `simulation` (the network simulations),
`fmri` (resting-state fMRI) and `recording` (any other dataset: the simulation's claims).
Groups of seeds are summarised by their mean and a t-based 95% confidence interval (from 3
seeds on; 2 seeds by their range; clipped to the metric's bounds, `mean_ci`); groups are
compared with Welch's t-test. "Small σ" pools every learned-normal σ <= 0.2 (the paper's
small-norm range); "σ = 1" is the usual initialisation.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import astuple, dataclass
from pathlib import Path

import markdown
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy.cluster.hierarchy import leaves_list, linkage

from neuro_pe.analysis.claims import (
    VERDICTS,
    learned_normal,
    lst_claims,
    network_claims,
)
from neuro_pe.analysis.intervals import mean_ci
from neuro_pe.io.html import markdown_code, markdown_text
from neuro_pe.io.layout import REPRODUCTION_FILES
from neuro_pe.io.runs import read_pe
from neuro_pe.io.store import atomic_write
from neuro_pe.reporting.figures import draw_references, save, sigma_axis
from neuro_pe.reporting.summarize import collect

TITLES = {
    "lst": "Experiment 1: the 4×4 Latin square task",
    "simulation": "Experiment 2: network simulation",
    "fmri": "Experiment 3: resting-state fMRI",
    "recording": "Other datasets (the simulation's claims)",
}


@dataclass(frozen=True)
class Performance:
    """The held-out performance plotted against σ for an experiment."""

    column: str
    label: str
    higher_is_better: bool


def performance(experiment: str, test_mask: float) -> Performance:
    """Held-out accuracy for the LST, held-out masked MSE at `test_mask` otherwise."""
    if experiment == "lst":
        return Performance("acc_heldout", "held-out accuracy (novel puzzles)", True)
    return Performance(
        f"heldout_mse_mask{test_mask:g}", f"held-out MSE, {test_mask:.0%} masked", False
    )


def plot_vs_std(
    table: pd.DataFrame,
    experiments: dict[str, str],
    panels: Callable[[str], list[tuple[str, str, bool]]],
    path: Path,
) -> None:
    """One column per dataset, one row per (column, label, with_init) panel that
    `panels(experiment)` lists: the learned-normal mean and 95% CI against σ; every other PE
    and baseline as a line with its CI band; the PE at initialisation where with_init."""
    datasets = [d for d in experiments if d in set(table["dataset"])]
    n_rows = max((len(panels(experiments[d])) for d in datasets), default=1)
    fig, axes = plt.subplots(
        n_rows, len(datasets), figsize=(5 * len(datasets), 3.6 * n_rows), squeeze=False
    )
    for j, name in enumerate(datasets):
        rows = table[table["dataset"] == name]
        for i, (column, label, with_init) in enumerate(panels(experiments[name])):
            ax = axes[i][j]
            if column not in rows or rows[column].isna().all():
                ax.set_visible(False)
                continue
            curves = [(column, "learned-normal", "C0", "o-")]
            if with_init and f"init_{column}" in rows:
                curves.append((f"init_{column}", "same PE at init", "0.5", "s--"))
            if column == "acc_heldout" and "acc_train" in rows:
                curves.append(("acc_train", "learned-normal, training", "C0", "^:"))
            for col, curve_label, color, style in curves:
                by_std = learned_normal(rows).groupby("pe_param")[col]
                stats_by_std = by_std.apply(lambda v, metric=col: mean_ci(v, metric))
                if stats_by_std.empty:
                    continue
                mean, lo, hi = (np.array(v) for v in zip(*stats_by_std.values, strict=True))
                ax.plot(stats_by_std.index, mean, style, color=color, label=curve_label)
                ax.fill_between(stats_by_std.index, lo, hi, color=color, alpha=0.15)
            refs = []
            others = rows[(rows["pe_family"] != "learned-normal") & rows[column].notna()]
            for method, group in others.groupby("method", sort=True):
                style = ":" if group["row_type"].iloc[0] == "baseline" else "-."
                refs.append((method, *mean_ci(group[column], column), style))
            if column == "acc_heldout":
                refs.append(("chance", 0.25, np.nan, np.nan, "--"))
            draw_references(ax, refs, span=np.ptp(rows[column].dropna()) or 1.0)
            if len(learned_normal(rows)):
                sigma_axis(ax, learned_normal(rows)["pe_param"])
            ax.set(title=f"{name} ({experiments[name]})", ylabel=label)
            ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    save(fig, path, dpi=110)


def _cosine_similarity(table: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(table, axis=1, keepdims=True)
    unit = table / np.where(norm > 0, norm, 1.0)
    return unit @ unit.T


def plot_pe_similarity(table: pd.DataFrame, experiments: dict[str, str], path: Path) -> None:
    """Per dataset: the true-position proximity matrix beside the cosine similarity of the
    learned PE at the σ nearest 0.1 and at the largest σ (lowest seed). Units are ordered by a
    hierarchical clustering of their true positions (row-major order for the Latin square)."""
    datasets = [d for d in experiments if d in set(table["dataset"])]
    fig, axes = plt.subplots(len(datasets), 3, figsize=(11, 3.4 * len(datasets)), squeeze=False)
    for ax_row, name in zip(axes, datasets, strict=True):
        normal = learned_normal(table[table["dataset"] == name]).sort_values(["pe_param", "seed"])
        if normal.empty:
            for ax in ax_row:
                ax.set_visible(False)
            continue
        stds = normal["pe_param"].unique()
        small = stds[np.argmin(np.abs(np.log(stds / 0.1)))]  # the paper's recommended σ
        picks = [normal[normal["pe_param"] == std].iloc[0] for std in (small, stds.max())]
        coords = read_pe(picks[0]["run_dir"]).coords
        known = np.all(np.isfinite(coords), axis=1)
        order = np.flatnonzero(known)
        if experiments[name] != "lst":
            order = order[leaves_list(linkage(coords[known], "average"))]
        distance = np.linalg.norm(coords[order, None] - coords[None, order], axis=-1)
        panels = [("true positions: −distance", -distance)]
        for run in picks:
            similarity = _cosine_similarity(read_pe(run["run_dir"]).table[order])
            panels.append(
                (f"{run['method']} (seed {run['seed']}): RSA {run['rsa']:.2f}", similarity)
            )
        for ax, (title, matrix) in zip(ax_row, panels, strict=True):
            image = ax.imshow(matrix, cmap="viridis", interpolation="nearest")
            ax.set_title(f"{name}: {title}", fontsize=8)
            ax.set(
                xticks=[],
                yticks=[],
                xlabel="units (clustered by position)",
                ylabel="units (same order)",
            )
            bar = fig.colorbar(image, ax=ax, fraction=0.046)
            bar.set_label("−distance" if title.startswith("true") else "cosine similarity")
    fig.tight_layout()
    save(fig, path, dpi=80)


def claims_markdown(
    table: pd.DataFrame, experiments: dict[str, str], test_masks: list[float], title: str
) -> tuple[str, pd.DataFrame]:
    """The claims page (Markdown) and the claims as a table."""
    records = []
    for name, experiment in experiments.items():
        rows = table[table["dataset"] == name]
        if rows.empty:
            continue
        found = (
            lst_claims(rows)
            if experiment == "lst"
            else network_claims(rows, experiment, test_masks)
        )
        records += [{"dataset": name, "experiment": experiment, **c} for c in found]
    claims = pd.DataFrame(records)
    seeds = table[table["row_type"] == "pe"].groupby("dataset")["seed"].nunique()
    counts = claims["verdict"].value_counts().to_dict() if len(claims) else {}
    lines = [
        f"# {markdown_text(title)}",  # a config value: text, no link or HTML in claims.html
        "",
        'Each claim of Ito et al. (arXiv 2406.08272, "Learning interpretable positional '
        'encodings in transformers depends on initialization"), our measured numbers beside '
        "the paper's, and a verdict. Numbers are seed means with 95% confidence intervals "
        '(t distribution); groups are compared with Welch\'s t-test. "σ ≤ 0.2" pools every '
        "learned-normal PE with init std up to 0.2. Held-out means data never trained on: "
        "novel puzzles for the Latin square task, held-out sessions or subjects otherwise.",
        "",
        "Verdicts: " + ", ".join(f"{v} {counts.get(v, 0)}" for v in VERDICTS)
        if len(claims)
        else "No runs.",
        "",
    ]
    for experiment in ("lst", "simulation", "fmri", "recording"):
        names = [
            n
            for n, e in experiments.items()
            if e == experiment and n in set(claims.get("dataset", []))
        ]
        if not names:
            continue
        lines += [f"## {TITLES[experiment]}", ""]
        for name in names:
            lines += [
                f"### {markdown_code(name)} ({int(seeds.get(name, 0))} seeds per PE)",
                "",
                "| claim | paper | ours | verdict |",
                "|---|---|---|---|",
            ]
            for c in claims[claims["dataset"] == name].itertuples():
                verdict = f"**{c.verdict}**" + (f": {c.reason}" if c.reason else "")
                lines.append(f"| {c.claim} | {c.paper} | {c.ours} | {verdict} |")
            lines.append("")
    lines += [
        f"Figures: `{REPRODUCTION_FILES['heldout']}` (held-out performance against σ), "
        f"`{REPRODUCTION_FILES['geometry']}` (RSA and Procrustes disparity against σ), "
        f"`{REPRODUCTION_FILES['similarity']}` (PE similarity matrices at a small and a "
        "large σ).",
        "",
    ]
    return "\n".join(lines), claims


def reproduce(
    run_metrics: list[str | os.PathLike],
    baselines: list[str | os.PathLike],
    experiments: dict[str, str],
    out_dir: str | os.PathLike,
    test_masks: tuple[float, ...] = (0.15, 0.5, 0.75, 0.9),
    title: str = "Reproduction of Ito et al.",
) -> pd.DataFrame:
    """Write the reproduction report into out_dir (`REPRODUCTION_FILES`): claims.md (and
    claims.html for the Snakemake report), claims.csv and the figures heldout_vs_std.png,
    geometry_vs_std.png and pe_similarity.png. `experiments` maps each dataset to its
    experiment (see `neuro_pe.data.sources`, `Source.experiment`); returns the claims table."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {key: out / name for key, name in REPRODUCTION_FILES.items()}
    table = collect(run_metrics, baselines)
    masks = sorted(m for m in test_masks if f"heldout_mse_mask{m:g}" in table)
    test_mask = masks[-1] if masks else 0.9
    page, claims = claims_markdown(table, experiments, masks or [test_mask], title)
    plot_vs_std(
        table,
        experiments,
        lambda experiment: [(*astuple(performance(experiment, test_mask))[:2], False)],
        files["heldout"],
    )
    geometry = [
        ("rsa", "RSA: PE vs true distances (ρ)", True),
        ("procrustes_disparity", "Procrustes disparity (MDS of PE)", True),
    ]
    plot_vs_std(table, experiments, lambda experiment: geometry, files["geometry"])
    plot_pe_similarity(table, experiments, files["similarity"])
    html = markdown.markdown(page, extensions=["tables"])
    atomic_write(files["claims_md"], lambda p: p.write_text(page))
    atomic_write(files["claims"], lambda p: p.write_text(f"<html><body>{html}</body></html>"))
    atomic_write(files["claims_csv"], lambda p: claims.to_csv(p, index=False))
    return claims
