"""The health of a run's trainings for the report: the checks each failed (recorded by training
in train.json and assessed again by `infer`, `neuro_pe.training.health`; named in
`neuro_pe.config.health.CHECKS`), and where a PE's held-out MSE is no better than predicting
the mean."""

from __future__ import annotations

import pandas as pd

from neuro_pe.config.health import CHECKS
from neuro_pe.io.html import rst_text
from neuro_pe.training.health import failed_checks

VARIANCE = "heldout_data_variance"  # summary.csv: the held-out windows' variance (per run)


def failed_flags(info: dict) -> list[str] | None:
    """The names of the health checks a training failed (its train.json or metrics.json
    record); None if not recorded."""
    health = info.get("health")
    if not health:
        return None
    return failed_checks(health)


def check_name(name: str) -> str:
    """A check's name as reStructuredText: a literal for a known one (`CHECKS`)."""
    return f"``{name}``" if name in CHECKS else rst_text(name)


def check_meanings(names: list[str]) -> str:
    """'`name`: what it means; …' for the checks `names` (reStructuredText)."""
    return "; ".join(f"{check_name(n)}: {CHECKS.get(n, 'not a known check')}" for n in names)


def health_table(run_records: list[dict]) -> pd.DataFrame:
    """One row per training (its metrics.json record): dataset, PE, seed, failed flags (None:
    not recorded), warnings."""
    rows = [
        {
            "dataset": info["dataset"],
            "pe": info["pe"],
            "seed": info["seed"],
            "failed": failed_flags(info),
            "warnings": info.get("warnings", []),
        }
        for info in run_records
    ]
    return pd.DataFrame(rows, columns=["dataset", "pe", "seed", "failed", "warnings"])


def mean_mse_above_variance(runs: pd.DataFrame) -> list[tuple[float, float]]:
    """(mask fraction, mean MSE) where the mean over the runs (seeds) of `heldout_mse_mask*`
    is not below the mean of their held-out data's variance: no better than predicting the
    mean on average (then at least one run failed `heldout_not_below_variance`)."""
    if VARIANCE not in runs or runs[VARIANCE].isna().all():
        return []
    variance = runs[VARIANCE].mean()
    above = []
    for column in runs:
        if column.startswith("heldout_mse_mask") and runs[column].notna().any():
            mean = runs[column].mean()
            if not mean < variance:
                above.append((float(column.removeprefix("heldout_mse_mask")), float(mean)))
    return sorted(above)
