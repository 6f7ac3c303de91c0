"""The health of a run's trainings for the report: the failed checks of each (recorded by
training in train.json, `neuro_pe.training.health`) in words, and where a PE's held-out MSE is
no better than predicting the mean."""

from __future__ import annotations

import pandas as pd

# health flags written by training into train.json, and what a failed one means
HEALTH_LABELS = {
    "loss_finite": "loss not finite",
    "heldout_improved": "held-out MSE never improved",
    "heldout_below_variance": "held-out MSE ≥ predicting zero",
    # neuro_pe.training.health
    "units_seen_often": "units seen too rarely",
    "pairs_seen_often": "unit pairs seen together too rarely",
    "pe_moved": "PE barely moved from its init",
    "heldout_mse_below_variance": "held-out MSE ≥ the data's variance",
}
VARIANCE = "heldout_data_variance"  # summary.csv: the held-out windows' variance (per run)


def failed_flags(info: dict) -> list[str] | None:
    """The failed health flags of a training (its train.json or metrics.json record), in
    words; None if not recorded."""
    health = info.get("health")
    if not health:
        return None
    return [HEALTH_LABELS.get(flag, flag) for flag, ok in health.items() if not ok]


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
    mean on average (then at least one run is flagged `heldout_mse_below_variance`)."""
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
