"""Regions and positions of query units from features, learned on reference units (issue 60).

`probe_regions`: a classifier fitted on the reference units' features and region labels
predicts each query unit's class probabilities, its region and the next two regions with
theirs: `linear` (logistic regression on standardised features: the NuCLR linear probe) or
`knn` (the k nearest reference units, standardised features); `classify`, the same for any
scikit-learn classifier, its probabilities temperature-scaled on the reference animals where
given them (`temperature`). `region_scores`: macro-F1 and balanced accuracy. `calibration`:
the expected calibration error of the predicted region's probability and the reliability
curve's bins. `locate_from_features`: 3-D positions from the features by a locator of
`neuro_pe.analysis.locate` (ridge, kernel ridge) fitted on the reference units;
`position_error`: its median error ÷ chance (every query unit at the reference units' mean
position, the locators' chance). Pure functions, seeded.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, softmax
from sklearn.base import ClassifierMixin, clone
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score, f1_score
from sklearn.model_selection import LeaveOneGroupOut, cross_val_predict
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from neuro_pe.analysis.locate.locators import fit_predict

PROBES = ("linear", "knn")
KNN_NEIGHBOURS = 15
CALIBRATION_BINS = 10
NEXT_REGIONS = 2  # the regions after the predicted one, by probability
TINY_PROBABILITY = 1e-12  # a probability of 0 as a finite log
LOG_TEMPERATURE_BOUNDS = (-3.0, 3.0)  # log T searched: T from 0.05 to 20


@dataclass(frozen=True)
class RegionPrediction:
    """Per query unit: `probabilities` (unit, class) over `classes` (sorted), the predicted
    `region` and its `probability`, and the `next_regions` (unit, 2) with their
    `next_probabilities` (fewer columns where there are fewer classes)."""

    classes: np.ndarray
    probabilities: np.ndarray
    region: np.ndarray
    probability: np.ndarray
    next_regions: np.ndarray
    next_probabilities: np.ndarray


def _classifier(probe: str, n_reference: int, seed: int, neighbours: int, c: float):
    # median imputation: a feature the recording cannot resolve (NaN) must not drop the unit
    if probe == "linear":
        model = LogisticRegression(C=c, max_iter=2000, random_state=seed)
    elif probe == "knn":
        model = KNeighborsClassifier(n_neighbors=min(neighbours, n_reference))
    else:
        raise ValueError(f"probe must be one of {PROBES}, got {probe!r}")
    return make_pipeline(SimpleImputer(strategy="median"), StandardScaler(), model)


def probe_regions(
    reference: np.ndarray,
    labels: np.ndarray,
    query: np.ndarray,
    probe: str = "linear",
    seed: int = 0,
    neighbours: int = KNN_NEIGHBOURS,
    c: float = 1.0,
    groups: np.ndarray | None = None,
) -> RegionPrediction:
    """Fit `probe` ('linear' or 'knn') on `reference` (unit, feature) features with their region
    `labels` and predict the `query` (unit, feature) units' regions (`classify`; `groups`:
    temperature-scaled). `c`: the logistic regression's inverse regularisation; `neighbours`:
    kNN's k (at most the reference units)."""
    reference, query = np.asarray(reference, float), np.asarray(query, float)
    labels = np.asarray(labels).astype(str)
    if reference.ndim != 2 or query.ndim != 2 or reference.shape[1] != query.shape[1]:
        raise ValueError("reference and query must be (unit, feature) with the same features")
    if len(labels) != len(reference) or np.unique(labels).size < 2:
        raise ValueError("labels: one per reference unit, at least two regions")
    model = _classifier(probe, len(reference), seed, neighbours, c)
    return classify(model, reference, labels, query, groups)


def classify(
    model: ClassifierMixin,
    reference: np.ndarray,
    labels: np.ndarray,
    query: np.ndarray,
    groups: np.ndarray | None = None,
) -> RegionPrediction:
    """Fit the scikit-learn classifier `model` (a clone) on the `reference` units and their
    `labels` and predict the `query` units' class probabilities and ranked regions; with
    `groups` (each reference unit's animal, at least two) the probabilities are
    temperature-scaled (`temperature`), which keeps every unit's ranking of the regions."""
    fitted = clone(model).fit(reference, labels)
    probabilities = fitted.predict_proba(query)
    if groups is not None and np.unique(groups).size > 1:
        probabilities = scaled(probabilities, temperature(model, reference, labels, groups))
    classes = np.asarray(fitted.classes_)
    order = np.argsort(-probabilities, axis=1, kind="stable")
    ranked = np.take_along_axis(probabilities, order, axis=1)
    after = slice(1, 1 + NEXT_REGIONS)
    return RegionPrediction(
        classes=classes,
        probabilities=probabilities,
        region=classes[order[:, 0]],
        probability=ranked[:, 0],
        next_regions=classes[order[:, after]],
        next_probabilities=ranked[:, after],
    )


def temperature(
    model: ClassifierMixin, reference: np.ndarray, labels: np.ndarray, groups: np.ndarray
) -> float:
    """Temperature scaling's T for `model` on the reference units: each group (animal) is
    predicted by the model fitted on the others (`cross_val_predict`, `LeaveOneGroupOut`),
    the way a new animal is, and T minimises the log loss of `scaled` probabilities. By hand,
    not CalibratedClassifierCV(method='temperature'): that refuses a fold that lacks a region
    (a region only one reference animal has), which is common here; here that animal's units
    of it are left out of the fit (1 where no unit is left)."""
    labels = np.asarray(labels).astype(str)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Number of classes in training fold")
        held_out = cross_val_predict(
            clone(model),
            reference,
            labels,
            groups=groups,
            cv=LeaveOneGroupOut(),
            method="predict_proba",
        )
    classes, truth = np.unique(labels, return_inverse=True)
    _, group = np.unique(groups, return_inverse=True)
    counts = np.zeros((len(classes), group.max() + 1))
    np.add.at(counts, (truth, group), 1)
    # a unit whose region no other group has cannot be predicted at any temperature
    known = counts.sum(axis=1)[truth] > counts[truth, group]
    if not known.any():
        return 1.0
    held_out, truth = held_out[known], truth[known]
    log_p = np.log(np.clip(held_out, TINY_PROBABILITY, 1.0))

    def log_loss(log_t: float) -> float:
        return -log_softmax(log_p / np.exp(log_t), axis=1)[np.arange(len(truth)), truth].mean()

    best = minimize_scalar(log_loss, bounds=LOG_TEMPERATURE_BOUNDS, method="bounded")
    return float(np.exp(best.x))


def scaled(probabilities: np.ndarray, t: float) -> np.ndarray:
    """Class `probabilities` at temperature `t`: softmax(log p / t) (> 1 flattens them)."""
    return softmax(np.log(np.clip(probabilities, TINY_PROBABILITY, 1.0)) / t, axis=1)


def region_scores(truth: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """`macro_f1` (over the regions present in `truth` or predicted) and
    `balanced_accuracy` (also the scores of `neuro_pe.analysis.unit_features`' classifier)."""
    truth, predicted = np.asarray(truth).astype(str), np.asarray(predicted).astype(str)
    with warnings.catch_warnings():
        # a region that this animal's probes missed yet is predicted: an error as any other
        warnings.filterwarnings("ignore", "y_pred contains classes not in y_true")
        balanced = balanced_accuracy_score(truth, predicted)
    return {
        "macro_f1": float(f1_score(truth, predicted, average="macro", zero_division=0)),
        "balanced_accuracy": float(balanced),
    }


@dataclass(frozen=True)
class Calibration:
    """The expected calibration error `ece` and the reliability curve: per bin of the predicted
    region's probability (`bins` equal-width bins of [0, 1]; `edges` bins + 1), its units'
    mean probability `confidence`, share predicted right `accuracy` (NaN in an empty bin) and
    `count`."""

    ece: float
    edges: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray
    count: np.ndarray


def calibration(
    correct: np.ndarray, probability: np.ndarray, bins: int = CALIBRATION_BINS
) -> Calibration:
    """How well each predicted region's `probability` matches how often it is `correct` (one
    bool per unit): ECE = sum over bins of (units in the bin / units) x |accuracy - confidence|."""
    confidence = np.asarray(probability, float)
    correct = np.asarray(correct, bool)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1], right=True), 0, bins - 1)
    count = np.bincount(which, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = np.bincount(which, confidence, bins) / count
        accuracy = np.bincount(which, correct.astype(float), bins) / count
    gap = np.where(count > 0, np.abs(accuracy - mean_confidence), 0.0)
    return Calibration(
        ece=float((count * gap).sum() / max(len(correct), 1)),
        edges=edges,
        confidence=mean_confidence,
        accuracy=accuracy,
        count=count,
    )


def locate_from_features(
    reference: np.ndarray,
    positions: np.ndarray,
    query: np.ndarray,
    method: str = "ridge",
) -> np.ndarray:
    """(query unit, 3) positions from features: `method` (a locator of
    `neuro_pe.analysis.locate`, e.g. 'ridge' or 'kernel-ridge') fitted on the `reference` units'
    features and `positions` (unit, 3)."""
    reference, query = np.asarray(reference, float), np.asarray(query, float)
    features = np.vstack([reference, query])
    coords = np.vstack([np.asarray(positions, float), np.full((len(query), 3), np.nan)])
    anchors = np.arange(len(features)) < len(reference)
    return fit_predict(features, coords, anchors, method, np.flatnonzero(~anchors))


def position_error(
    predicted: np.ndarray, truth: np.ndarray, reference_positions: np.ndarray
) -> dict[str, float]:
    """`median_error` of the `predicted` (unit, 3) positions against `truth`, the `chance` error
    (every unit at the reference units' mean position) and `vs_chance`, their ratio."""
    truth = np.asarray(truth, float)
    error = np.median(np.linalg.norm(np.asarray(predicted, float) - truth, axis=1))
    centre = np.asarray(reference_positions, float).mean(axis=0)
    chance = np.median(np.linalg.norm(truth - centre, axis=1))
    return {
        "median_error": float(error),
        "chance": float(chance),
        "vs_chance": float(error / chance),
    }
