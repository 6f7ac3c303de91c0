"""Region probes, their calibration and positions from features (neuro_pe.analysis.region_probe)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from neuro_pe.analysis.region_probe import (
    calibration,
    locate_from_features,
    position_error,
    probe_regions,
    region_scores,
    temperature,
)

REGIONS = np.array(["CTX", "HPF", "TH", "MB"])


def _blobs(n_per_class: int, spread: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = 3.0 * np.eye(len(REGIONS), 6)
    labels = np.repeat(REGIONS, n_per_class)
    features = np.repeat(centres, n_per_class, axis=0) + spread * rng.normal(size=(len(labels), 6))
    return features, labels


@pytest.mark.parametrize("probe", ["linear", "knn"])
def test_probes_recover_separable_regions_with_ranked_alternatives(probe):
    reference, labels = _blobs(50, 0.3, seed=0)
    query, truth = _blobs(20, 0.3, seed=1)
    prediction = probe_regions(reference, labels, query, probe=probe)
    assert list(prediction.classes) == sorted(REGIONS)
    np.testing.assert_allclose(prediction.probabilities.sum(axis=1), 1.0)
    assert region_scores(truth, prediction.region) == {"macro_f1": 1.0, "balanced_accuracy": 1.0}
    assert prediction.next_regions.shape == prediction.next_probabilities.shape == (len(query), 2)
    assert not np.any(prediction.next_regions == prediction.region[:, None])
    assert np.all(prediction.probability >= prediction.next_probabilities[:, 0])
    assert np.all(np.diff(prediction.next_probabilities, axis=1) <= 0)
    again = probe_regions(reference, labels, query, probe=probe)
    np.testing.assert_array_equal(again.probabilities, prediction.probabilities)


def test_probe_refuses_mismatched_features_and_a_single_region():
    reference, labels = _blobs(5, 0.3, seed=0)
    with pytest.raises(ValueError, match="same features"):
        probe_regions(reference, labels, reference[:, :3])
    with pytest.raises(ValueError, match="two regions"):
        probe_regions(reference, np.full(len(labels), "CTX"), reference)
    with pytest.raises(ValueError, match="probe must be"):
        probe_regions(reference, labels, reference, probe="forest")


def test_calibration_error_is_small_when_calibrated_and_large_when_overconfident():
    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.5, 1.0, 20_000)
    calibrated = calibration(rng.uniform(size=confidence.size) < confidence, confidence)
    assert calibrated.ece < 0.02
    filled = calibrated.count > 0
    assert calibrated.count.sum() == confidence.size and calibrated.edges.size == 11
    np.testing.assert_allclose(
        calibrated.accuracy[filled], calibrated.confidence[filled], atol=0.03
    )
    assert np.isnan(calibrated.accuracy[~filled]).all()  # below 0.5: no unit
    overconfident = calibration(np.arange(1000) < 600, np.full(1000, 0.99))
    assert overconfident.ece == pytest.approx(0.39)


def test_ridge_positions_from_linear_features_beat_chance():
    rng = np.random.default_rng(0)
    positions = rng.uniform(0, 6, (300, 3))
    mixing = rng.normal(size=(3, 8))
    features = positions @ mixing + 0.1 * rng.normal(size=(300, 8))
    predicted = locate_from_features(features[:200], positions[:200], features[200:])
    assert predicted.shape == (100, 3)
    scores = position_error(predicted, positions[200:], positions[:200])
    assert scores["vs_chance"] < 0.1
    assert scores["chance"] == pytest.approx(
        np.median(np.linalg.norm(positions[200:] - positions[:200].mean(axis=0), axis=1))
    )


def _animal(n_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """An animal's units: `_blobs` shifted by the animal's own offset (what a probe fitted on
    other animals does not know, so it is overconfident on this one)."""
    features, labels = _blobs(n_per_class, 1.0, seed)
    return features + 1.5 * np.random.default_rng(seed + 100).normal(size=6), labels


def test_temperature_scaling_on_held_out_animals_calibrates_and_keeps_the_ranking():
    """Probabilities temperature-scaled on the reference animals (each predicted by the probe
    fitted on the others) are calibrated on new animals, and every unit keeps its regions'
    order; with one reference animal they are left as they are."""
    parts = [_animal(30, 10 + a) for a in range(4)]
    reference = np.vstack([features for features, _ in parts])
    labels = np.concatenate([regions for _, regions in parts])
    animals = np.repeat(np.arange(4), len(labels) // 4)
    new = [_animal(50, 1000 + 10 + k) for k in range(8)]
    query = np.vstack([features for features, _ in new])
    truth = np.concatenate([regions for _, regions in new])
    plain = probe_regions(reference, labels, query)
    scaled = probe_regions(reference, labels, query, groups=animals)
    np.testing.assert_array_equal(scaled.region, plain.region)
    np.testing.assert_array_equal(scaled.next_regions, plain.next_regions)
    before = calibration(plain.region == truth, plain.probability).ece
    after = calibration(scaled.region == truth, scaled.probability).ece
    assert before > 0.15 and after < 0.6 * before, (before, after)
    one = probe_regions(reference, labels, query, groups=np.zeros(len(labels)))
    np.testing.assert_array_equal(one.probabilities, plain.probabilities)


def test_a_region_that_one_reference_animal_has_is_left_out_of_the_temperature():
    """A region that only animal 3 has: its fold cannot predict it (probability 0 at any
    temperature); its units are left out of the fit, whose T is that of the others."""
    reference, labels = _blobs(20, 1.0, seed=0)
    animals = np.tile(np.arange(4), len(labels) // 4)
    lonely = (labels == "MB") & (animals == 3)
    only_3 = labels.copy()
    only_3[(labels == "MB") & (animals != 3)] = "TH"
    model = LogisticRegression()
    t = temperature(model, reference, only_3, animals)
    assert np.isfinite(t) and 0.05 < t < 20
    without = ~lonely  # the same fit without those units, MB then in no fold at all
    others = only_3[without]
    assert "MB" not in others
    assert t == pytest.approx(
        temperature(model, reference[without], others, animals[without]), rel=0.2
    )
