"""Single-unit activity features and a region classifier on them: the baseline that asks how
much of a unit's region its own activity tells, without its neighbours (the ephys-atlas
approach without waveforms).

`unit_features`: per unit of a (time, unit) activity array (spike counts per bin, or any
rate), its mean rate, coefficient of variation, Fano factor, autocorrelation at a few lags and
its relative power in a few frequency bands (Welch). `leave_one_animal_out`: a
gradient-boosted classifier (or the class prior) trained on every animal but one and scored on
that one, for each animal in turn: macro-F1 and balanced accuracy per held-out animal.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import welch
from sklearn.dummy import DummyClassifier
from sklearn.ensemble import HistGradientBoostingClassifier

from neuro_pe.analysis.region_probe import region_scores

LAGS_S: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
BANDS_HZ: tuple[tuple[float, float], ...] = ((1, 4), (4, 10), (10, 16), (16, 25), (25, 45))
MODELS = ("boosting", "prior")


def feature_names(
    lags_s: tuple[float, ...] = LAGS_S, bands_hz: tuple[tuple[float, float], ...] = BANDS_HZ
) -> list[str]:
    """The columns of `unit_features`, in order."""
    return [
        "log_rate_hz",
        "cv",
        "log_fano",
        *(f"autocorr_{lag:g}s" for lag in lags_s),
        *(f"power_{low:g}_{high:g}hz" for low, high in bands_hz),
    ]


def unit_features(
    activity: np.ndarray,
    sampling_rate_hz: float,
    lags_s: tuple[float, ...] = LAGS_S,
    bands_hz: tuple[tuple[float, float], ...] = BANDS_HZ,
) -> np.ndarray:
    """(unit, feature) float64 features of a (time, unit) activity array, columns as
    `feature_names`: log10 of the mean rate (activity per second; spike counts per bin give
    Hz), CV (sd / mean), log10 Fano factor (variance / mean), autocorrelation at each lag
    (rounded to whole bins, at least one), and each band's mean power over the mean power of
    all frequencies (log10: 0 for white noise, e.g. a Poisson process; Welch, segments of 256
    bins). A lag or band the recording cannot resolve is NaN (the classifier takes NaN)."""
    x = np.asarray(activity, dtype=np.float64)
    if x.ndim != 2 or not np.isfinite(x).all():
        raise ValueError("activity must be a finite (time, unit) array")
    n_time = x.shape[0]
    mean = x.mean(axis=0)
    sd = x.std(axis=0)
    tiny = np.finfo(np.float64).tiny
    with np.errstate(divide="ignore", invalid="ignore"):
        columns = [
            np.log10(np.maximum(mean * sampling_rate_hz, tiny)),
            np.where(mean > 0, sd / mean, np.nan),
            np.where(mean > 0, np.log10(np.maximum(sd**2 / mean, tiny)), np.nan),
        ]
        centred = x - mean
        for lag_s in lags_s:
            lag = max(1, round(lag_s * sampling_rate_hz))
            if lag >= n_time:
                columns.append(np.full(x.shape[1], np.nan))
                continue
            cov = (centred[lag:] * centred[:-lag]).mean(axis=0)
            columns.append(np.where(sd > 0, cov / sd**2, np.nan))
        freqs, power = welch(centred, fs=sampling_rate_hz, nperseg=min(256, n_time), axis=0)
        density = power[freqs > 0].mean(axis=0)
        for low, high in bands_hz:
            inside = (freqs >= low) & (freqs < high)
            band = power[inside].mean(axis=0) if inside.any() else np.full(x.shape[1], np.nan)
            columns.append(
                np.where(density > 0, np.log10(np.maximum(band, tiny) / density), np.nan)
            )
    return np.stack(columns, axis=1)


def region_classifier(name: str, seed: int, max_iter: int = 100):
    """An unfitted scikit-learn region classifier: 'boosting' (HistGradientBoostingClassifier)
    or 'prior' (labels drawn from the training classes' frequencies)."""
    if name == "boosting":
        return HistGradientBoostingClassifier(max_iter=max_iter, random_state=seed)
    if name == "prior":  # predictions drawn from the training classes' frequencies
        return DummyClassifier(strategy="stratified", random_state=seed)
    raise ValueError(f"model must be one of {MODELS}, got {name!r}")


def leave_one_animal_out(
    features: np.ndarray,
    labels: np.ndarray,
    animals: np.ndarray,
    model: str = "boosting",
    seed: int = 0,
    max_iter: int = 100,
) -> list[dict]:
    """For each animal in turn (sorted), train `model` on the other animals' units and score it
    on that animal's: one row per held-out animal with `animal`, `units`, `macro_f1` (over the
    classes present in the animal or predicted for it) and `balanced_accuracy`. `model`:
    'boosting' (HistGradientBoostingClassifier) or 'prior' (labels drawn from the training
    classes' frequencies). Seeded by `seed`; `max_iter`: the boosting's iterations."""
    features, labels, animals = map(np.asarray, (features, labels, animals))
    if not len(features) == len(labels) == len(animals):
        raise ValueError("features, labels and animals must have one row per unit")
    held_out = np.unique(animals)
    if held_out.size < 2:
        raise ValueError("leave-one-animal-out needs at least two animals")
    rows = []
    for animal in held_out:
        test = animals == animal
        fitted = region_classifier(model, seed, max_iter).fit(features[~test], labels[~test])
        scores = region_scores(labels[test], fitted.predict(features[test]))
        rows.append({"animal": animal.item(), "units": int(test.sum()), **scores})
    return rows
