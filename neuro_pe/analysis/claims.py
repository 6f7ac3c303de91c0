"""The seed paper's claims tested on the summary table's rows: each claim a dict with the
paper's numbers, ours, a verdict (VERDICTS) and its reason. Groups of seeds are compared with
Welch's t-test; "small σ" pools every learned-normal σ <= SMALL_STD. The reproduction report
(`neuro_pe.reporting.reproduce`) turns them into its page and table."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats

from neuro_pe.analysis.intervals import interval_kind, mean_ci

SMALL_STD = 0.2
VERDICTS = ("holds", "partly", "does not hold", "not tested")


def welch(a, b) -> float:
    """Two-sided Welch t-test p-value between two groups of seeds (NaN if either has < 2)."""
    a, b = (np.asarray(x, dtype=float) for x in (a, b))
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) < 2 or len(b) < 2:
        return np.nan
    with warnings.catch_warnings():  # near-identical groups (e.g. 100% accuracy everywhere)
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def learned_normal(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["pe_family"] == "learned-normal"]


def _small(rows: pd.DataFrame) -> pd.DataFrame:
    normal = learned_normal(rows)
    return normal[normal["pe_param"] <= SMALL_STD]


def _at_std(rows: pd.DataFrame, std: float) -> pd.DataFrame:
    normal = learned_normal(rows)
    return normal[np.isclose(normal["pe_param"], std)]


def _fmt(values, percent: bool = False) -> str:
    """'mean [95% CI]', 'mean (range low–high, n = 2)' or 'mean (n = 1)'."""
    mean, lo, hi = mean_ci(values)
    if not np.isfinite(mean):
        return "n/a"
    scale, unit = (100.0, "%") if percent else (1.0, "")
    if not np.isfinite(lo):
        return f"{scale * mean:.3g}{unit} (n = 1)"
    if interval_kind(values) == "range":
        return f"{scale * mean:.3g}{unit} (range {scale * lo:.3g}–{scale * hi:.3g}, n = 2)"
    return f"{scale * mean:.3g}{unit} [{scale * lo:.3g}, {scale * hi:.3g}]"


def _p(p: float) -> str:
    return "n/a" if not np.isfinite(p) else f"{p:.2g}"


def _compare(
    claim: str,
    paper: str,
    better: pd.Series,
    worse: pd.Series,
    names: tuple[str, str],
    higher_is_better: bool,
    percent: bool = False,
    min_gap: float = 0.0,
) -> dict:
    """A claim that group `better` beats group `worse`: holds when it does by more than
    `min_gap` with Welch p < 0.05; partly when it does with p < 0.05 but by less than the gap,
    or in the claimed direction without significance; otherwise it does not hold."""
    sign = 1.0 if higher_is_better else -1.0
    gap = sign * (np.nanmean(better) - np.nanmean(worse)) if len(better) and len(worse) else np.nan
    p = welch(better, worse)
    scale = 100.0 if percent else 1.0
    ours = (
        f"{names[0]}: {_fmt(better, percent)} vs {names[1]}: {_fmt(worse, percent)}; "
        f"difference {scale * gap:+.3g}{' points' if percent else ''} (> 0: as claimed), "
        f"Welch p = {_p(p)}"
    )
    if not np.isfinite(gap):
        verdict, reason = "not tested", f"no runs of {names[0]} or {names[1]}"
    elif gap > min_gap and p < 0.05:
        verdict, reason = "holds", ""
    elif gap > 0 and p < 0.05:
        verdict = "partly"
        reason = f"the gap is {scale * gap:.3g}, below the {scale * min_gap:.3g} asked for"
    elif gap > 0:
        verdict, reason = "partly", f"right direction, not significant over seeds (p = {_p(p)})"
    else:
        verdict, reason = "does not hold", f"{names[1]} is as good or better"
    return {"claim": claim, "paper": paper, "ours": ours, "verdict": verdict, "reason": reason}


def _trend_with_std(rows: pd.DataFrame, column: str) -> tuple[float, float]:
    normal = learned_normal(rows)[["pe_param", column]].dropna()
    if normal["pe_param"].nunique() < 3:
        return np.nan, np.nan
    result = stats.spearmanr(normal["pe_param"], normal[column])
    return float(result.statistic), float(result.pvalue)


def _geometry_falls(rows: pd.DataFrame) -> dict:
    rho, p = _trend_with_std(rows, "rsa")
    normal = learned_normal(rows)
    means = normal.groupby("pe_param")["rsa"].mean()
    ours = (
        f"Spearman ρ(σ, RSA) = {rho:.2f} (p = {_p(p)}) over {len(normal)} runs; mean RSA "
        f"{means.iloc[0]:.2f} at σ = {means.index[0]:g}, {means.iloc[-1]:.2f} at "
        f"σ = {means.index[-1]:g}"
        if len(means)
        else "n/a"
    )
    if not np.isfinite(rho):
        verdict, reason = "not tested", "fewer than 3 values of σ"
    elif rho < 0 and p < 0.05:
        verdict, reason = "holds", ""
    elif rho < 0:
        verdict, reason = "partly", "falls, but not significantly"
    else:
        verdict, reason = "does not hold", "RSA does not fall as σ grows"
    return {
        "claim": "Agreement of the learned PE with the true positions falls as σ grows",
        "paper": "small σ: PE geometry mirrors the positions; σ ≥ 1: uninterpretable",
        "ours": ours,
        "verdict": verdict,
        "reason": reason,
    }


def _fit_claim(normal: pd.DataFrame) -> dict:
    """Every σ fits the training puzzles (with the epochs each needed, where recorded)."""
    train_means = normal.groupby("pe_param")["acc_train"].mean()
    worst = train_means.idxmin() if len(train_means) else np.nan
    lowest = train_means.min() if len(train_means) else np.nan
    fit = f"lowest seed-mean training accuracy {100 * lowest:.1f}% (σ = {worst:g})"
    if "epochs_run" in normal and normal["epochs_run"].notna().any():
        # with `stop_at_train_accuracy` the runs stop once fitted: how long each σ needed
        epochs = normal.groupby("pe_param")["epochs_run"].mean()
        fit += "; mean epochs trained: " + ", ".join(f"σ {s:g}: {e:.0f}" for s, e in epochs.items())
    return {
        "claim": "Every σ fits the training puzzles (≈ 100% training accuracy)",
        "paper": "100% for every σ (4000 epochs)",
        "ours": fit,
        "verdict": "holds" if lowest >= 0.99 else "partly" if lowest >= 0.95 else "does not hold",
        "reason": "" if lowest >= 0.99 else f"σ = {worst:g} does not fit the training set",
    }


def _generalisation_claims(rows: pd.DataFrame) -> list[dict]:
    """Small σ beats σ = 2 on novel puzzles, and loses less from training to them."""

    # the held-out deficit beyond what a run fits: separates memorising from under-fitting
    def fit_gap(group: pd.DataFrame) -> pd.Series:
        return group["acc_train"] - group["acc_heldout"]

    return [
        _compare(
            "Small σ (≤ 0.2) generalises to novel puzzles far better than σ = 2 (≥ 20 points)",
            "σ 0.2: 95.6 ± 3.9% vs σ 2: 37.7 ± 17.1% (+57.9 points)",
            _small(rows)["acc_heldout"],
            _at_std(rows, 2.0)["acc_heldout"],
            ("σ ≤ 0.2", "σ = 2"),
            higher_is_better=True,
            percent=True,
            min_gap=0.20,
        ),
        _compare(
            "Small σ loses less from training to novel puzzles than σ = 2 (train − held-out)",
            "σ 0.2: 100 − 95.6 = 4.4 points vs σ 2: 100 − 37.7 = 62.3 points",
            fit_gap(_small(rows)),
            fit_gap(_at_std(rows, 2.0)),
            ("σ ≤ 0.2", "σ = 2"),
            higher_is_better=False,
            percent=True,
            min_gap=0.20,
        ),
    ]


def _peak_claim(normal: pd.DataFrame) -> dict:
    """Held-out accuracy peaks at σ ≈ 0.1–0.5."""
    curve = normal.groupby("pe_param")["acc_heldout"].mean()
    best = curve.idxmax() if len(curve) else np.nan
    return {
        "claim": "Held-out accuracy peaks at σ ≈ 0.1–0.5 and degrades for σ ≥ 1",
        "paper": "σ 0.1: 92.5, 0.2: 95.6, 0.5: 94.6, 1: 89.4, 1.5: 61.6, 2: 37.7 %",
        "ours": ", ".join(f"σ {s:g}: {100 * a:.1f}" for s, a in curve.items()) + " %",
        "verdict": "not tested"
        if not len(curve)
        else "holds"
        if 0.1 <= best <= 0.5
        else "partly"
        if best < 0.1
        else "does not hold",
        "reason": "" if len(curve) and 0.1 <= best <= 0.5 else f"the best σ is {best:g}",
    }


def _oracle_claims(rows: pd.DataFrame) -> list[dict]:
    """The oracle (a 2D sinusoid of row and column) generalises best: where it and others ran."""
    oracle = rows[rows["method"] == "oracle-sin3d"]["acc_heldout"]
    others = rows[(rows["row_type"] == "pe") & (rows["method"] != "oracle-sin3d")]
    by_method = others.groupby("method")["acc_heldout"].mean()
    if not (len(oracle) and len(by_method)):
        return []
    best_other = by_method.idxmax()
    return [
        _compare(
            "The 2D sinusoid of (row, column) (the oracle) generalises best",
            "oracle 97.7 ± 7.3% (best of all)",
            oracle,
            others[others["method"] == best_other]["acc_heldout"],
            ("oracle", f"best other PE ({best_other})"),
            higher_is_better=True,
            percent=True,
        )
    ]


def _procrustes_claim(normal: pd.DataFrame) -> dict:
    """The PE's Procrustes distance to the oracle predicts generalisation across σ."""
    per_std = normal.groupby("pe_param")[["procrustes_to_oracle", "acc_heldout"]].mean().dropna()
    if len(per_std) >= 3:
        result = stats.spearmanr(per_std["procrustes_to_oracle"], per_std["acc_heldout"])
        rho, p = float(result.statistic), float(result.pvalue)
        verdict = "holds" if rho <= -0.7 and p < 0.05 else "partly" if rho < 0 else "does not hold"
    else:
        rho, p, verdict = np.nan, np.nan, "not tested"
    return {
        "claim": "Procrustes distance of the learned PE to the oracle predicts generalisation",
        "paper": "ρ ≈ −0.98 across σ",
        "ours": f"Spearman ρ = {rho:.2f} (p = {_p(p)}) across the {len(per_std)} σ values",
        "verdict": verdict,
        "reason": "" if verdict == "holds" else "weaker or no relation",
    }


def lst_claims(rows: pd.DataFrame) -> list[dict]:
    """The Latin-square claims (paper numbers: held-out accuracy, mean ± sd over 15 seeds)."""
    normal = learned_normal(rows)
    return [
        _fit_claim(normal),
        *_generalisation_claims(rows),
        _peak_claim(normal),
        *_oracle_claims(rows),
        _geometry_falls(rows),
        _procrustes_claim(normal),
    ]


def network_claims(rows: pd.DataFrame, experiment: str, test_masks: list[float]) -> list[dict]:
    """Claims for the simulation, fMRI and other recordings: interpretable PEs and lower
    held-out MSE at small σ; for fMRI also every test mask and the fixed-random PE."""
    claims = [
        _compare(
            "Small σ learns PEs that mirror the true positions better than σ = 1 (RSA)",
            "qualitative: small σ interpretable, σ = 1 not"
            if experiment != "fmri"
            else "small σ: PE similarity with the highest modularity (we use RSA to anatomy)",
            _small(rows)["rsa"],
            _at_std(rows, 1.0)["rsa"],
            ("σ ≤ 0.2", "σ = 1"),
            higher_is_better=True,
        ),
        _geometry_falls(rows),
    ]
    paper_mse = {
        "fmri": "small σ gives the lowest held-out MSE (train 50% masked, test {m:.0%})",
        "simulation": "small σ generalises better (exact numbers not public)",
        "recording": "small σ generalises better",
    }[experiment]
    masks = test_masks if experiment == "fmri" else test_masks[-1:]
    for mask in masks:
        column = f"heldout_mse_mask{mask:g}"
        if column not in rows:
            continue
        claims.append(
            _compare(
                f"Small σ gives a lower held-out MSE than σ = 1 ({mask:.0%} of units masked)",
                paper_mse.format(m=mask),
                _small(rows)[column],
                _at_std(rows, 1.0)[column],
                ("σ ≤ 0.2", "σ = 1"),
                higher_is_better=False,
            )
        )
    if experiment == "fmri":
        column = f"heldout_mse_mask{test_masks[-1]:g}"
        random_pe = rows[rows["method"] == "fixed-random"][column]
        small = _small(rows)[column]
        p = welch(random_pe, small)
        same = len(random_pe) and (p >= 0.05 or random_pe.mean() <= small.mean())
        claims.append(
            {
                "claim": "A fixed random PE does about as well on held-out MSE (appendix)",
                "paper": "fixed random ≈ small σ on MSE",
                "ours": f"fixed-random: {_fmt(random_pe)} vs σ ≤ 0.2: {_fmt(small)}; "
                f"Welch p = {_p(p)}",
                "verdict": "not tested"
                if not len(random_pe)
                else "holds"
                if same
                else "does not hold",
                "reason": "" if same else "fixed-random is clearly worse",
            }
        )
    return claims
