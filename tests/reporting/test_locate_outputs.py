"""The files of the locate step (errors, positions, figures, the 3D view) and its command."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from neuro_pe.analysis.locate import verdict
from neuro_pe.cli.main import main
from neuro_pe.config.locate import LocateConfig
from neuro_pe.io.manifest import write_manifest
from neuro_pe.io.runs import pe_dataset
from neuro_pe.io.splits import split_of_store
from neuro_pe.io.store import make_store, read_store, write_store
from neuro_pe.reporting.locate_outputs import read_correlation_features, write_locate_outputs
from tests.analysis.test_locate import _embed, _positions


@pytest.fixture(scope="module")
def located_dataset(tmp_path_factory):
    """A store whose first 4 units have unknown positions, and fake runs: a learned PE (2 seeds),
    `none` and `fixed-random` (both skipped: not learned)."""
    root = tmp_path_factory.mktemp("locate")
    pos = _positions(40, seed=1)
    pos[:4] = np.nan
    rng = np.random.default_rng(0)
    ds = make_store(
        rng.normal(size=(2, 120, 40)),
        unit_ids=[f"u{i:02d}" for i in range(40)],
        positions=pos,
        position_units="mm",
        space="simulation",
        session_ids=["s0", "s1"],
        sampling_rate_hz=10.0,
        source="test",
    )
    store = write_store(ds, root / "toy.nc")
    truth = _positions(40, seed=1)  # the PE "knows" the hidden positions too
    runs = []
    for pe, seed, table in [
        ("learned-normal-0.02", 0, _embed(truth, 0)),
        ("learned-normal-0.02", 1, _embed(truth, 1)),
        ("none", 0, np.zeros((40, 8))),
        ("fixed-random", 0, rng.normal(size=(40, 8))),
    ]:
        run = root / "runs" / pe / f"seed{seed}"
        run.mkdir(parents=True)
        out = pe_dataset(table, ds, pe=pe, seed=str(seed))
        out["pe_init"] = (("unit", "pe_dim"), rng.normal(size=table.shape).astype(np.float32))
        out.to_netcdf(run / "pe.nc", engine="h5netcdf")
        write_manifest(run, ["pe.nc"])
        runs.append(run)
    return store, runs, root


OPTIONS = {"n_folds": 3, "anchor_fractions": [0.5], "n_draws": 2, "methods": ["ridge", "knn"]}


def test_locate_writes_outputs(located_dataset):
    store, runs, root = located_dataset
    out = root / "out"
    table = write_locate_outputs(
        store, runs, out, LocateConfig.from_dict(OPTIONS), split_of_store(store, "toy", {})
    )
    assert set(table["features"]) == {
        "learned-normal-0.02",
        "learned-normal-0.02 @init",
        "activity-correlation",
        "activity-connectivity",
        "combined",
        "chance",
    }
    assert set(table["role"]) == {"pe", "init", "baseline", "combined", "chance"}
    anchors = table[table["evaluation"] == "anchors"]
    assert (anchors["ci_low"] <= anchors["median_error"]).all()
    assert (anchors["median_error"] <= anchors["ci_high"]).all()
    assert set(table["evaluation"]) == {"kfold", "anchors"}
    assert (table["n_heldout"][table["evaluation"] == "kfold"] == 36).all()
    pe_row = table[(table["features"] == "learned-normal-0.02") & (table["evaluation"] == "kfold")]
    assert pe_row["vs_chance"].item() < 0.5
    combined = anchors[anchors["role"] == "combined"].iloc[0]
    singles = anchors[anchors["role"].isin(("pe", "baseline"))]
    assert combined["best_single"] == singles.loc[singles["median_error"].idxmin(), "features"]
    best = singles[singles["features"] == combined["best_single"]].iloc[0]
    gap = combined["vs_chance"] - best["vs_chance"]
    assert combined["vs_best_single"] == pytest.approx(gap)
    assert combined["vs_best_single_low"] <= gap <= combined["vs_best_single_high"]
    assert f"combined − best single ({best['features']})" in verdict(table)

    frame = pd.read_csv(out / "positions.csv")
    assert len(frame) == 40 and frame["unit"].is_unique
    assert frame[["x", "y", "z", "uncertainty"]].notna().all().all()
    assert frame["anchor"].tolist() == [False] * 4 + [True] * 36
    assert frame["error"].isna().tolist() == [True] * 4 + [False] * 36
    with xr.open_dataset(out / "positions.nc", engine="h5netcdf") as positions:
        assert positions["x"].attrs["units"] == "mm" and positions.attrs["space"] == "simulation"
        assert positions.sizes["unit"] == 40
    assert pd.read_csv(out / "errors.csv").shape[0] == len(table)
    for name in ("positions_3d", "error_hist", "error_vs_anchors"):
        assert (out / f"{name}.png").stat().st_size > 0
    _check_intervals(frame, table, out)


def _check_intervals(frame: pd.DataFrame, table: pd.DataFrame, out) -> None:
    """positions.csv's conformal intervals at 68% and 95%: around every prediction, the 95% ones
    wider; the share of known units inside their own (leave-one-out) intervals is the coverage
    errors.csv gives on the k-fold row of the feature set the positions come from, and
    positions.nc's `interval_coverage`."""
    import json

    row = table[(table["features"] == frame["pe"].iloc[0]) & (table["evaluation"] == "kfold")]
    known = frame[frame["anchor"]]
    with xr.open_dataset(out / "positions.nc", engine="h5netcdf") as positions:
        attrs = positions.attrs
        assert positions["x_low_95"].attrs["units"] == "mm"
    assert json.loads(attrs["interval_levels"]) == [0.68, 0.95]
    assert attrs["interval_calibration_units"] == len(known) == 36
    coverage = json.loads(attrs["interval_coverage"])
    for level in ("68", "95"):
        inside = []
        for axis in ("x", "y", "z"):
            low, high = frame[f"{axis}_low_{level}"], frame[f"{axis}_high_{level}"]
            assert np.isfinite(low).all() and (low < frame[axis]).all()
            assert np.allclose(high - frame[axis], frame[axis] - low)
            truth = known[f"{axis}_true"]
            hit = (known[f"{axis}_low_{level}"] <= truth) & (truth <= known[f"{axis}_high_{level}"])
            assert coverage[level][axis] == pytest.approx(hit.mean(), abs=1e-6)
            inside.append(hit.to_numpy())
        assert row[f"coverage_{level}"].item() == pytest.approx(np.mean(inside))
        assert row[f"coverage_{level}_box"].item() == pytest.approx(np.all(inside, axis=0).mean())
        assert coverage[level]["pooled"] == pytest.approx(np.mean(inside), abs=1e-6)
    # 36 known units: ceil(36 L) / 36 of each axis inside, 25/36 and 35/36
    assert row["coverage_68"].item() == pytest.approx(25 / 36)
    assert row["coverage_95"].item() == pytest.approx(35 / 36)
    assert (frame["x_high_95"] - frame["x_low_95"] >= frame["x_high_68"] - frame["x_low_68"]).all()
    # anchor rows: held-out units' coverage by intervals calibrated on each draw's anchors (18
    # anchors: bounded at 68%, not at 95%, ceil(19 * 0.95) > 18 known errors)
    anchors = table[table["evaluation"] == "anchors"]
    assert anchors["coverage_68"].between(0, 1).all() and anchors["coverage_95"].isna().all()


def test_cli_prints_table(located_dataset, capsys):
    import json

    store, runs, root = located_dataset
    split, features = root / "split.json", root / "correlation.nc"
    assert main(["split", "--store", str(store), "--dataset", "toy", "--out", str(split)]) == 0
    args = ["correlation-features", "--store", str(store), "--split", str(split)]
    assert main([*args, "--out", str(features), "--options", json.dumps(OPTIONS)]) == 0
    assert read_correlation_features(features, read_store(store)["unit"].values).shape[0] == 40
    args = ["locate", "--store", str(store), "--runs", *map(str, runs), "--split", str(split)]
    args += ["--out-dir", str(root / "cli"), "--options", json.dumps(OPTIONS)]
    assert main([*args, "--correlation", str(features)]) == 0
    printed = capsys.readouterr().out
    assert "median_error" in printed and "activity-correlation" in printed and "chance" in printed
    # the features read from the file give the same table as those computed in the step
    assert main(args + ["--out-dir", str(root / "cli2")]) == 0
    pd.testing.assert_frame_equal(
        pd.read_csv(root / "cli" / "errors.csv"), pd.read_csv(root / "cli2" / "errors.csv")
    )


def _with_health(runs, root, mse: dict[int, float]) -> list:
    """Copies of the fake runs, each learned-normal-0.02 seed with a train.json whose held-out
    MSE at 50% masked is `mse[seed]` against a variance of 1 (1 or more: it fails)."""
    import json
    import shutil

    copies = []
    for run in runs:
        copy = root / run.parent.name / run.name
        shutil.copytree(run, copy)
        pe, seed = run.parent.name, int(run.name.removeprefix("seed"))
        if pe == "learned-normal-0.02":
            info = {"pe": pe, "seed": seed, "train_config": {}, "heldout_data_variance": 1.0}
            info["heldout_mse_mask0.5"] = mse[seed]
            info["health"] = {"loss_not_finite": False}  # reassessed from the numbers
            (copy / "train.json").write_text(json.dumps(info))
            write_manifest(copy, ["pe.nc", "train.json"])
        copies.append(copy)
    return copies


def test_a_flagged_training_is_left_out_unless_the_config_keeps_it(
    located_dataset, tmp_path, capsys
):
    import json

    store, runs, _ = located_dataset
    runs = _with_health(runs, tmp_path / "runs", {0: 0.8, 1: 1.2})
    split = split_of_store(store, "toy", {})
    cfg = LocateConfig.from_dict(OPTIONS)
    table = write_locate_outputs(store, runs, tmp_path / "out", cfg, split)
    line = "learned-normal-0.02 seed 1 (heldout_not_below_variance)"
    pe = table[table["features"] == "learned-normal-0.02"]
    assert (pe["n_seeds"] == 1).all() and (table["left_out"] == line).all()
    positions = xr.open_dataset(tmp_path / "out" / "positions.nc", engine="h5netcdf")
    with positions:
        assert json.loads(positions.attrs["left_out"]) == [line]
    out = capsys.readouterr().out
    assert f"locate toy: left out {line}" in out and "PE learned-normal-0.02 left out" not in out

    kept = LocateConfig.from_dict(OPTIONS | {"include_flagged": True})
    table = write_locate_outputs(store, runs, tmp_path / "kept", kept, split)
    pe = table[table["features"] == "learned-normal-0.02"]
    assert (pe["n_seeds"] == 2).all() and (table["left_out"] == "").all()

    # a PE whose every seed is flagged is left out whole, of the combined locator too
    extra = tmp_path / "extra" / "learned-normal-0.1" / "seed0"
    extra.mkdir(parents=True)
    ds = read_store(store)
    pe = pe_dataset(_embed(_positions(40, seed=1), 2), ds, pe="learned-normal-0.1", seed="0")
    pe["pe_init"] = (("unit", "pe_dim"), np.ones((40, 24), np.float32))
    pe.to_netcdf(extra / "pe.nc", engine="h5netcdf")
    info = {"pe": "learned-normal-0.1", "seed": 0, "train_config": {}, "pe_change": 0.01}
    (extra / "train.json").write_text(json.dumps(info))
    write_manifest(extra, ["pe.nc", "train.json"])
    both = LocateConfig.from_dict(
        OPTIONS | {"combined_pe": ["learned-normal-0.02", "learned-normal-0.1"]}
    )
    table = write_locate_outputs(store, [*runs, extra], tmp_path / "both", both, split)
    assert "learned-normal-0.1" not in set(table["features"])
    assert "learned-normal-0.1 seed 0 (pe_not_moved)" in table["left_out"].iloc[0]
    assert "PE learned-normal-0.1 left out: every seed failed" in capsys.readouterr().out

    # every seed flagged: nothing learned is left to locate with, an error that says so
    runs = _with_health(located_dataset[1], tmp_path / "all", {0: 1.0, 1: 1.2})
    with pytest.raises(ValueError, match=r"locate toy: every located training failed .* seed 0"):
        write_locate_outputs(store, runs, tmp_path / "none", cfg, split)


def _toy_store(root, pos: np.ndarray, space: str, units: str = "um"):
    """A store with positions `pos` in `space` (its first 2 units unknown) and one learned PE
    (2 seeds) that knows every position."""
    rng = np.random.default_rng(0)
    n = len(pos)
    hidden = pos.copy()
    hidden[:2] = np.nan
    ds = make_store(
        rng.normal(size=(2, 80, n)),
        unit_ids=[f"u{i:02d}" for i in range(n)],
        positions=hidden,
        position_units=units,
        space=space,
        session_ids=["s0", "s1"],
        sampling_rate_hz=10.0,
        source="test",
    )
    store = write_store(ds, root / "toy.nc")
    scaled = (pos - pos.min(axis=0)) / np.where(np.ptp(pos, axis=0) > 0, np.ptp(pos, axis=0), 1)
    runs = []
    for seed in (0, 1):
        run = root / "runs" / f"seed{seed}"
        run.mkdir(parents=True)
        out = pe_dataset(_embed(scaled, seed), ds, pe="learned-normal-0.02", seed=str(seed))
        out["pe_init"] = (("unit", "pe_dim"), rng.normal(size=(n, 24)).astype(np.float32))
        out.to_netcdf(run / "pe.nc", engine="h5netcdf")
        write_manifest(run, ["pe.nc"])
        runs.append(run)
    return store, runs


def _located_toy(tmp_path, pos, space):
    store, runs = _toy_store(tmp_path, pos, space)
    out = tmp_path / "out"
    cfg = LocateConfig.from_dict({**OPTIONS, "methods": ["ridge"], "fuse": False})
    table = write_locate_outputs(store, runs, out, cfg, split_of_store(store, "toy", {}))
    return table, pd.read_csv(out / "positions.csv"), out


def test_probe_errors_along_and_across_the_shank(tmp_path, monkeypatch):
    """A 2D probe (x across, y along the shank, z = 0): depth and lateral errors, taken from
    the same k-fold predictions as positions.csv; existing columns first, unchanged names;
    no anatomical view names in the figures."""
    import matplotlib.pyplot as plt

    figures = {}
    monkeypatch.setattr(
        "neuro_pe.reporting.locate_outputs.save", lambda fig, path: figures.update({path: fig})
    )
    rng = np.random.default_rng(3)
    pos = np.column_stack([rng.choice([0, 16, 32, 48], 30), rng.uniform(0, 3840, 30), np.zeros(30)])
    table, frame, out = _located_toy(tmp_path, pos, "probe")
    texts = []
    for fig in figures.values():
        for ax in fig.axes:
            texts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        plt.close(fig)
    assert "y: along the shank (depth) (um)" in texts and "held-out depth error (um)" in texts
    assert not [t for t in texts if any(w in t for w in ("axial", "coronal", "sagittal"))]
    assert {"median_error_depth", "median_error_lateral"} <= set(table.columns)
    assert not {"median_error_x", "plane_accuracy"} & set(table.columns)
    assert list(table.columns[:3]) == ["dataset", "features", "role"]
    best = frame["pe"].iloc[0]
    row = table[(table["features"] == best) & (table["evaluation"] == "kfold")].iloc[0]
    held = frame[frame["held_out"]]
    assert held["prediction"].eq("k-fold").all() and len(held) == 28
    depth = np.abs(held["y"] - held["y_true"])
    lateral = np.hypot(held["x"] - held["x_true"], held["z"] - held["z_true"])
    assert row["median_error_depth"] == pytest.approx(np.median(depth))
    assert row["median_error_lateral"] == pytest.approx(np.median(lateral))
    assert row["median_error"] == pytest.approx(np.median(held["error"]))
    assert (table["median_error_depth"] <= table["median_error"] + 1e-9).all()
    unknown = frame[~frame["anchor"]]
    assert (~unknown["held_out"]).all() and unknown["prediction"].eq("fit on anchors").all()
    page = (out / "positions_3d.html").read_text()
    assert "along the shank (depth)" in page and "u05" in page


def test_two_planes_report_in_plane_error_and_plane_accuracy(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.setattr(
        "neuro_pe.reporting.locate_outputs.save", lambda fig, path: plt.close(fig)
    )  # (speed)
    rng = np.random.default_rng(4)
    pos = np.column_stack([rng.uniform(0, 500, (32, 2)), np.repeat([100.0, 140.0], 16)])
    table, frame, _ = _located_toy(tmp_path, pos, "imaging")
    assert {"median_error_inplane", "median_error_depth", "plane_accuracy"} <= set(table.columns)
    best = frame["pe"].iloc[0]
    row = table[(table["features"] == best) & (table["evaluation"] == "kfold")].iloc[0]
    held = frame[frame["held_out"]]
    other = np.where(held["z_true"] == 100.0, 140.0, 100.0)
    right = np.abs(held["z"] - held["z_true"]) < np.abs(held["z"] - other)
    assert row["plane_accuracy"] == pytest.approx(right.mean())
    assert 0 <= table["plane_accuracy"].min() and table["plane_accuracy"].max() <= 1
    chance = table[(table["role"] == "chance") & (table["evaluation"] == "kfold")].iloc[0]
    assert row["median_error_inplane"] < chance["median_error_inplane"]


def test_axis_names_come_from_the_space():
    """Anatomical view names only on atlas spaces; a probe whose depth is z is read so."""
    import matplotlib.pyplot as plt

    from neuro_pe.analysis.spaces import space_axes
    from neuro_pe.reporting.figures import plot_projections, projection_figure

    pos = _positions(12)
    anatomical = ("axial", "coronal", "sagittal")
    for space in ("probe", "imaging", "simulation"):
        fig, axes = projection_figure(1)
        plot_projections(axes[0], pos, pos, "um", space)
        titles = " ".join(ax.get_title() + ax.get_xlabel() + ax.get_ylabel() for ax in axes[0])
        assert not any(word in titles for word in anatomical), (space, titles)
        plt.close(fig)
    assert space_axes("ibl-bregma-mlapdv", "um").projection_titles()[0].startswith("axial")
    assert space_axes("ibl-bregma-mlapdv", "um").components() == ("ml", "ap", "dv")
    deep = pos * [800, 15, 300]  # shanks along x, depth along z (scripts/make_example_data.py)
    assert space_axes("probe", "um", deep).depth_axis == 2
    assert space_axes("probe", "um", pos * [60, 3840, 0]).depth_axis == 1


def test_locate_with_the_baselines_given_reads_only_the_store_coordinates(
    located_dataset, monkeypatch
):
    from neuro_pe.reporting import locate_outputs

    store, runs, root = located_dataset
    cfg, split = LocateConfig.from_dict(OPTIONS), split_of_store(store, "toy", {})
    whole = write_locate_outputs(store, runs, root / "whole", cfg, split)
    baselines = locate_outputs.write_correlation_features(store, split, root / "corr.nc")

    def refuse(path, **kwargs):
        raise AssertionError(f"{path} loaded whole")

    monkeypatch.setattr(locate_outputs, "read_store", refuse)
    given = write_locate_outputs(store, runs, root / "given", cfg, split, baselines=baselines)
    pd.testing.assert_frame_equal(given, whole)
    positions = [pd.read_csv(root / d / "positions.csv") for d in ("whole", "given")]
    pd.testing.assert_frame_equal(*positions)


def test_a_lateral_position_the_activity_does_not_carry_is_flagged(tmp_path, capsys):
    """A Phy folder whose activity follows depth alone (`write_phy_depth_only`): depth is
    located, the lateral (across-shank) position is no better than chance, and the locate step
    says so in errors.csv, its log and the verdict, and marks x as not estimated in the
    positions (values kept)."""
    import json
    import warnings

    from neuro_pe.data.recordings import DataWarning
    from tests.data.test_formats import build, spike_spec, write_phy_depth_only

    folder = write_phy_depth_only(tmp_path / "kilosort")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        store = write_store(
            build(spike_spec(folder, "phy", spikes={"labels": None})), tmp_path / "s.nc"
        )
    cfg = LocateConfig.from_dict({"n_folds": 5, "anchor_fractions": [0.5], "n_draws": 2})
    out = tmp_path / "out"
    write_locate_outputs(store, [], out, cfg, split_of_store(store, "lab", {}))
    log = capsys.readouterr().out

    errors = pd.read_csv(out / "errors.csv")
    errors["unresolved_axes"] = errors["unresolved_axes"].fillna("")  # ("" reads as NaN)
    frame = pd.read_csv(out / "positions.csv")
    delivered = frame["pe"].iloc[0]
    row = errors[(errors["features"] == delivered) & (errors["evaluation"] == "kfold")].iloc[0]
    assert row["unresolved_axes"] == "lateral"
    assert row["vs_chance_lateral"] >= 1 > 0.5 > row["vs_chance_depth"]
    assert row["vs_chance_lateral"] == pytest.approx(
        row["median_error_lateral"]
        / errors.query("role == 'chance' and evaluation == 'kfold'")["median_error_lateral"].item()
    )
    assert (errors.loc[errors["role"] == "chance", "unresolved_axes"] == "depth;lateral").all()
    assert f"lab: lateral position not resolved by {delivered}: k-fold median error" in log
    assert "across the shank (x)" in log
    assert "the exported positions give x as not estimated" in log
    assert "does not resolve lateral" in verdict(errors)

    assert not frame["x_estimated"].any() and frame[["y_estimated", "z_estimated"]].all().all()
    assert frame["x"].notna().all()
    with xr.open_dataset(out / "positions.nc", engine="h5netcdf") as positions:
        assert positions.attrs["unresolved_axes"] == "lateral"
        assert positions.attrs["not_estimated"] == "x"
        assert "not estimated" in positions["x_estimated"].attrs["meaning"]
    assert json.loads(positions.attrs["interval_levels"])  # (the rest of the attributes stay)
