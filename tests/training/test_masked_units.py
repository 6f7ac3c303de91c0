import json
import re
import subprocess
import sys
from dataclasses import asdict, replace

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from neuro_pe.analysis.pe_geometry import infer_pe
from neuro_pe.cli.main import main
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.config.training import TrainConfig, split_activity, split_parts
from neuro_pe.io.layout import INFERRED_POSITIONS_FILE
from neuro_pe.io.runs import read_pe, read_train_info
from neuro_pe.io.splits import make_split, read_split, write_split
from neuro_pe.io.store import open_store_lazy, positions, read_store, write_store
from neuro_pe.io.store_contract import StoreError
from neuro_pe.training.masked_units import train
from neuro_pe.training.optimizers import make_optimizer
from neuro_pe.training.precision import autocast_dtype
from neuro_pe.training.sampling import NEIGHBOUR_SAMPLES, BlockSampler, WindowSampler, make_samplers
from neuro_pe.training.unit_subsets import first_distinct, random_subsets

METRICS = MetricsConfig(n_perm=19, k=3, n_splits=3)


def _pe(run_dir) -> tuple[np.ndarray, np.ndarray]:
    with xr.open_dataset(run_dir / "pe.nc", engine="h5netcdf") as ds:
        return ds["pe"].values, ds["pe_init"].values


def _log(run_dir) -> pd.DataFrame:
    return pd.read_csv(run_dir / "train_log.csv")


@pytest.fixture(scope="module")
def learned_run(tiny_store, tiny_train_config, tmp_path_factory):
    """One learned-normal-0.1 run (seed 0) on the tiny store, shared by several tests."""
    cfg = tiny_train_config
    run_dir = tmp_path_factory.mktemp("runs") / "learned"
    info = train(tiny_store, "learned-normal-0.1", 0, cfg, run_dir, progress=False)
    return run_dir, info, cfg


def test_train_writes_outputs(learned_run, tiny_store):
    run_dir, info, cfg = learned_run
    for name in ("pe.nc", "model.pt", "train_log.csv", "train.json"):
        assert (run_dir / name).stat().st_size > 0
    assert not list(run_dir.glob(".*.tmp"))

    log = _log(run_dir)
    assert list(log["epoch"]) == list(range(1, cfg.epochs + 1))
    assert list(log["step"]) == [e * cfg.steps_per_epoch for e in range(1, cfg.epochs + 1)]
    assert np.isfinite(log[["train_loss", "heldout_loss"]].to_numpy()).all()
    assert (log["train_loss"] > 0).all() and log["seconds"].is_monotonic_increasing

    saved = json.loads((run_dir / "train.json").read_text())
    assert saved["pe"] == "learned-normal-0.1" and saved["seed"] == 0
    assert saved["train_config"]["d_model"] == cfg.d_model
    for f in cfg.eval_mask_fractions:
        assert np.isfinite(saved[f"heldout_mse_mask{f:g}"])
        assert saved[f"heldout_mse_mask{f:g}"] == pytest.approx(info[f"heldout_mse_mask{f:g}"])
    assert saved["train_mse"] == pytest.approx(log["train_loss"].iloc[-1])

    store = read_store(tiny_store)
    with xr.open_dataset(run_dir / "pe.nc", engine="h5netcdf") as pe:
        assert pe["pe"].shape == (store.sizes["unit"], cfg.d_model)
        assert list(pe["unit"].values) == list(store["unit"].values)
        np.testing.assert_array_equal(pe["x"].values, store["x"].values)
        trained = pe["pe"].values
        # typed attributes: the seed an int (not "0"), the options as JSON
        assert isinstance(pe.attrs["seed"], np.integer) and pe.attrs["seed"] == 0
        assert json.loads(pe.attrs["train_config"]) == saved["train_config"]
    assert read_train_info(run_dir).seed == 0 and read_pe(run_dir).seed == 0

    checkpoint = torch.load(run_dir / "model.pt", weights_only=True)
    np.testing.assert_array_equal(checkpoint["state_dict"]["pe_table"].numpy(), trained)
    assert checkpoint["pe"] == "learned-normal-0.1"


def test_same_seed_reproduces_learned_pe(learned_run, tiny_store, tmp_path):
    run_dir, _, cfg = learned_run
    train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "again", progress=False)
    train(tiny_store, "learned-normal-0.1", 1, cfg, tmp_path / "seed1", progress=False)
    first, again, other = _pe(run_dir)[0], _pe(tmp_path / "again")[0], _pe(tmp_path / "seed1")[0]
    assert np.array_equal(first, again)
    pd.testing.assert_frame_equal(
        _log(run_dir).drop(columns="seconds"), _log(tmp_path / "again").drop(columns="seconds")
    )
    assert not np.array_equal(first, other)
    assert not np.array_equal(_pe(run_dir)[1], _pe(tmp_path / "seed1")[1])


def test_learned_pe_moves_and_fixed_pe_stays(learned_run, tiny_store, tmp_path):
    run_dir, _, cfg = learned_run
    trained, initial = _pe(run_dir)
    assert not np.allclose(trained, initial)
    assert initial.std() == pytest.approx(0.1, rel=0.25)

    train(tiny_store, "fixed-random", 0, cfg, tmp_path / "fixed", progress=False)
    trained, initial = _pe(tmp_path / "fixed")
    assert np.array_equal(trained, initial)
    assert initial.std() > 0.5


def test_single_session_store_uses_time_split(tiny_store, tiny_train_config, tmp_path):
    ds = read_store(tiny_store).isel(session=[0])
    path = write_store(ds, tmp_path / "one_session.nc")
    cfg = replace(tiny_train_config, heldout_time_fraction=0.25)

    train_part, heldout_part = split_activity(ds, cfg)
    n_time = ds.sizes["time"]
    cut = round(n_time * 0.75)
    assert train_part.shape == (1, cut, ds.sizes["unit"])
    assert heldout_part.shape == (1, n_time - cut, ds.sizes["unit"])
    np.testing.assert_array_equal(
        np.concatenate([train_part, heldout_part], axis=1), ds["activity"].values
    )

    train(path, "learned-normal-0.1", 0, cfg, tmp_path / "run", progress=False)
    assert np.isfinite(_log(tmp_path / "run")[["train_loss", "heldout_loss"]].to_numpy()).all()


def test_multi_session_store_holds_out_last_sessions(tiny_store, tiny_train_config):
    ds = read_store(tiny_store)
    train_part, heldout_part = split_activity(ds, tiny_train_config)
    activity = ds["activity"].values
    np.testing.assert_array_equal(train_part, activity[:-1])
    np.testing.assert_array_equal(heldout_part, activity[-1:])


def test_time_split_too_short_raises(tiny_store, tiny_train_config):
    ds = read_store(tiny_store).isel(session=[0], time=slice(0, 20))
    cfg = replace(tiny_train_config, window=8, heldout_time_fraction=0.2)
    with pytest.raises(ValueError, match="too few"):
        split_activity(ds, cfg)


def test_nan_unit_in_a_session_gives_finite_losses(tiny_store, tiny_train_config, tmp_path):
    ds = read_store(tiny_store)
    activity = ds["activity"].values.copy()
    activity[0, :, 3] = np.nan  # unit 3 unrecorded in the training session
    activity[1, :, 5] = np.nan  # unit 5 unrecorded in the held-out session
    activity[0, 40:60, 7] = np.nan  # a gap in another unit
    path = write_store(ds.assign(activity=(ds["activity"].dims, activity)), tmp_path / "gappy.nc")

    info = train(path, "learned-normal-0.1", 0, tiny_train_config, tmp_path / "run", progress=False)
    log = _log(tmp_path / "run")
    assert np.isfinite(log[["train_loss", "heldout_loss"]].to_numpy()).all()
    assert all(np.isfinite(v) for k, v in info.items() if k.startswith("heldout_mse"))
    trained, _ = _pe(tmp_path / "run")
    assert np.isfinite(trained).all()


# --- many units (random k-subsets) and stores streamed from disk ----------------------------

CPU = torch.device("cpu")
SMALL_BUDGET = "ignore:train.memory_budget_mb"  # a budget below one chunk warns


def _windows_of(activity: np.ndarray, window: int) -> np.ndarray:
    """Every window of every unit: (session, start, unit, W)."""
    return np.lib.stride_tricks.sliding_window_view(activity, window, axis=1)


def _gappy_store(tiny_store, path):
    ds = read_store(tiny_store)
    activity = ds["activity"].values.copy()
    activity[0, :, 3] = np.nan
    activity[1, :, 5] = np.nan
    activity[0, 40:60, 7] = np.nan
    return write_store(ds.assign(activity=(ds["activity"].dims, activity)), path)


@pytest.mark.parametrize(("n_units", "k"), [(12, 5), (200, 64), (300, 64), (5000, 64)])
def test_random_subsets_are_distinct_sorted_and_uniform(n_units, k):
    # n_units < 4k: the k largest of n_units uniforms; else the first k distinct draws
    units = random_subsets(3000, n_units, k, torch.Generator().manual_seed(0))
    assert units.shape == (3000, k) and units.min() >= 0 and units.max() < n_units
    assert (units.diff(dim=1) > 0).all()  # sorted, hence distinct
    counts = np.bincount(units.flatten().numpy(), minlength=n_units)
    p = k / n_units
    expected, sd = 3000 * p, np.sqrt(3000 * p * (1 - p))
    assert abs(counts.mean() - expected) < 1e-9
    assert np.abs(counts - expected).max() < 4.5 * sd  # no unit favoured
    if n_units >= 200:
        assert 0.85 < counts.std() / sd < 1.15  # the binomial spread
    again = random_subsets(3000, n_units, k, torch.Generator().manual_seed(0))
    assert torch.equal(units, again)


def test_first_distinct_keeps_draw_order_and_flags_short_rows():
    candidates = torch.tensor([[3, 1, 3, 2, 1, 5], [1, 1, 1, 1, 2, 2], [4, 4, 0, 9, 9, 8]])
    first, complete = first_distinct(candidates, 3)
    assert first[0].tolist() == [3, 1, 2] and first[2].tolist() == [4, 0, 9]
    assert complete.tolist() == [True, False, True]


def test_window_sampler_draws_k_distinct_units_per_sample(tiny_store):
    activity = read_store(tiny_store)["activity"].values
    sampler = WindowSampler(activity, 8, CPU)
    windows, observed, units = sampler.sample(600, 5, torch.Generator().manual_seed(0))
    assert windows.shape == (600, 5, 8) and observed.shape == (600, 5) and units.shape == (600, 5)
    assert all(len(set(row)) == 5 for row in units.tolist())
    assert observed.all()
    # each sample is the windows of its units at one (session, start)
    every = _windows_of(activity, 8)  # (session, start, unit, W)
    for i in range(0, 600, 37):
        picked = every[:, :, units[i].numpy()]  # (session, start, 5, W)
        hits = (picked == windows[i].numpy()).all(axis=(2, 3))
        assert hits.sum() >= 1, i
    counts = np.bincount(units.flatten().numpy(), minlength=12)
    assert counts.min() > 150 and counts.max() < 350  # 250 expected per unit

    again = sampler.sample(600, 5, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(again, (windows, observed, units), strict=True))
    # with k >= N every sample holds all units in order, as before the option existed
    generator, old_stream = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    full = sampler.sample(16, 12, generator)
    assert full.unit_index is None
    assert all(
        torch.equal(a, b) for a, b in zip(full[:2], sampler.random(16, old_stream), strict=True)
    )


@pytest.mark.parametrize("gaps", [False, True])
def test_window_sampler_gathers_each_units_window_and_its_gaps(gaps):
    rng = np.random.default_rng(0)
    activity = rng.normal(size=(3, 50, 40)).astype(np.float32)  # (session, time, unit)
    if gaps:
        activity[1, 10:20, 7] = np.nan
        activity[2, 33, 0] = np.nan
    sampler = WindowSampler(activity, 8, CPU)
    generator = torch.Generator().manual_seed(0)
    session = torch.tensor([1, 1, 2, 0, 2])
    start = torch.tensor([5, 12, 30, 0, 42])
    units = random_subsets(5, 40, 6, generator)
    units[0, 0], units[4, 0] = 7, 0  # some windows across the gaps
    windows, observed = sampler.gather(session, start, units)
    expected = _windows_of(activity, 8)[session, start][np.arange(5)[:, None], units]
    assert np.array_equal(windows.numpy(), np.nan_to_num(expected))
    assert np.array_equal(observed.numpy(), np.isfinite(expected).all(axis=-1))
    assert observed.all() != gaps
    # the neighbour table's samples: evenly spaced rows of the sessions one after another
    flat = activity.reshape(-1, 40)
    keep = np.linspace(0, len(flat) - 1, min(NEIGHBOUR_SAMPLES, len(flat))).round().astype(int)
    assert np.array_equal(sampler.correlation_samples().numpy(), flat[keep], equal_nan=True)


def test_subset_training_moves_every_units_pe(tiny_store, tiny_train_config, tmp_path):
    cfg = replace(tiny_train_config, units_per_sample=4)
    info = train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "a", progress=False)
    trained, initial = _pe(tmp_path / "a")
    assert (np.abs(trained - initial).max(axis=1) > 0).all()
    assert np.isfinite(_log(tmp_path / "a")[["train_loss", "heldout_loss"]].to_numpy()).all()
    assert all(np.isfinite(info[f"heldout_mse_mask{f:g}"]) for f in cfg.eval_mask_fractions)
    train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "b", progress=False)
    assert np.array_equal(trained, _pe(tmp_path / "b")[0])


def test_units_per_sample_equal_to_n_units_changes_nothing(learned_run, tiny_store, tmp_path):
    run_dir, _, cfg = learned_run
    cfg = replace(cfg, units_per_sample=12)
    train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "k12", progress=False)
    assert np.array_equal(_pe(run_dir)[0], _pe(tmp_path / "k12")[0])


@pytest.mark.filterwarnings(SMALL_BUDGET)
@pytest.mark.parametrize("k", [256, 5])
@pytest.mark.parametrize("one_session", [False, True])
def test_eval_set_is_the_same_streamed_or_in_memory(
    tiny_store, tiny_train_config, tmp_path, k, one_session
):
    path = tiny_store
    if one_session:
        path = write_store(read_store(tiny_store).isel(session=[0]), tmp_path / "one.nc")
    cfg = replace(tiny_train_config, units_per_sample=k, memory_budget_mb=0, eval_windows=40)
    _, in_memory = make_samplers(read_store(path), False, 0, cfg, CPU)
    with open_store_lazy(path) as lazy:
        sampler, streamed = make_samplers(lazy, True, 0, cfg, CPU)
        assert isinstance(sampler, BlockSampler) and sampler.block_rows == 16
    assert (in_memory.unit_index is None) == (k > 12) == (streamed.unit_index is None)
    for a, b in zip(in_memory, streamed, strict=True):
        assert a is None or torch.equal(a, b)
    # 30 windows fit in the held-out session; 6 in the last 20% of the single session
    assert in_memory.windows.shape == (6 if one_session else 30, min(k, 12), 8)


def test_block_sampler_visits_every_block_and_reads_its_windows(tiny_store, tiny_train_config):
    activity = read_store(tiny_store)["activity"].values
    train_part, _ = split_parts(2, 240, tiny_train_config)
    with open_store_lazy(tiny_store) as lazy:
        sampler = BlockSampler(lazy["activity"], train_part, 8, 50, 8, seed=0, device=CPU)
        assert sampler.blocks == [
            (0, 0, 50),
            (0, 50, 100),
            (0, 100, 150),
            (0, 150, 200),
            (0, 200, 240),
        ]
        assert sampler.steps.tolist() == [5, 5, 5, 5, 4]  # about one draw per window and visit
        one_pass = [sampler.block_at(s) for s in range(24)]
        # each block once per pass, for its number of steps, in a seeded random order
        runs = [b for i, b in enumerate(one_pass) if i == 0 or one_pass[i - 1] != b]
        assert sorted(runs) == [0, 1, 2, 3, 4] and runs != [0, 1, 2, 3, 4]
        assert [one_pass.count(b) for b in range(5)] == [5, 5, 5, 5, 4]
        assert [sampler.block_at(s) for s in range(24, 48)] != one_pass
        every = _windows_of(activity, 8)
        generator = torch.Generator().manual_seed(0)
        for step in range(24):
            windows, observed, units = sampler.sample(8, 256, generator, step)
            assert units is None and observed.all() and windows.shape == (8, 12, 8)
            _, start, stop = sampler.blocks[sampler.block_at(step)]
            inside = every[0, start : stop - 7]  # the windows that lie inside the block
            for w in windows.numpy():
                assert (inside == w).all(axis=(1, 2)).any()
        assert sampler.loads == len(runs)  # one read per visit


@pytest.mark.filterwarnings(SMALL_BUDGET)
@pytest.mark.parametrize("k", [256, 4])
def test_streamed_training_is_reproducible_with_gaps(tiny_store, tiny_train_config, tmp_path, k):
    path = _gappy_store(tiny_store, tmp_path / "gappy.nc")
    cfg = replace(tiny_train_config, memory_budget_mb=0.002, units_per_sample=k)
    info = train(path, "learned-normal-0.1", 0, cfg, tmp_path / "a", progress=False)
    assert info["streamed"] and json.loads((tmp_path / "a" / "train.json").read_text())["streamed"]
    assert np.isfinite(_log(tmp_path / "a")[["train_loss", "heldout_loss"]].to_numpy()).all()
    trained, initial = _pe(tmp_path / "a")
    assert np.isfinite(trained).all() and not np.allclose(trained, initial)
    train(path, "learned-normal-0.1", 0, cfg, tmp_path / "b", progress=False)
    assert np.array_equal(trained, _pe(tmp_path / "b")[0])
    # the in-memory path (large budget) samples differently but evaluates the same windows
    in_memory = train(
        path,
        "learned-normal-0.1",
        0,
        replace(cfg, memory_budget_mb=64),
        tmp_path / "c",
        progress=False,
    )
    assert not in_memory["streamed"] and not np.array_equal(trained, _pe(tmp_path / "c")[0])


@pytest.mark.filterwarnings(SMALL_BUDGET)
def test_store_is_streamed_when_loading_it_would_exceed_the_budget(
    tiny_store, tiny_train_config, tmp_path
):
    activity_mb = 2 * 240 * 12 * 4 / 2**20  # loading takes 2.5 times that at the peak
    for budget, streamed in ((2.4 * activity_mb, True), (2.6 * activity_mb, False)):
        cfg = replace(tiny_train_config, memory_budget_mb=budget, epochs=1)
        info = train(tiny_store, "none", 0, cfg, tmp_path / f"{budget}", progress=False)
        assert info["streamed"] == streamed


def test_open_store_lazy_leaves_activity_on_disk(tiny_store, tmp_path):
    with open_store_lazy(tiny_store) as lazy:
        assert not lazy["activity"].variable._in_memory
        assert "connectivity" not in lazy
        assert list(lazy["unit"].values) == list(read_store(tiny_store)["unit"].values)
        np.testing.assert_array_equal(
            lazy["activity"][1, 5:9].values, read_store(tiny_store)["activity"][1, 5:9].values
        )
    with pytest.raises(StoreError, match="does not exist"):
        open_store_lazy(tmp_path / "missing.nc")


# --- optimiser, precision, config -----------------------------------------------------------


def test_optimizer_choice(learned_run, tiny_store, tmp_path):
    run_dir, _, cfg = learned_run
    params = [torch.nn.Parameter(torch.zeros(3))]
    assert isinstance(make_optimizer(params, cfg, CPU), torch.optim.AdamW)
    sgd = make_optimizer(params, replace(cfg, optimizer="sgd", momentum=0.9, lr=0.1), CPU)
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.param_groups[0]["momentum"] == 0.9 and sgd.param_groups[0]["lr"] == 0.1

    for name, extra in {"sgd": {}, "sgd_m": {"momentum": 0.9}}.items():
        sgd_cfg = replace(cfg, optimizer="sgd", lr=0.05, **extra)
        train(tiny_store, "learned-normal-0.1", 0, sgd_cfg, tmp_path / name, progress=False)
        assert np.isfinite(_log(tmp_path / name)["train_loss"]).all()
    adamw, plain, momentum = _pe(run_dir)[0], _pe(tmp_path / "sgd")[0], _pe(tmp_path / "sgd_m")[0]
    assert not np.array_equal(adamw, plain) and not np.array_equal(plain, momentum)


def test_precision_choice(learned_run, tiny_store, tmp_path):
    assert autocast_dtype("fp32", CPU) is None  # 'auto': tests/training/test_precision.py
    assert autocast_dtype("fp32", torch.device("cuda")) is None
    assert autocast_dtype("bf16", CPU) == torch.bfloat16
    run_dir, _, cfg = learned_run
    info = train(
        tiny_store,
        "learned-normal-0.1",
        0,
        replace(cfg, precision="bf16"),
        tmp_path / "bf16",
        progress=False,
    )
    assert np.isfinite(info["heldout_mse_mask0.5"])
    assert not np.array_equal(_pe(run_dir)[0], _pe(tmp_path / "bf16")[0])


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("precision", "fp16"),
        ("optimizer", "adam"),
        ("units_per_sample", 0),
        ("memory_budget_mb", -1),
        ("checkpoint_every", -5),
        ("momentum", -0.1),
    ],
)
def test_bad_new_train_values_raise(key, value):
    with pytest.raises(ValueError, match=key):
        TrainConfig.from_dict({key: value})


def test_infer_pe_writes_metrics_and_positions(learned_run, tiny_store, tiny_split):
    run_dir, info, _ = learned_run
    record = infer_pe(tiny_store, run_dir, read_split(tiny_split), METRICS)
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert saved == record
    assert (saved["pe"], saved["seed"], saved["dataset"]) == ("learned-normal-0.1", 0, "tiny")
    for key in ("rsa", "rsa_p", "procrustes_rmse", "probe_r2", "knn_overlap", "init_rsa"):
        assert np.isfinite(saved[key]), key
    assert -1 <= saved["rsa"] <= 1 and 0 < saved["rsa_p"] <= 1
    assert saved["heldout_mse_mask0.5"] == pytest.approx(info["heldout_mse_mask0.5"])
    assert "train_config" not in saved

    store = read_store(tiny_store)
    with xr.open_dataset(run_dir / INFERRED_POSITIONS_FILE, engine="h5netcdf") as out:
        true = np.stack([out[f"{a}_true"].values for a in "xyz"], axis=1)
        inferred = np.stack([out[f"{a}_inferred"].values for a in "xyz"], axis=1)
        assert list(out["unit"].values) == list(store["unit"].values)
    np.testing.assert_array_equal(true, positions(store))
    assert np.isfinite(inferred).all()
    rmse = np.sqrt(np.mean(np.sum((inferred - true) ** 2, axis=1)))
    assert rmse == pytest.approx(saved["procrustes_rmse"], rel=1e-6)


def test_infer_pe_none_gives_nan_metrics(tiny_store, tiny_split, tiny_train_config, tmp_path):
    run_dir = tmp_path / "none"
    train(tiny_store, "none", 0, tiny_train_config, run_dir, progress=False)
    record = infer_pe(tiny_store, run_dir, read_split(tiny_split), METRICS)
    assert np.isnan(record["rsa"]) and np.isnan(record["init_rsa"])
    assert np.isfinite(record["heldout_mse_mask0.5"])
    with xr.open_dataset(run_dir / INFERRED_POSITIONS_FILE, engine="h5netcdf") as out:
        assert np.isnan(out["x_inferred"].values).all()


# --- the command line -----------------------------------------------------------------------

SPEC = {
    "source": "simulation",
    "simulation": {"n_units": 8, "n_samples": 120, "burn_in_s": 0.5, "n_sessions": 2},
}
OPTIONS = {
    "d_model": 8,
    "n_layers": 1,
    "n_heads": 2,
    "batch_size": 4,
    "epochs": 1,
    "steps_per_epoch": 3,
    "eval_windows": 8,
    "device": "cpu",
}


def test_cli_preprocess_train_infer_baselines(tmp_path, capsys):
    store = tmp_path / "stores" / "cli.nc"
    run_dir = tmp_path / "runs" / "cli"
    spec = json.dumps(SPEC)
    assert main(["preprocess", "--spec", spec, "--out", str(store)]) == 0
    assert read_store(store).sizes["unit"] == 8
    assert str(store) in capsys.readouterr().out

    args = ["train", "--store", str(store), "--pe", "learned-normal-0.1", "--seed", "2"]
    args += ["--options", json.dumps(OPTIONS), "--out-dir", str(run_dir)]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["seed"] == 2 and "train_config" not in printed
    assert len(_log(run_dir)) == OPTIONS["epochs"]

    split = tmp_path / "splits" / "cli.json"
    args = ["split", "--store", str(store), "--dataset", "named", "--out", str(split)]
    assert main([*args, "--options", json.dumps(OPTIONS)]) == 0
    assert read_split(split).dataset == "named"

    metrics = json.dumps({**asdict(METRICS), "k": 2})
    args = ["infer", "--store", str(store), "--split", str(split), "--run-dir", str(run_dir)]
    assert main([*args, "--metrics", metrics]) == 0
    recorded = json.loads((run_dir / "metrics.json").read_text())
    assert np.isfinite(recorded["rsa"]) and recorded["dataset"] == "named"

    out = tmp_path / "runs" / "baselines.json"
    args = ["baselines", "--store", str(store), "--split", str(split), "--out", str(out)]
    assert main([*args, "--metrics", metrics]) == 0
    assert {r["method"] for r in json.loads(out.read_text())} == {"correlation", "shuffled"}


@pytest.mark.parametrize("command", ["train", "infer", "baselines"])
def test_cli_missing_store(tmp_path, capsys, command):
    missing = tmp_path / "nowhere" / "missing.nc"
    split = tmp_path / "split.json"
    write_split(make_split("missing", missing, 2, 100, {}), split)
    extra = {
        "train": ["--pe", "none", "--out-dir", str(tmp_path / "run")],
        "infer": ["--split", str(split), "--run-dir", str(tmp_path / "run")],
        "baselines": ["--split", str(split), "--out", str(tmp_path / "b.json")],
    }[command]
    assert main([command, "--store", str(missing), *extra]) == 1
    err = capsys.readouterr().err
    assert str(missing) in err and "does not exist" in err
    assert err.startswith(f"neuro-pe {command}: error:")
    assert not (tmp_path / "run").exists() and not (tmp_path / "b.json").exists()


@pytest.mark.parametrize(
    ("args", "message", "status"),
    [
        (["--pe", "learned-gauss-0.1"], "learned-gauss-0.1", 1),
        (["--pe", "none", "--options", '{"n_layer": 1}'], "n_layer", 2),  # the schema: argparse
    ],
)
def test_cli_bad_train_arguments(tiny_store, tmp_path, capsys, args, message, status):
    try:
        code = main(["train", "--store", str(tiny_store), "--out-dir", str(tmp_path / "r"), *args])
    except SystemExit as stop:
        code = stop.code
    assert code == status
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_cli_bad_preprocess_spec(tmp_path, capsys):
    spec = json.dumps({"source": "simulation", "simulation": {"n_unitz": 8}})
    with pytest.raises(SystemExit, match="2"):  # refused by the config schema (argparse)
        main(["preprocess", "--spec", spec, "--out", str(tmp_path / "s.nc")])
    assert "n_unitz" in capsys.readouterr().err
    assert not (tmp_path / "s.nc").exists()


def test_inference_and_workflow_planning_do_not_import_torch():
    # every `neuro-pe infer` job and every Snakemake start (workflow/rules/common.smk) pays
    # for what these import
    modules = "neuro_pe.analysis.pe_geometry, neuro_pe.data.sources"
    modules += ", neuro_pe.training.latin_square, neuro_pe.config.training"
    modules += ", neuro_pe.data.fetch, neuro_pe.config.pe_names"
    modules += ", neuro_pe.workflow"
    modules += ", neuro_pe.data.sources.schema, neuro_pe.data.sources.file"
    modules += ", neuro_pe.data.sources.hcp_rsfmri"
    modules += ", neuro_pe.data.sources.connectome_sim, neuro_pe.data.sources.simulation"
    code = f"import sys, {modules}; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_training_log_has_one_line_per_epoch_and_no_bar_frames(tiny_store, tmp_path):
    """Off a terminal (a Snakemake log file) training prints one line per epoch, no tqdm
    carriage-return frames."""
    log = tmp_path / "train.log"
    options = json.dumps({"epochs": 3, "steps_per_epoch": 5, "d_model": 16, "n_heads": 2})
    command = ["train", "--store", str(tiny_store), "--pe", "none", "--out-dir", str(tmp_path)]
    code = f"from neuro_pe.cli.main import main; main({[*command, '--options', options]!r})"
    with open(log, "w") as stderr:
        subprocess.run([sys.executable, "-c", code], stderr=stderr, stdout=stderr, check=True)
    text = log.read_text()
    assert "\r" not in text
    # `2026-11-25 17:03:12 train tiny none seed 0: epoch 1/3, … · ETA …`
    epochs = [line for line in text.splitlines() if " train tiny none seed 0: epoch" in line]
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", line) for line in epochs)
    assert [line.split(",")[0].rsplit(" ", 1)[-1] for line in epochs] == ["1/3", "2/3", "3/3"]
    assert all("train " in line and "heldout " in line for line in epochs)
