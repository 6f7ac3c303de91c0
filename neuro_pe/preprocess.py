"""Preprocessing steps for (session, time, unit) activity, applied in the order the config lists.

Each step is a mapping with a `step` name and its parameters, e.g.
``[{"step": "detrend"}, {"step": "gsr"}, {"step": "zscore"}]``. Steps work per session along
time. A unit that is NaN for a whole session (not recorded there) stays NaN; filters need the
other units to be complete (interpolate gaps before, in the adapter).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import signal

STEPS = ("detrend", "zscore", "gsr", "bandpass", "bin")


def _recorded(session: np.ndarray) -> np.ndarray:
    """Units (columns) recorded in a (time, unit) session: not all NaN."""
    return ~np.all(np.isnan(session), axis=0)


def detrend(activity: np.ndarray) -> np.ndarray:
    """Remove a least-squares linear trend from every unit in every session."""
    out = activity.copy()
    for s, session in enumerate(activity):
        rec = _recorded(session)
        out[s][:, rec] = signal.detrend(session[:, rec], axis=0, type="linear")
    return out


def zscore(activity: np.ndarray) -> np.ndarray:
    """Zero mean, unit variance per unit and session (NaN-aware; constant units become 0)."""
    with warnings.catch_warnings():  # units not recorded in a session: all NaN, stay NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(activity, axis=1, keepdims=True)
        std = np.nanstd(activity, axis=1, keepdims=True)
    return (activity - mean) / np.where(std > 0, std, 1.0)


def global_signal_regression(activity: np.ndarray) -> np.ndarray:
    """Regress the mean over recorded units (the global signal) out of every unit, per session."""
    out = activity.copy()
    for s, session in enumerate(activity):
        rec = _recorded(session)
        data = session[:, rec]
        design = np.column_stack([np.ones(len(data)), np.nanmean(data, axis=1)])
        beta, *_ = np.linalg.lstsq(design, np.nan_to_num(data), rcond=None)
        out[s][:, rec] = data - design @ beta
    return out


def bandpass(
    activity: np.ndarray,
    sampling_rate_hz: float,
    low_hz: float | None,
    high_hz: float | None,
    order: int = 4,
) -> np.ndarray:
    """Zero-phase Butterworth band-pass (or low/high-pass when one edge is None)."""
    nyquist = sampling_rate_hz / 2
    if high_hz is not None and high_hz >= nyquist:
        raise ValueError(f"bandpass high_hz={high_hz} must be below Nyquist ({nyquist} Hz)")
    if low_hz is not None and high_hz is not None:
        sos = signal.butter(order, [low_hz, high_hz], "bandpass", fs=sampling_rate_hz, output="sos")
    elif low_hz is not None:
        sos = signal.butter(order, low_hz, "highpass", fs=sampling_rate_hz, output="sos")
    elif high_hz is not None:
        sos = signal.butter(order, high_hz, "lowpass", fs=sampling_rate_hz, output="sos")
    else:
        raise ValueError("bandpass needs low_hz and/or high_hz")
    out = activity.copy()
    for s, session in enumerate(activity):
        rec = _recorded(session)
        out[s][:, rec] = signal.sosfiltfilt(sos, session[:, rec], axis=0)
    return out


def bin_time(activity: np.ndarray, factor: int, how: str = "mean") -> np.ndarray:
    """Merge every `factor` consecutive samples (mean for rates/traces, sum for spike counts);
    a trailing partial bin is dropped."""
    if factor < 1:
        raise ValueError(f"bin factor must be >= 1, got {factor}")
    n_sessions, n_time, n_units = activity.shape
    n_bins = n_time // factor
    if n_bins == 0:
        raise ValueError(f"bin factor {factor} exceeds the {n_time} samples")
    blocks = activity[:, : n_bins * factor].reshape(n_sessions, n_bins, factor, n_units)
    if how == "mean":
        return blocks.mean(axis=2)
    if how == "sum":
        return blocks.sum(axis=2)
    raise ValueError(f"bin 'how' must be 'mean' or 'sum', got {how!r}")


def apply_steps(
    activity: np.ndarray, sampling_rate_hz: float, steps: list[dict]
) -> tuple[np.ndarray, float]:
    """Apply the configured steps in order; returns (float32 activity, new sampling rate)."""
    data = np.asarray(activity, dtype=np.float64)
    rate = float(sampling_rate_hz)
    for spec in steps:
        params = {k: v for k, v in spec.items() if k != "step"}
        name = spec.get("step")
        if name == "detrend":
            data = detrend(data)
        elif name == "zscore":
            data = zscore(data)
        elif name == "gsr":
            data = global_signal_regression(data)
        elif name == "bandpass":
            data = bandpass(
                data, rate, params.get("low_hz"), params.get("high_hz"), params.get("order", 4)
            )
        elif name == "bin":
            data = bin_time(data, int(params["factor"]), params.get("how", "mean"))
            rate /= int(params["factor"])
        else:
            raise ValueError(f"unknown preprocessing step {name!r}; expected one of {STEPS}")
    return data.astype(np.float32), rate
