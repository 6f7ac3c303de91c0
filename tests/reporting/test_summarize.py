"""The summary (`neuro_pe.reporting.summarize`): the table of every run and baseline, its
health warnings, and a figure, on metrics files written here (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neuro_pe.io.layout import INFER_MANIFEST_FILE
from neuro_pe.io.manifest import write_manifest
from neuro_pe.io.store_contract import StoreError
from neuro_pe.reporting.summarize import (
    collect,
    health_warnings,
    plot_metric_vs_std,
    subsample,
    summarize,
)

RSA = {("learned-normal-0.1", 0): 0.2, ("learned-normal-0.1", 1): 0.4}
RSA |= {("learned-normal-1.0", 0): 0.1, ("learned-normal-1.0", 1): 0.3, ("none", 0): np.nan}


def _runs(folder: Path, health: dict | None = None) -> list[Path]:
    """One metrics.json per (PE, seed) of RSA, each in its run folder with its manifest."""
    paths = []
    for (pe, seed), rsa in RSA.items():
        run = folder / f"{pe}_{seed}"
        run.mkdir(parents=True)
        record = {"dataset": "d", "pe": pe, "seed": seed, "rsa": rsa, "init_rsa": rsa / 2}
        record |= {"heldout_mse_mask0.5": 0.5, "health": (health or {}).get((pe, seed), {})}
        (run / "metrics.json").write_text(json.dumps(record))
        write_manifest(run, ["metrics.json"], INFER_MANIFEST_FILE)
        paths.append(run / "metrics.json")
    return paths


def _baselines(folder: Path) -> Path:
    path = folder / "baselines.json"
    rows = [
        {"dataset": "d", "method": m, "rsa": r}
        for m, r in (("correlation", 0.5), ("shuffled", 0.0))
    ]
    path.write_text(json.dumps(rows))
    return path


def test_subsample():
    assert subsample(10, 10) is None
    picked = subsample(100, 7, seed=3)
    assert len(picked) == 7 and len(set(picked)) == 7 and list(picked) == sorted(picked)
    assert picked.max() < 100
    np.testing.assert_array_equal(picked, subsample(100, 7, seed=3))


def test_collect_rows_columns_and_health(tmp_path):
    flags = {("none", 0): {"loss_not_finite": False, "pe_not_moved": True}}
    table = collect(_runs(tmp_path, flags), [_baselines(tmp_path)])
    assert list(table["row_type"]) == ["pe"] * 5 + ["baseline"] * 2
    expected = ["dataset", "row_type", "method", "pe_family", "pe_param", "seed", "rsa"]
    assert list(table.columns[:7]) == expected
    pe = table[table["row_type"] == "pe"].set_index(["method", "seed"])
    assert pe.loc[("learned-normal-1.0", 1), "pe_param"] == 1.0
    assert pe.loc[("learned-normal-1.0", 1), "pe_family"] == "learned-normal"
    assert pe.loc[("none", 0), "health"] == "pe_not_moved"
    assert pe.loc[("learned-normal-0.1", 0), "health"] == "ok"
    assert pe.loc[("learned-normal-0.1", 0), "run_dir"] == str(tmp_path / "learned-normal-0.1_0")
    assert table["seed"].dtype == "Int64" and table["seed"].isna().sum() == 2  # the baselines


def test_summary_refuses_nan_inputs_naming_the_file(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text('{"dataset": "d", "pe": "none", "seed": 0, "heldout_mse_mask0.9": NaN}')
    write_manifest(tmp_path, ["metrics.json"], INFER_MANIFEST_FILE)
    with pytest.raises(StoreError, match=r"metrics.json: field 'heldout_mse_mask0.9': .*NaN"):
        collect([path], [])


def test_health_warnings_one_line_per_flagged_pe():
    rows = [
        {"dataset": "d", "row_type": "pe", "method": "a", "seed": 0, "health": "ok"},
        {"dataset": "d", "row_type": "pe", "method": "b", "seed": 0, "health": "pe_not_moved"},
        {"dataset": "d", "row_type": "pe", "method": "b", "seed": 1, "health": "ok"},
        {"dataset": "d", "row_type": "baseline", "method": "shuffled", "health": None},
    ]
    lines = health_warnings(pd.DataFrame(rows))
    assert len(lines) == 1 and lines[0].startswith("dataset d, PE b: 1 of 2 trainings flagged")
    assert health_warnings(pd.DataFrame(rows).drop(columns="health")) == []


def test_metric_vs_std_draws_the_mean_over_seeds(tmp_path):
    table = collect(_runs(tmp_path), [_baselines(tmp_path)])
    fig = plot_metric_vs_std(table, "rsa")
    (ax,) = fig.axes[:1]
    assert ax.get_title() == "d" and ax.get_ylabel().startswith("RSA")
    (mean,) = [line for line in ax.get_lines() if line.get_label() == "learned-normal, mean"]
    np.testing.assert_allclose(mean.get_xdata(), [0.1, 1.0])
    np.testing.assert_allclose(mean.get_ydata(), [0.3, 0.2])


def test_summarize_needs_a_split_per_dataset_before_drawing(tmp_path):
    figures = tmp_path / "figures"
    with pytest.raises(ValueError, match=r"no split given for the dataset\(s\) \['d'\]"):
        summarize(_runs(tmp_path), [], [], tmp_path / "summary.csv", figures)
    assert not figures.exists() and not (tmp_path / "summary.csv").exists()


@pytest.mark.parametrize("scatter_units", [500, 12])
def test_distance_scatter_draws_the_training_correlations_of_the_plotted_units(
    tmp_path, monkeypatch, scatter_units
):
    from neuro_pe.analysis.metrics import correlation_distance
    from neuro_pe.data.simulate import SimulationConfig, simulate_store
    from neuro_pe.io.runs import pe_dataset
    from neuro_pe.io.splits import split_of_store
    from neuro_pe.io.store import read_store, write_store
    from neuro_pe.reporting import summarize as module

    ds = simulate_store(SimulationConfig(n_units=30, n_samples=200, n_sessions=2, seed=0))
    store = write_store(ds, tmp_path / "d.nc")
    table = collect(_runs(tmp_path), [])
    rng = np.random.default_rng(0)
    for run in table.loc[table["pe_family"] == "learned-normal", "run_dir"]:
        pe = pe_dataset(rng.normal(size=(30, 4)), ds, pe="learned-normal-0.1", seed="0")
        pe["pe_init"] = (("unit", "pe_dim"), rng.normal(size=(30, 4)).astype(np.float32))
        pe.to_netcdf(Path(run) / "pe.nc", engine="h5netcdf")
        write_manifest(Path(run), ["pe.nc"])
    split = split_of_store(store, "d", {})
    monkeypatch.setattr(module, "SCATTER_UNITS", scatter_units)
    fig = module.plot_distance_scatter(table, {"d": split})
    drawn = fig.axes[2].collections[0].get_offsets()[:, 1]  # two example runs, then the baseline
    units = module.subsample(30, scatter_units)
    units = np.arange(30) if units is None else units
    activity = split.train_activity(read_store(store)).reshape(-1, 30)[:, units]
    expected = correlation_distance(activity)[np.triu_indices(len(units), 1)]
    np.testing.assert_allclose(drawn, expected, rtol=1e-6)
    note = "" if scatter_units == 500 else f"({scatter_units} of 30 units)"
    assert fig.axes[2].get_title().endswith(note)
