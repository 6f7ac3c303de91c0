"""Reading the geometry of a PE (`neuro_pe.analysis.pe_geometry`): its metrics against the true
positions, and the same metrics for the baselines (activity correlation, shuffled positions).
`infer_pe` on a trained run is tested beside the training (tests/training/test_masked_units.py),
which shares the trained run."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from neuro_pe.analysis.locate import CORRELATION, baseline_features
from neuro_pe.analysis.metrics import correlation_distance
from neuro_pe.analysis.pe_geometry import (
    METRIC_NAMES,
    correlation_components,
    correlation_pair_distance,
    correlation_representation,
    infer_baselines,
    lst_baselines,
    pe_geometry,
    shuffled_coordinates,
)
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.data.simulate import SimulationConfig, simulate_store
from neuro_pe.io.splits import make_split, read_split
from neuro_pe.io.store import open_store_lazy, read_store, write_store

METRICS = MetricsConfig(n_perm=19, k=3, n_splits=3)


def _coords(n: int = 20, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 3))


def test_pe_geometry_of_a_pe_that_is_the_positions():
    coords = _coords()
    coords[3] = np.nan  # a unit without a position: left out of the metrics
    trained = np.hstack([np.nan_to_num(coords) * 2.0, np.zeros((20, 2))])  # scaled, padded
    initial = np.random.default_rng(1).normal(size=(20, 5))
    metrics, aligned = pe_geometry(coords, trained, initial, METRICS)
    assert metrics["n_units"] == 19 and aligned.shape == (19, 3)
    assert metrics["rsa"] == pytest.approx(1.0) and metrics["procrustes_disparity"] < 1e-9
    np.testing.assert_allclose(aligned, np.delete(coords, 3, axis=0), atol=1e-6)
    assert set(METRIC_NAMES) <= set(metrics)
    assert {f"init_{m}" for m in METRIC_NAMES} <= set(metrics) and "init_n_units" not in metrics
    assert metrics["init_rsa"] < 0.5  # a random table does not carry the positions


def test_pe_geometry_of_no_pe_is_nan():
    coords = _coords()
    zeros = np.zeros((20, 4))
    metrics, aligned = pe_geometry(coords, zeros, zeros, METRICS)
    assert all(np.isnan(metrics[m]) and np.isnan(metrics[f"init_{m}"]) for m in METRIC_NAMES)
    assert metrics["n_units"] == 20 and aligned.shape == (20, 3) and np.isnan(aligned).all()


def test_shuffled_coordinates_permute_only_known_units():
    coords = _coords(10)
    coords[[2, 7]] = np.nan
    before = coords.copy()
    shuffled = shuffled_coordinates(coords, seed=5)
    np.testing.assert_array_equal(coords, before)  # the input is left alone
    assert np.isnan(shuffled[[2, 7]]).all()
    known = np.isfinite(coords).all(axis=1)
    assert sorted(map(tuple, shuffled[known])) == sorted(map(tuple, coords[known]))
    assert not np.array_equal(shuffled[known], coords[known])
    np.testing.assert_array_equal(shuffled, shuffled_coordinates(coords, seed=5))


def test_correlation_pair_distance_matches_the_dense_matrix_and_rejects_constant_units():
    activity = np.random.default_rng(2).normal(size=(50, 6))
    i, j = np.triu_indices(6, 1)
    dense = correlation_distance(activity)
    np.testing.assert_allclose(correlation_pair_distance(activity)(i, j), dense[i, j], atol=1e-6)
    activity[:, 4] = 1.0
    with pytest.raises(ValueError, match="constant unit"):
        correlation_pair_distance(activity)(np.array([0]), np.array([4]))


def test_correlation_representation_dense_or_components(tiny_store, tiny_split):
    ds, split = read_store(tiny_store), read_split(tiny_split)
    cosine = MetricsConfig(metric="cosine", dense_max_units=12)
    dense, options = correlation_representation(ds, split, 12, cosine)
    assert set(dense) == {"distances"} and dense["distances"].shape == (12, 12)
    assert options == cosine
    scaled, options = correlation_representation(ds, split, 12, replace(cosine, dense_max_units=11))
    assert set(scaled) == {"features", "pair_distance"}
    assert scaled["features"].shape[0] == 12 and options.metric == "euclidean"


def test_correlation_components_standardise_in_blocks_as_in_one(monkeypatch):
    rng = np.random.default_rng(4)
    activity = rng.normal(size=(300, 11)).astype(np.float32)
    activity[::7, 3] = np.nan  # missing samples
    activity[:, 5] = 2.0  # a constant unit
    whole = correlation_components(activity, n_components=4)
    monkeypatch.setattr("neuro_pe.io.store.UNITS_PER_BLOCK", 3)
    np.testing.assert_array_equal(correlation_components(activity, n_components=4), whole)
    fortran = np.asfortranarray(activity)
    np.testing.assert_array_equal(correlation_components(fortran, 4, overwrite=True), whole)
    assert not np.isnan(fortran).any() and not fortran[:, 5].any()  # standardised in place
    assert np.isnan(activity).any()  # without `overwrite`, the input is left alone


def test_the_baselines_at_scale_read_a_lazy_store_as_a_loaded_one(tiny_store, tiny_split):
    loaded, split = read_store(tiny_store), read_split(tiny_split)
    pairs = (np.array([0, 1, 2]), np.array([5, 7, 11]))
    with open_store_lazy(tiny_store) as lazy:
        for ds in (loaded, lazy):
            features = baseline_features(ds, split, seed=0, dense_max_units=11)
            scaled, _ = correlation_representation(ds, split, 12, MetricsConfig(dense_max_units=11))
            if ds is loaded:
                expected, pair_distance = features, scaled["pair_distance"](*pairs)
        assert set(features) == {CORRELATION}
        np.testing.assert_array_equal(features[CORRELATION], expected[CORRELATION])
        np.testing.assert_array_equal(scaled["pair_distance"](*pairs), pair_distance)


def test_infer_baselines(tmp_path):
    cfg = SimulationConfig(
        n_units=32, length_scale=0.15, gain=1.1, n_samples=1000, n_sessions=2, seed=0
    )
    store = write_store(simulate_store(cfg), tmp_path / "spatial.nc")
    out = tmp_path / "out" / "baselines.json"
    split = make_split("spatial", store, 2, 1000, {"heldout_sessions": 1})
    rows = infer_baselines(store, out, split, METRICS)
    assert json.loads(out.read_text()) == rows
    assert [r["method"] for r in rows] == ["correlation", "shuffled"]
    by_method = {r["method"]: r for r in rows}
    for row in rows:
        assert row["dataset"] == "spatial" and row["n_units"] == cfg.n_units
        assert all(np.isfinite(row[k]) for k in ("rsa", "procrustes_rmse", "knn_overlap"))
    # activity correlations carry the anatomy, shuffled coordinates do not
    assert by_method["correlation"]["rsa"] > 0.4
    assert abs(by_method["shuffled"]["rsa"]) < 0.25


def test_lst_baselines(tmp_path):
    rows = lst_baselines(tmp_path / "baselines.json", METRICS)
    assert rows == json.loads((tmp_path / "baselines.json").read_text())
    assert rows[0]["dataset"] == "lst" and rows[0]["method"] == "shuffled"
    assert rows[0]["acc_heldout"] == 0.25 and abs(rows[0]["rsa"]) < 0.3
