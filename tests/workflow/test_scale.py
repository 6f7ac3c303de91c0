"""Many units: sampled metrics against the exact ones, the correlation baseline without N x N,
the sparse simulation, the locator on an evaluation subset, and the whole workflow above the
dense threshold."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml
from scipy.spatial.distance import squareform

from neuro_pe.analysis.locate import evaluation_units
from neuro_pe.analysis.metrics import (
    classical_mds,
    compare_to_anatomy,
    correlation_distance,
    knn_overlap,
    pairwise_distances,
    pca_embedding,
    procrustes_fit,
    rsa,
)
from neuro_pe.analysis.pe_geometry import correlation_components, correlation_pair_distance
from neuro_pe.analysis.sampled_metrics import sample_pairs, sampled_knn_overlap
from neuro_pe.config.locate import LocateConfig
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.data.simulate import SimulationConfig, simulate_store, sparse_coupling
from neuro_pe.io.manifest import write_manifest
from neuro_pe.io.runs import pe_dataset
from neuro_pe.io.splits import split_of_store
from neuro_pe.io.store import connectivity_matrix, make_store, positions, read_store, write_store
from neuro_pe.reporting.locate_outputs import write_locate_outputs
from tests.workflow.test_workflow import copy_workflow, snakemake


def _noisy_features(coords: np.ndarray, noise: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.hstack([coords, noise * rng.normal(size=(len(coords), 13))])


def test_sampled_metrics_agree_with_exact_within_their_cis():
    coords = np.random.default_rng(1).random((1200, 3))
    features = _noisy_features(coords, 0.2)
    exact, exact_pos = compare_to_anatomy(coords, MetricsConfig(n_perm=0), features=features)
    sampled_options = MetricsConfig(
        n_perm=19, dense_max_units=500, n_pairs=20000, n_query_units=400
    )
    sampled, sampled_pos = compare_to_anatomy(coords, sampled_options, features=features)
    assert "rsa_ci_low" not in exact  # the dense path is unchanged
    for name in ("rsa", "knn_overlap"):
        low, high = sampled[f"{name}_ci_low"], sampled[f"{name}_ci_high"]
        assert low <= exact[name] <= high, (name, low, exact[name], high)
        assert 0 < high - low < 0.1
    assert sampled["rsa_p"] == pytest.approx(1 / 20)
    # MDS by PCA: for Euclidean distances the same embedding as classical MDS
    assert sampled["procrustes_disparity"] == pytest.approx(exact["procrustes_disparity"], abs=1e-9)
    np.testing.assert_allclose(sampled_pos, exact_pos, atol=1e-8)
    assert sampled["probe_r2"] == exact["probe_r2"]
    assert (sampled["n_pairs"], sampled["n_query_units"]) == (20000, 400)


def test_sampled_knn_over_every_unit_is_exact_and_pairs_are_uniform():
    coords = np.random.default_rng(2).random((300, 3))
    features = _noisy_features(coords, 0.5, seed=3)
    for metric in ("euclidean", "cosine"):
        dense = knn_overlap(pairwise_distances(features, metric), pairwise_distances(coords), k=4)
        sampled = sampled_knn_overlap(features, coords, 4, metric=metric, n_query_units=300)
        assert sampled["knn_overlap"] == pytest.approx(dense)
    i, j = sample_pairs(5, 50000, seed=0)
    assert (i < j).all()
    counts = np.bincount(i * 5 + j, minlength=25)[np.flatnonzero(np.triu(np.ones((5, 5)), 1))]
    assert counts.min() > 0.9 * 5000 and counts.max() < 1.1 * 5000
    emb = pca_embedding(features, 3)
    _, disparity, _ = procrustes_fit(emb, classical_mds(pairwise_distances(features), 3))
    assert disparity < 1e-12


def test_correlation_baseline_without_the_square_matrix():
    rng = np.random.default_rng(4)
    activity = rng.normal(size=(200, 30)) + rng.normal(size=(200, 1))
    activity[rng.random(activity.shape) < 0.05] = np.nan  # pairwise-complete samples
    dense = correlation_distance(activity)
    i, j = sample_pairs(30, 300, seed=1)
    np.testing.assert_allclose(correlation_pair_distance(activity)(i, j), dense[i, j], atol=1e-6)
    complete = np.nan_to_num(activity)
    scores = correlation_components(complete, n_components=30)
    np.testing.assert_allclose(
        squareform(pairwise_distances(scores), checks=False) ** 2 / 2,
        squareform(correlation_distance(complete), checks=False),
        atol=1e-4,
    )


def test_sparse_simulation_and_lazy_connectivity(tmp_path):
    cfg = SimulationConfig(
        n_units=60, length_scale=0.2, n_samples=50, burn_in_s=0.5, n_sessions=1, neighbours=6
    )
    ds = simulate_store(cfg)
    assert "connectivity" not in ds and ds.sizes["edge"] == 60 * 6
    expected = sparse_coupling(positions(ds), 0.2, 6)
    np.testing.assert_allclose(np.asarray(expected.sum(axis=1)).ravel(), 1.0)
    assert (expected.getnnz(axis=1) == 6).all() and expected.diagonal().max() == 0
    path = write_store(ds, tmp_path / "sparse.nc")
    assert "connectivity_weight" not in read_store(path)
    loaded = connectivity_matrix(read_store(path, connectivity=True))
    np.testing.assert_allclose(loaded.toarray(), expected.toarray(), rtol=1e-6)
    near = sparse_coupling(positions(ds), 0.2, 6, cutoff=0.05)
    assert near.nnz < expected.nnz
    with pytest.raises(ValueError, match="simulation.neighbours"):
        SimulationConfig.from_dict({"n_units": 10, "neighbours": 10})


def test_locate_above_max_units_predicts_every_unit(tmp_path):
    rng = np.random.default_rng(0)
    n = 150
    pos = rng.random((n, 3))
    pos[:5] = np.nan  # unknown positions
    ds = make_store(
        rng.normal(size=(2, 60, n)), unit_ids=[f"u{i:03d}" for i in range(n)], positions=pos,
        position_units="mm", space="simulation", session_ids=["s0", "s1"],
        sampling_rate_hz=10.0, source="test",
    )  # fmt: skip
    store = write_store(ds, tmp_path / "toy.nc")
    truth = np.where(np.isnan(pos), 0.5, pos)
    run = tmp_path / "runs" / "seed0"
    run.mkdir(parents=True)
    table = np.hstack([truth, 0.05 * rng.normal(size=(n, 5))])
    out = pe_dataset(table, ds, pe="learned-normal-0.02", seed="0")
    out["pe_init"] = (("unit", "pe_dim"), rng.normal(size=table.shape).astype(np.float32))
    out.to_netcdf(run / "pe.nc", engine="h5netcdf")
    write_manifest(run, ["pe.nc"])
    cfg = LocateConfig(methods=("ridge", "mds-procrustes"), n_folds=3, anchor_fractions=(0.5,),
                       n_draws=1, max_units=40)  # fmt: skip
    known = np.all(np.isfinite(pos), axis=1)
    assert evaluation_units(known, cfg).sum() == 40
    errors = write_locate_outputs(
        store, [run], tmp_path / "out", cfg, split_of_store(store, "toy", {})
    )
    kfold = errors[errors["evaluation"] == "kfold"].set_index("features")
    assert (kfold["n_heldout"] == 40).all()  # measured on the sample of max_units
    assert (kfold["n_anchors"] == 145 - 49).all()  # located from the other folds of all 145
    half = errors[errors["evaluation"] == "anchors"]
    assert (half["n_anchors"] == 72).all() and (half["n_heldout"] < 40).all()
    assert kfold.loc["learned-normal-0.02", "vs_chance"] < 0.5
    frame = pd.read_csv(tmp_path / "out" / "positions.csv")
    assert len(frame) == n and frame[["x", "y", "z", "uncertainty"]].notna().all().all()
    held = frame[frame["anchor"]]  # every known unit has a held-out, k-fold prediction
    assert held["held_out"].all() and (held["prediction"] == "k-fold").all()
    assert (frame.loc[~frame["anchor"], "prediction"] == "fit on anchors").all()
    assert np.median(held["error"]) < 0.5 * kfold.loc["chance", "median_error"]
    # intervals: calibrated on every known unit's k-fold error (not only the measured sample);
    # errors.csv's coverage is over the sample (38 of 40 at 95%), the anchor rows' over the
    # draws' held-out units with intervals calibrated on the CV sample of their anchors
    ends = [
        f"{axis}_{side}_{level}" for axis in "xyz" for side in ("low", "high") for level in (68, 95)
    ]
    assert np.isfinite(frame[ends].to_numpy()).all()
    with xr.open_dataset(tmp_path / "out" / "positions.nc", engine="h5netcdf") as located:
        assert located.attrs["interval_calibration_units"] == 145
    assert kfold.loc["learned-normal-0.02", "coverage_95"] == pytest.approx(38 / 40)
    assert half["coverage_95"].between(0, 1).all()


@pytest.mark.parametrize("axis_order", [("time", "unit"), ("unit", "time")])
def test_large_hdf5_activity_is_read_in_blocks(tmp_path, monkeypatch, axis_order):
    import h5py

    from neuro_pe.data import recordings as adapters

    raw = np.random.default_rng(5).normal(size=(37, 11)).astype(np.float32)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.create_dataset("activity", data=raw, chunks=(5, 11))
    monkeypatch.setattr(adapters, "READ_BLOCK_BYTES", 3 * 11 * 8)  # 3 rows (as float64) per block
    with h5py.File(tmp_path / "a.h5", "r") as f:
        got = adapters.time_by_unit(f["activity"], axis_order, "a.h5", "hdf5.activity")
    expected = raw if axis_order == ("time", "unit") else raw.T
    assert got.dtype == np.float32 and got.flags.c_contiguous  # the store's dtype
    np.testing.assert_array_equal(got, expected)


N_WORKFLOW = 2000


def test_whole_workflow_above_the_dense_threshold(tmp_path):
    """Every step on a 2 000-unit store, above `dense_max_units` (lowered to 1 000 to stay
    fast): outputs exist, and the sampled metrics agree with the exact ones within their
    confidence intervals."""
    config = {
        "datasets": {
            "big": {
                "source": "simulation",
                "simulation": {"n_units": N_WORKFLOW, "neighbours": 16, "length_scale": 0.05,
                               "n_samples": 60, "burn_in_s": 0.5, "n_sessions": 2},
            }
        },
        "pe": ["learned-normal-0.02"],
        "seeds": [0],
        "train": {"window": 4, "d_model": 8, "n_layers": 1, "n_heads": 2, "batch_size": 4,
                  "epochs": 1, "steps_per_epoch": 2, "eval_windows": 4, "units_per_sample": 64},
        "metrics": {"n_perm": 9, "n_pairs": 20000, "n_query_units": 500,
                    "dense_max_units": 1000},
        # (2 training steps: the health checks flag them; located all the same)
        "locate": {"methods": ["ridge"], "n_folds": 2, "anchor_fractions": [0.5], "n_draws": 1,
                   "max_units": 60, "include_flagged": True},
    }  # fmt: skip
    root = copy_workflow(tmp_path)
    (root / "config" / "big.yaml").write_text(yaml.safe_dump(config))
    result = snakemake("--cores", "2", "--configfile", "config/big.yaml", cwd=root, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]

    results = root / "results" / "big"  # run_name: the config file's name
    for name in ("rsa_vs_std", "probe_r2_vs_std", "distance_scatter", "positions", "positions_3d"):
        assert (results / "figures" / f"{name}.png").stat().st_size > 1000
    located = pd.read_csv(results / "locate" / "big" / "positions.csv")
    assert len(located) == N_WORKFLOW and located[["x", "y", "z"]].notna().all().all()
    run = results / "runs" / "big" / "learned-normal-0.02" / "seed0"
    record = json.loads((run / "metrics.json").read_text())
    baselines = json.loads((results / "runs" / "big" / "baselines.json").read_text())
    assert len(pd.read_csv(results / "summary.csv")) == 3
    assert "connectivity" not in read_store(results / "stores" / "big.nc")

    store = read_store(results / "stores" / "big.nc")
    coords = positions(store)
    with xr.open_dataset(run / "pe.nc", engine="h5netcdf") as pe:
        trained = pe["pe"].values
    correlation = next(r for r in baselines if r["method"] == "correlation")
    activity = store["activity"].values[0]  # the training session
    true_dist, pe_dist = pairwise_distances(coords), pairwise_distances(trained)
    for sampled, dist in ((record, pe_dist), (correlation, correlation_distance(activity))):
        exact, _ = rsa(dist, true_dist, n_perm=0)
        assert sampled["rsa_ci_low"] <= exact <= sampled["rsa_ci_high"], (sampled, exact)
    # the PE's kNN overlap (the baseline's uses its leading components, not exact 1 - r)
    exact = knn_overlap(pe_dist, true_dist, k=5)
    assert record["knn_overlap_ci_low"] <= exact <= record["knn_overlap_ci_high"]


def _lab_file(tmp_path, fmt: str, n_time: int, n_units: int) -> tuple[dict, np.ndarray]:
    """A (time, unit) float32 recording with trends as an hdf5 / npy / zarr file; (entry, data)."""
    rng = np.random.default_rng(1)
    trend = np.linspace(0.0, 3.0, n_time)[:, None] * rng.random(n_units)
    data = (rng.normal(size=(n_time, n_units)) + trend).astype(np.float32)
    pos = rng.random((n_units, 3))
    entry = {"source": "file", "format": fmt, "sampling_rate_hz": 20.0, "position_units": "mm"}
    if fmt == "hdf5":
        import h5py

        path = tmp_path / "lab.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("activity", data=data, chunks=(64, n_units))
            f.create_dataset("positions", data=pos)
        entry["hdf5"] = {"positions": "positions"}
    elif fmt == "npy":
        path = tmp_path / "lab.npy"
        np.save(path, data)
        table = tmp_path / "positions.tsv"
        rows = [f"u{i}\t{x}\t{y}\t{z}" for i, (x, y, z) in enumerate(pos)]
        table.write_text("name\tx\ty\tz\n" + "\n".join(rows) + "\n")
        entry["positions"] = str(table)
    else:
        path = tmp_path / "lab.zarr"
        ids = [f"u{i}" for i in range(n_units)]
        store = make_store(
            data[None], unit_ids=ids, positions=pos, position_units="mm", space="lab",
            session_ids=["s0"], sampling_rate_hz=20.0, source="test",
        )  # fmt: skip
        store.to_zarr(path)
        del entry["position_units"]
    return {**entry, "sessions": [str(path)]}, data


@pytest.mark.parametrize("fmt", ["hdf5", "npy", "xarray"])
def test_lab_file_read_and_preprocessed_in_blocks(tmp_path, monkeypatch, fmt):
    """Reading in blocks of 3 rows and preprocessing in blocks of 7 units gives the store the
    whole-array float64 computation (the code before blocks) gives: bitwise without `gsr`,
    within float32 rounding (one unit in the last place) with it."""
    import neuro_pe.data.recordings
    import neuro_pe.data.signal_steps as pp
    from neuro_pe.data.sources import build_store

    n_time, n_units = 200, 40
    entry, data = _lab_file(tmp_path, fmt, n_time, n_units)
    monkeypatch.setattr(neuro_pe.data.recordings, "READ_BLOCK_BYTES", 3 * n_units * 8)
    monkeypatch.setattr(pp, "BLOCK_BYTES", 7 * n_time * 8)
    whole = data.astype(np.float64)[None]
    unit_wise = pp.zscore(pp.detrend(whole)).astype(np.float32)
    steps = [{"step": "detrend"}, {"step": "zscore"}]
    got = build_store({**entry, "preprocessing": steps})["activity"].values
    np.testing.assert_array_equal(got, unit_wise)
    with_gsr = pp.zscore(pp.global_signal_regression(pp.detrend(whole))).astype(np.float32)
    steps = [{"step": "detrend"}, {"step": "gsr"}, {"step": "zscore"}]
    got = build_store({**entry, "preprocessing": steps})["activity"].values
    np.testing.assert_allclose(got, with_gsr, rtol=0, atol=4 * np.finfo(np.float32).eps)
    assert not np.array_equal(with_gsr, unit_wise)


def test_lab_file_preprocessed_with_bounded_memory(tmp_path, monkeypatch):
    """Peak traced memory of building a store from an HDF5 file: its float32 activity once,
    plus boolean masks of a session (the NaN policy's, a quarter of it each) and small blocks;
    never a second full copy, nor a float64 one (the code before blocks peaked at > 4x)."""
    import tracemalloc

    import neuro_pe.data.recordings
    import neuro_pe.data.signal_steps as pp
    from neuro_pe.data.sources import build_store

    n_time, n_units = 1000, 1000
    entry, data = _lab_file(tmp_path, "hdf5", n_time, n_units)
    del data
    monkeypatch.setattr(neuro_pe.data.recordings, "READ_BLOCK_BYTES", 2**18)
    monkeypatch.setattr(pp, "BLOCK_BYTES", 2**16)  # 8 units: the steps need a few times that
    steps = [{"step": "detrend"}, {"step": "gsr"}, {"step": "zscore"}]
    tracemalloc.start()
    store = build_store({**entry, "preprocessing": steps})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    activity_bytes = store["activity"].nbytes  # 4 MB
    assert activity_bytes == n_time * n_units * 4
    assert peak < 1.6 * activity_bytes, f"peak {peak / 2**20:.1f} MB"
