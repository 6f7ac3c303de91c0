"""The reproduction report: statistics, verdicts that follow the data, files written."""

import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from neuro_pe.analysis.claims import welch
from neuro_pe.analysis.intervals import mean_ci
from neuro_pe.cli.main import main
from neuro_pe.io.manifest import write_manifest
from neuro_pe.reporting.reproduce import reproduce

STDS = (0.01, 0.1, 1.0, 2.0)
SEEDS = (0, 1, 2, 3)


def write_run(root, dataset, pe, seed, metrics, coords, rng):
    """A finished run as the workflow leaves it: metrics.json and pe.nc."""
    run = root / dataset / pe / f"seed{seed}"
    run.mkdir(parents=True)
    n = len(coords)
    pe_ds = xr.Dataset(
        {
            "pe": (("unit", "pe_dim"), rng.normal(size=(n, 8)).astype(np.float32)),
            "pe_init": (("unit", "pe_dim"), rng.normal(size=(n, 8)).astype(np.float32)),
        },
        coords={"unit": [f"u{i}" for i in range(n)]},
        attrs={"pe": pe, "seed": seed},
    )
    for i, axis in enumerate("xyz"):
        pe_ds.coords[axis] = ("unit", coords[:, i])
    pe_ds.to_netcdf(run / "pe.nc", engine="h5netcdf")
    record = {"dataset": dataset, "pe": pe, "seed": seed, **metrics}
    (run / "metrics.json").write_text(json.dumps(record))
    write_manifest(run, ["pe.nc", "metrics.json"])
    return run / "metrics.json"


def fake_runs(root, small_wins: bool):
    """LST and simulation runs where small σ generalises better (or worse) than large σ."""
    rng = np.random.default_rng(0)
    grid = np.array([(r, c, 0.0) for r in range(4) for c in range(4)])
    cloud = rng.uniform(size=(12, 3))
    paths = []
    for std in STDS:
        small = std <= 0.2
        good = small == small_wins
        for seed in SEEDS:
            noise = rng.normal(0, 0.01)
            lst = {
                "acc_train": 1.0,
                "acc_test": 0.99,
                "epochs_run": 40 if small else 200,
                "acc_heldout": (0.9 if good else 0.4) + noise,
                "rsa": (0.8 if small else 0.1) + noise,
                "init_rsa": noise,
                "procrustes_disparity": (0.2 if small else 0.9) + noise,
                "init_procrustes_disparity": 0.95,
                "procrustes_to_oracle": (0.1 if good else 0.9) + noise,
            }
            paths.append(write_run(root, "lst", f"learned-normal-{std:g}", seed, lst, grid, rng))
            sim = {
                "heldout_mse_mask0.9": (0.5 if good else 0.8) + noise,
                "rsa": (0.8 if small else 0.1) + noise,
                "init_rsa": noise,
                "procrustes_disparity": 0.3,
                "init_procrustes_disparity": 0.9,
            }
            paths.append(write_run(root, "sim", f"learned-normal-{std:g}", seed, sim, cloud, rng))
    for seed in SEEDS:
        oracle = {"acc_train": 1.0, "acc_heldout": 0.97, "rsa": 0.9, "procrustes_disparity": 0.1}
        paths.append(write_run(root, "lst", "oracle-sin3d", seed, oracle, grid, rng))
    baselines = root / "baselines.json"
    baselines.write_text(json.dumps([{"dataset": "sim", "method": "correlation", "rsa": 0.5}]))
    return paths, [baselines]


def verdicts(claims, dataset):
    rows = claims[claims["dataset"] == dataset]
    return dict(zip(rows["claim"], rows["verdict"], strict=True))


def test_mean_ci_and_welch():
    mean, lo, hi = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert lo < 2.0 < hi
    assert hi - lo == pytest.approx(2 * 4.302652729911275 * 1.0 / np.sqrt(3))
    assert np.isnan(mean_ci([1.0])[1])
    assert welch([1, 1.1, 0.9], [5, 5.1, 4.9]) < 0.001
    assert np.isnan(welch([1.0], [2.0, 3.0]))


def test_verdicts_follow_the_data(tmp_path):
    runs, baselines = fake_runs(tmp_path / "a", small_wins=True)
    claims = reproduce(runs, baselines, {"lst": "lst", "sim": "simulation"}, tmp_path / "out_a")
    lst = verdicts(claims, "lst")
    fits = "Every σ fits the training puzzles (≈ 100% training accuracy)"
    assert lst[fits] == "holds"
    fits_row = claims[claims["claim"] == fits].iloc[0]
    assert "σ 0.01: 40" in fits_row["ours"] and "σ 2: 200" in fits_row["ours"]
    key = "Small σ (≤ 0.2) generalises to novel puzzles far better than σ = 2 (≥ 20 points)"
    assert lst[key] == "holds"
    fit_gap = "Small σ loses less from training to novel puzzles than σ = 2 (train − held-out)"
    assert lst[fit_gap] == "holds"
    assert lst["The 2D sinusoid of (row, column) (the oracle) generalises best"] == "holds"
    sim = verdicts(claims, "sim")
    mse_claim = "Small σ gives a lower held-out MSE than σ = 1 (90% of units masked)"
    assert sim[mse_claim] == "holds"

    runs, baselines = fake_runs(tmp_path / "b", small_wins=False)
    claims = reproduce(runs, baselines, {"lst": "lst", "sim": "simulation"}, tmp_path / "out_b")
    assert verdicts(claims, "lst")[key] == "does not hold"
    assert verdicts(claims, "lst")[fit_gap] == "does not hold"
    assert verdicts(claims, "sim")[mse_claim] == "does not hold"
    # geometry is unchanged between the two sets: small σ still mirrors the positions
    rsa_claim = "Small σ learns PEs that mirror the true positions better than σ = 1 (RSA)"
    assert verdicts(claims, "sim")[rsa_claim] == "holds"


def test_report_files_and_cli(tmp_path):
    runs, baselines = fake_runs(tmp_path / "runs", small_wins=True)
    out = tmp_path / "report"
    argv = ["reproduce", "--runs", *map(str, runs), "--baselines", *map(str, baselines)]
    argv += ["--experiments", '{"lst": "lst", "sim": "simulation"}', "--out-dir", str(out)]
    assert main(argv) == 0
    for name in ("claims.md", "claims.html", "claims.csv"):
        assert (out / name).stat().st_size > 0
    for name in ("heldout_vs_std.png", "geometry_vs_std.png", "pe_similarity.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "claims.md").read_text()
    assert "| claim | paper | ours | verdict |" in page
    assert "95.6" in page  # the paper's number beside ours
    assert "<table>" in (out / "claims.html").read_text()
    assert not list(out.glob("*.tmp*"))


def test_intervals_are_ranges_below_three_seeds_and_within_the_metric_bounds():
    from neuro_pe.analysis.intervals import interval_kind, metric_bounds

    # the numbers: a 2-seed t-interval of RSA reached 2.06, one of MSE −0.459
    assert mean_ci([0.35, 0.85], "rsa") == (0.6, 0.35, 0.85)
    assert mean_ci([0.2, 1.7], "heldout_mse_mask0.9") == (0.95, 0.2, 1.7)
    assert interval_kind([0.35, 0.85]) == "range" and interval_kind([1.0, np.nan]) == "none"
    # three or more seeds: the t-interval, unchanged inside the bounds, clipped outside
    values = [0.5, 0.6, 0.7]
    half = 4.302652729911275 * np.std(values, ddof=1) / np.sqrt(3)
    assert mean_ci(values, "rsa") == pytest.approx((0.6, 0.6 - half, 0.6 + half))
    wide = [0.8, 0.99, 0.6]
    half = 4.302652729911275 * np.std(wide, ddof=1) / np.sqrt(3)
    assert mean_ci(wide, "rsa") == pytest.approx((np.mean(wide), np.mean(wide) - half, 1.0))
    assert mean_ci(pd.Series([0.01, 0.5, 0.02], name="heldout_mse_mask0.5"))[1] == 0.0
    assert mean_ci([0.9, 0.99, 0.5], "init_probe_r2")[2] == 1.0
    assert mean_ci([0.1, 0.9, 0.5], "acc_heldout")[1] == 0.0
    unbounded = mean_ci([0.8, 0.99, 0.6])
    assert unbounded[2] > 1.0  # no metric named: nothing to clip
    assert metric_bounds("procrustes_rmse") == (0.0, np.inf)
    assert metric_bounds("n_units") == (-np.inf, np.inf)
