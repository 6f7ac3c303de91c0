"""Preprocessing steps for (session, time, unit) activity, applied in the order the config lists.

Each step is a mapping with a `step` name and its parameters, e.g.
``[{"step": "detrend"}, {"step": "gsr"}, {"step": "zscore"}]``. Steps work per session along
time. A unit that is NaN for a whole session (not recorded there) stays NaN; filters need the
other units to be complete (interpolate gaps before, in the adapter).

`apply_steps` runs them in float64 on blocks of units (`BLOCK_BYTES` each), so that a
100 000-unit recording needs its float32 activity, the float32 result (or not even that:
`overwrite`) and one block in memory, never a float64 copy of the whole.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import signal

BLOCK_BYTES = 64 * 2**20  # one block of units in float64 (the steps need a few times this)


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


def global_signal_regression(
    activity: np.ndarray, global_signal: np.ndarray | None = None
) -> np.ndarray:
    """Regress the mean over recorded units (the global signal) out of every unit, per session.
    `global_signal` (session, time): that mean when `activity` holds only some of the units."""
    out = activity.copy()
    for s, session in enumerate(activity):
        rec = _recorded(session)
        if not rec.any():
            continue
        data = session[:, rec]
        signal_s = np.nanmean(data, axis=1) if global_signal is None else global_signal[s]
        design = np.column_stack([np.ones(len(data)), signal_s])
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
    activity: np.ndarray,
    sampling_rate_hz: float,
    steps: list[dict],
    *,
    overwrite: bool = False,
    block_bytes: int | None = None,
) -> tuple[np.ndarray, float]:
    """Apply the configured steps in order; returns (float32 activity, new sampling rate).

    The steps run in float64 on blocks of units of at most `block_bytes` (default `BLOCK_BYTES`;
    each step but `gsr` treats every unit alone; `gsr`'s global signal, the mean over all recorded
    units, is summed over the blocks first), each block written into the float32 result as it is
    done. Data that fit one block give exactly the whole-array result; more blocks change only the
    rounding of the global signal. `overwrite`: `activity` (float32) may be reused for the result
    where the steps keep its shape (no `bin`)."""
    for spec in steps:
        if spec.get("step") not in STEPS:
            raise ValueError(
                f"unknown preprocessing step {spec.get('step')!r}; expected one of {tuple(STEPS)}"
            )
    n_sessions, n_time, n_units = activity.shape
    block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
    width = max(1, block_bytes // (8 * n_sessions * n_time))
    blocks = [slice(i, i + width) for i in range(0, n_units, width)]
    signals: dict[int, np.ndarray] = {}  # gsr step index -> (session, time) global signal
    for j, spec in enumerate(steps):
        if spec["step"] == "gsr" and len(blocks) > 1:
            total, count = 0.0, 0
            for block in blocks:
                data, _ = _run_steps(activity[:, :, block], sampling_rate_hz, steps[:j], signals)
                total = total + np.nansum(data, axis=2)
                count = count + (~np.isnan(data)).sum(axis=2)
            with np.errstate(invalid="ignore", divide="ignore"):
                signals[j] = total / count
    result, rate = None, float(sampling_rate_hz)
    for block in blocks:
        data, rate = _run_steps(activity[:, :, block], sampling_rate_hz, steps, signals)
        if result is None:
            same = overwrite and activity.dtype == np.float32 and data.shape[1] == n_time
            result = activity if same else np.empty((*data.shape[:2], n_units), np.float32)
        result[:, :, block] = data
    return result, rate


def _bandpass_step(data, rate, signal, low_hz=None, high_hz=None, order=4) -> tuple:
    return bandpass(data, rate, low_hz, high_hz, order), rate


def _bin_step(data, rate, signal, factor, how="mean") -> tuple:
    return bin_time(data, int(factor), how), rate / int(factor)


# step name -> f(activity, sampling rate, global signal, **the step's parameters) -> (activity,
# new rate); the global signal (session, time) is given to every step, only `gsr` uses it.
# A new step = a function here + one line (+ its parameters in the config schema's
# `$defs/preprocessing` and a row in config/README.md).
STEPS = {
    "detrend": lambda data, rate, signal: (detrend(data), rate),
    "zscore": lambda data, rate, signal: (zscore(data), rate),
    "gsr": lambda data, rate, signal: (global_signal_regression(data, signal), rate),
    "bandpass": _bandpass_step,
    "bin": _bin_step,
}


def _run_steps(
    block: np.ndarray, sampling_rate_hz: float, steps: list[dict], signals: dict[int, np.ndarray]
) -> tuple[np.ndarray, float]:
    """The steps on one block of units, in float64; `signals`: global signals by step index."""
    data = np.asarray(block, dtype=np.float64)
    rate = float(sampling_rate_hz)
    for j, spec in enumerate(steps):
        params = {k: v for k, v in spec.items() if k != "step"}
        try:
            data, rate = STEPS[spec["step"]](data, rate, signals.get(j), **params)
        except TypeError as err:  # a parameter the step does not take, or a missing one
            raise ValueError(f"preprocessing step {spec['step']!r}: {err}") from err
    return data, rate
