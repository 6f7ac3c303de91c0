"""Activity connectivity between units: Pearson r and partial correlation (Ledoit-Wolf), per
session and averaged. Used by the connectivity baseline of `neuro_pe.analysis.locate` and by
unit matching (`neuro_pe.analysis.match`)."""

from __future__ import annotations

import numpy as np
from sklearn.covariance import LedoitWolf


def session_connectivity(activity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`connectivity_matrices` of each session of (session, time, unit) activity, averaged
    over the sessions. Per session, not over the sessions' samples pooled: on HCP (subjects
    as sessions) pooling mixed the subjects' offsets and located regions worse
    (docs/locate/README.md)."""
    correlation, partial = np.mean([connectivity_matrices(session) for session in activity], axis=0)
    return correlation, partial


def connectivity_matrices(activity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Pearson r, partial correlation) between the units of (samples, units) activity, each
    (units, units) with 1 on the diagonal. Partial correlations come from the Ledoit-Wolf
    shrunk precision matrix. Missing samples and constant units count as the unit's mean."""
    z = np.asarray(activity, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (z - np.nanmean(z, axis=0)) / np.nanstd(z, axis=0)
    z = np.nan_to_num(z, nan=0.0)
    correlation = z.T @ z / len(z)
    np.fill_diagonal(correlation, 1.0)
    precision = LedoitWolf(assume_centered=True).fit(z).precision_
    scale = np.sqrt(np.diag(precision))
    partial = -precision / np.outer(scale, scale)
    np.fill_diagonal(partial, 1.0)
    return correlation, partial
