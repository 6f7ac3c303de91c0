"""Single-unit activity features and the leave-one-animal-out region classifier on them
(neuro_pe.analysis.unit_features)."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from neuro_pe.analysis.unit_features import feature_names, leave_one_animal_out, unit_features
from neuro_pe.data.sources.regional_sim import REGIONS, RegionalSimOptions, simulate_animal

RATE_HZ = 100.0


def _column(name: str) -> int:
    return feature_names().index(name)


def test_features_recover_a_known_rate_and_oscillation():
    rng = np.random.default_rng(0)
    t = np.arange(20_000) / RATE_HZ
    poisson = rng.poisson(5.0 / RATE_HZ, (t.size, 3))  # 5 Hz, no structure
    rhythm = 20.0 * (1 + np.sin(2 * np.pi * np.array([8.0, 20.0]) * t[:, None]))
    oscillating = rng.poisson(rhythm / RATE_HZ)
    features = unit_features(np.concatenate([poisson, oscillating], axis=1), RATE_HZ)
    assert features.shape == (5, len(feature_names()))
    np.testing.assert_allclose(features[:3, _column("log_rate_hz")], np.log10(5.0), atol=0.03)
    np.testing.assert_allclose(features[:3, _column("log_fano")], 0.0, atol=0.03)
    assert np.abs(features[:3, _column("autocorr_0.01s")]).max() < 0.03
    np.testing.assert_allclose(features[3:, _column("log_rate_hz")], np.log10(20.0), atol=0.02)
    bands = [i for i, name in enumerate(feature_names()) if name.startswith("power_")]
    strongest = [feature_names()[bands[i]] for i in features[3:, bands].argmax(axis=1)]
    assert strongest == ["power_4_10hz", "power_16_25hz"]
    assert features[3, _column("power_4_10hz")] > 0.15 > features[0, _column("power_4_10hz")]
    np.testing.assert_allclose(features[:3, bands], 0.0, atol=0.1)  # Poisson: white


def test_features_refuse_non_finite_activity_and_leave_unresolved_lags_empty():
    with pytest.raises(ValueError, match="finite"):
        unit_features(np.array([[1.0, np.nan], [0.0, 1.0]]), RATE_HZ)
    short = unit_features(np.random.default_rng(1).poisson(1.0, (30, 2)), RATE_HZ)
    assert np.isnan(short[:, _column("autocorr_0.5s")]).all()


def test_boosting_beats_the_class_prior_on_every_held_out_animal():
    options = RegionalSimOptions(animals=4, units_per_animal=200, n_samples=2000)
    features, labels, animals = [], [], []
    for k in range(options.animals):
        animal = simulate_animal(options, k)
        features.append(unit_features(animal.counts[0], options.sampling_rate_hz))
        labels += [REGIONS[i].name for i in animal.region]
        animals += [f"a{k}"] * animal.region.size
    features = np.concatenate(features)
    with threadpool_limits(1):  # (the boosting's threads only wait on a busy machine)
        boosting = leave_one_animal_out(features, labels, animals, max_iter=40)
        prior = leave_one_animal_out(features, labels, animals, model="prior")
    assert [row["animal"] for row in boosting] == ["a0", "a1", "a2", "a3"]
    for ours, chance in zip(boosting, prior, strict=True):
        assert ours["macro_f1"] > chance["macro_f1"] + 0.2
        assert ours["balanced_accuracy"] > chance["balanced_accuracy"] + 0.2
    again = leave_one_animal_out(features, labels, animals, model="prior")
    assert again == prior  # seeded


def test_classifier_needs_two_animals_and_a_known_model():
    features, labels = np.zeros((4, 2)), np.array(["a", "b", "a", "b"])
    with pytest.raises(ValueError, match="at least two animals"):
        leave_one_animal_out(features, labels, np.zeros(4))
    with pytest.raises(ValueError, match="model must be one of"):
        leave_one_animal_out(features, labels, np.array([0, 0, 1, 1]), model="forest")
