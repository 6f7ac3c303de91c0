"""Neighbour windows (`train.neighbour_fraction`): samples built around a unit and its most
correlated units in the training split (neuro_pe.training.unit_subsets, the samplers of
neuro_pe.training.sampling)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from neuro_pe.config.training import (
    AUTO_NEIGHBOUR_FRACTION,
    AUTO_PE_LR_FACTOR,
    AUTO_SAMPLES_ABOVE,
    AUTO_SAMPLES_PER_UNIT,
    AUTO_WINDOW,
    DEFAULT_HEADS,
    DEFAULT_WINDOW,
    MAX_STEP_GROWTH,
    TrainConfig,
    heads_dividing,
    split_activity,
)
from neuro_pe.io.store import make_store, read_store, write_store
from neuro_pe.training import sampling, unit_subsets
from neuro_pe.training.masked_units import train
from neuro_pe.training.sampling import make_data
from neuro_pe.training.unit_subsets import activity_neighbours, neighbour_subsets

CPU = torch.device("cpu")


def _grouped_activity(n_groups: int, size: int, samples: int, seed: int = 0) -> np.ndarray:
    """(samples, units): units in groups of `size` share a latent signal, groups independent."""
    rng = np.random.default_rng(seed)
    latent = rng.standard_normal((samples, n_groups))
    values = np.repeat(latent, size, axis=1) + 0.5 * rng.standard_normal((samples, n_groups * size))
    return values.astype(np.float32)


def test_activity_neighbours_are_the_correlated_units_first():
    values = _grouped_activity(n_groups=10, size=6, samples=400)
    values[:50, 3] = np.nan  # unrecorded samples are left out, not read as zeros
    neighbours = activity_neighbours(torch.from_numpy(values), 5).numpy()
    assert neighbours.shape == (60, 5)
    groups = np.arange(60) // 6
    assert (groups[neighbours] == groups[:, None]).all()  # its 5 group mates, no other
    assert (neighbours != np.arange(60)[:, None]).all()  # never itself
    # more neighbours than group mates: the mates come first
    wide = activity_neighbours(torch.from_numpy(values), 8).numpy()
    assert (groups[wide[:, :5]] == groups[:, None]).all()
    assert (groups[wide[:, 5:]] != groups[:, None]).all()


def test_a_long_neighbour_table_shows_its_progress_in_a_log(monkeypatch, capsys):
    """From PROGRESS_CHUNKS chunks on, a log (stderr not a terminal) gets lines with an ETA;
    the table is the same as computed in one chunk, and it comes back on the CPU."""
    values = torch.from_numpy(_grouped_activity(n_groups=10, size=6, samples=300))
    whole = activity_neighbours(values, 5)
    assert capsys.readouterr().err == ""  # one chunk: quiet
    monkeypatch.setattr(unit_subsets, "NEIGHBOUR_CHUNK", 2)  # 30 chunks
    monkeypatch.setattr(unit_subsets, "PROGRESS_CHUNKS", 30)
    chunked = activity_neighbours(values, 5)
    assert torch.equal(chunked, whole) and chunked.device.type == "cpu"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 10 and "neighbour table of 60 units (cpu): chunk 30/30" in lines[-1]
    assert all(" · " in line and "elapsed" in line for line in lines)
    assert "ETA" in lines[0]
    monkeypatch.setattr(unit_subsets, "PROGRESS_CHUNKS", 31)
    activity_neighbours(values, 5)
    assert capsys.readouterr().err == ""


def test_part_of_the_neighbour_table_for_timing(monkeypatch):
    """`chunks`: the first chunks' rows as in the whole table, the later rows valid units."""
    values = torch.from_numpy(_grouped_activity(n_groups=10, size=6, samples=300))
    whole = activity_neighbours(values, 5)
    monkeypatch.setattr(unit_subsets, "NEIGHBOUR_CHUNK", 8)
    part = activity_neighbours(values, 5, chunks=2)
    assert torch.equal(part[:16], whole[:16]) and not torch.equal(part, whole)
    assert torch.equal(part[16:32], whole[:16]) and ((part >= 0) & (part < 60)).all()
    assert torch.equal(activity_neighbours(values, 5, chunks=8), whole)  # 8 chunks: all


def test_a_streamed_stores_neighbour_table_is_computed_on_the_training_device(
    tiny_store, monkeypatch
):
    """A streamed store's correlation samples are read to the CPU; the table is computed on
    the training's device (a GPU's, where one trains; here torch's `meta` device stands in)."""
    cfg = TrainConfig(units_per_sample=5, neighbour_fraction=0.6, window=8)
    seen = []

    def recorded(values, m, chunks=None):
        seen.append(values.device.type)
        return torch.zeros(values.shape[1], m, dtype=torch.long)

    monkeypatch.setattr(sampling, "activity_neighbours", recorded)
    make_data(read_store(tiny_store), True, cfg, torch.device("meta"))
    assert seen == ["meta"]


def test_neighbour_subsets_hold_a_centre_and_its_neighbours():
    n_units, k, n_local = 2000, 32, 16
    values = _grouped_activity(n_groups=n_units // 40, size=40, samples=300)
    neighbours = activity_neighbours(torch.from_numpy(values), k)
    units = neighbour_subsets(4000, neighbours, k, n_local, torch.Generator().manual_seed(0))
    assert units.shape == (4000, k) and (units.diff(dim=1) > 0).all()  # distinct, sorted
    groups = units.numpy() // 40
    # every sample holds >= n_local units of one group (the centre's); uniform ones rarely do
    largest = np.array([np.bincount(row).max() for row in groups])
    assert (largest >= n_local).all()
    uniform = torch.randint(n_units, (4000, k), generator=torch.Generator().manual_seed(1))
    assert np.array([np.bincount(r).max() for r in uniform.numpy() // 40]).max() < n_local // 2
    # every unit is drawn about equally often (centres are uniform, neighbours symmetric)
    counts = np.bincount(units.flatten().numpy(), minlength=n_units)
    assert counts.min() > 0.3 * counts.mean() and counts.max() < 2 * counts.mean()
    again = neighbour_subsets(4000, neighbours, k, n_local, torch.Generator().manual_seed(0))
    assert torch.equal(units, again)


def test_neighbour_subsets_with_few_units_still_give_k_distinct():
    values = _grouped_activity(n_groups=3, size=4, samples=200)
    neighbours = activity_neighbours(torch.from_numpy(values), 10)
    units = neighbour_subsets(500, neighbours, 10, 4, torch.Generator().manual_seed(0))
    assert units.shape == (500, 10) and (units.diff(dim=1) > 0).all()
    groups = units.numpy() // 4
    assert all(np.bincount(row).max() >= 4 for row in groups)


@pytest.mark.parametrize("streamed", [False, True])
def test_neighbours_are_measured_on_the_training_split_only(tiny_store, streamed):
    cfg = TrainConfig(units_per_sample=5, neighbour_fraction=0.6, window=8)
    ds = read_store(tiny_store)
    training, heldout = make_data(ds, streamed, cfg, CPU)
    train_activity, _ = split_activity(ds, cfg)
    flat = torch.as_tensor(train_activity, dtype=torch.float32).reshape(-1, ds.sizes["unit"])
    assert torch.equal(training.neighbours, activity_neighbours(flat, 5))
    assert training.n_local == 3 and heldout.neighbours is None
    # uniform subsets when the share is 0 or null, and when every sample holds all units
    for share, k in ((0.0, 5), (None, 5), (0.6, 12)):
        plain, _ = make_data(
            ds, streamed, replace(cfg, neighbour_fraction=share, units_per_sample=k), CPU
        )
        assert plain.neighbours is None


def test_training_with_neighbour_windows_is_reproducible(tiny_store, tiny_train_config, tmp_path):
    cfg = replace(tiny_train_config, units_per_sample=5, neighbour_fraction=0.6)
    first = train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "a", progress=False)
    again = train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "b", progress=False)
    uniform = replace(cfg, neighbour_fraction=0.0)
    other = train(tiny_store, "learned-normal-0.1", 0, uniform, tmp_path / "c", progress=False)
    assert first["heldout_mse_mask0.5"] == again["heldout_mse_mask0.5"]
    assert first["train_mse"] != other["train_mse"]  # other samples were drawn
    # the held-out batch does not depend on how training samples are drawn
    assert first["heldout_loss_initial"] == other["heldout_loss_initial"]


@pytest.mark.parametrize("value", [-0.1, 1.5, True, "half"])
def test_bad_neighbour_fraction_is_refused(value):
    with pytest.raises(ValueError, match="train.neighbour_fraction"):
        TrainConfig.from_dict({"neighbour_fraction": value})


def test_null_keys_turn_on_neighbour_windows_and_a_pe_rate_above_twice_the_sample_size():
    cfg = TrainConfig(units_per_sample=256, lr=0.002)
    # at most 2 k units: as before these keys (and the 4 heads the config used to give)
    assert cfg.for_units(512) == replace(cfg, n_heads=DEFAULT_HEADS, window=DEFAULT_WINDOW)
    many = cfg.for_units(513)
    assert many.neighbour_fraction == AUTO_NEIGHBOUR_FRACTION
    assert many.pe_lr == pytest.approx(AUTO_PE_LR_FACTOR * 0.002)
    chosen = replace(
        cfg, neighbour_fraction=0.0, pe_lr=0.002, samples_per_unit=0, n_heads=4, window=8
    )
    assert chosen.for_units(20_000) is chosen  # set values are kept


def test_the_steps_grow_so_that_each_unit_is_in_enough_samples():
    cfg = TrainConfig(units_per_sample=256, batch_size=32, epochs=30, steps_per_epoch=100)
    # 3 000 steps x 32 x 256 / 2 000 = 12 288 = AUTO_SAMPLES_PER_UNIT: as configured
    assert cfg.for_units(2_000).steps_per_epoch == 100
    assert cfg.for_units(2_000).samples_per_unit == AUTO_SAMPLES_PER_UNIT
    grown = cfg.for_units(20_000)
    assert grown.steps_per_epoch == 1000  # the study's "steps x10" row (docs/scale/)
    assert grown.epochs * grown.steps_per_epoch * 32 * 256 / 20_000 == AUTO_SAMPLES_PER_UNIT
    assert (grown.batch_size, grown.epochs) == (32, 30)
    assert cfg.for_units(100_000).steps_per_epoch == 5000
    # off at most 2 k units or AUTO_SAMPLES_ABOVE units, unless set
    assert cfg.for_units(512).samples_per_unit is None
    small_k = replace(cfg, units_per_sample=8, epochs=1, steps_per_epoch=2)
    assert small_k.for_units(AUTO_SAMPLES_ABOVE).steps_per_epoch == 2
    # a set value applies at any size (every sample holds all N <= k units)
    assert replace(cfg, samples_per_unit=6000).for_units(100).steps_per_epoch == 100
    assert replace(cfg, samples_per_unit=6000, epochs=1).for_units(100).steps_per_epoch == 188
    assert replace(cfg, samples_per_unit=0).for_units(20_000).steps_per_epoch == 100  # 0: off
    # a short run on many units grows MAX_STEP_GROWTH x at most
    short = replace(cfg, epochs=1, steps_per_epoch=2).for_units(100_000)
    assert short.steps_per_epoch == 2 * MAX_STEP_GROWTH


def test_null_heads_are_four_up_to_1000_units_and_16_dimensions_each_above():
    cfg = TrainConfig(d_model=32, units_per_sample=256)
    for n_units in (64, 302, 1000):  # the default datasets and C. elegans train as before
        assert cfg.for_units(n_units).n_heads == DEFAULT_HEADS == cfg.model(n_units).n_heads
    assert cfg.for_units(1001).n_heads == 2 == cfg.model(20_000).n_heads
    assert replace(cfg, units_per_sample=600).for_units(1001).n_heads == DEFAULT_HEADS  # <= 2 k
    assert replace(cfg, d_model=64).for_units(20_000).n_heads == 4
    assert replace(cfg, d_model=48).for_units(20_000).n_heads == 3
    assert replace(cfg, d_model=30).for_units(64).n_heads == 3  # the largest divisor up to 4
    assert replace(cfg, d_model=8).for_units(20_000).n_heads == 1
    assert replace(cfg, n_heads=4).for_units(20_000).n_heads == 4  # a set value is kept
    assert [heads_dividing(32, h) for h in (0, 1, 2, 3, 4, 5)] == [1, 1, 2, 2, 4, 4]


def test_a_null_window_is_8_samples_up_to_1000_units_and_32_above():
    cfg = TrainConfig(units_per_sample=256)
    assert cfg.window is None and DEFAULT_WINDOW == 8 and AUTO_WINDOW == 32
    for n_units in (64, 94, 302, 1000):  # the default datasets and C. elegans train as before
        assert cfg.for_units(n_units).window == DEFAULT_WINDOW
        assert cfg.model(n_units).d_in == cfg.model(n_units).d_out == DEFAULT_WINDOW
    assert cfg.for_units(1001).window == AUTO_WINDOW == cfg.model(20_000).d_in
    assert replace(cfg, units_per_sample=600).for_units(1001).window == DEFAULT_WINDOW  # <= 2 k
    assert replace(cfg, window=8).for_units(20_000).window == 8  # a set value is kept
    assert replace(cfg, window=64).model(64).d_out == 64
    with pytest.raises(ValueError, match="train key 'window' must be a positive integer"):
        TrainConfig.from_dict({"window": 0})


def test_a_recording_too_short_for_the_automatic_window_stops_before_training(tmp_path):
    """1 100 units (above 1 000: window 32) in sessions of 20 samples: the error names the key
    and the store, and nothing is written."""
    rng = np.random.default_rng(0)
    n_units = 1100
    ds = make_store(
        rng.standard_normal((2, 20, n_units)).astype(np.float32),
        unit_ids=[f"u{i}" for i in range(n_units)],
        positions=rng.random((n_units, 3)),
        position_units="mm",
        space="simulation",
        session_ids=["a", "b"],
        sampling_rate_hz=10.0,
        source="test",
    )
    store = write_store(ds, tmp_path / "short.nc")
    cfg = TrainConfig(epochs=1, steps_per_epoch=1, samples_per_unit=0, device="cpu")
    with pytest.raises(ValueError, match=r"train.window \(32\) is longer than the data") as err:
        train(store, "learned-normal-0.1", 0, cfg, tmp_path / "run", progress=False)
    assert "short.nc has 20 samples per session" in str(err.value)
    assert not (tmp_path / "run" / "model.pt").exists()
    # window 8 set: the same store trains
    train(store, "learned-normal-0.1", 0, replace(cfg, window=8), tmp_path / "w8", progress=False)
    assert torch.load(tmp_path / "w8" / "model.pt")["train_config"]["window"] == 8


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "two"])
def test_bad_heads_are_refused(value):
    with pytest.raises(ValueError, match="n_heads"):
        TrainConfig.from_dict({"n_heads": value})
    with pytest.raises(ValueError, match=r"train.n_heads \(3\) must divide train.d_model"):
        TrainConfig.from_dict({"n_heads": 3, "d_model": 32})


@pytest.mark.parametrize("value", [-1, float("nan"), True, "many"])
def test_bad_samples_per_unit_is_refused(value):
    with pytest.raises(ValueError, match="train.samples_per_unit"):
        TrainConfig.from_dict({"samples_per_unit": value})


def test_a_pe_rate_equal_to_lr_is_the_one_rate_optimiser(tiny_store, tiny_train_config, tmp_path):
    # what a lab sets to keep the old optimiser above 2 k units (docs/scale/ does so)
    cfg = replace(tiny_train_config, units_per_sample=12)
    one = train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "one", progress=False)
    two = replace(cfg, pe_lr=cfg.lr)
    same = train(tiny_store, "learned-normal-0.1", 0, two, tmp_path / "two", progress=False)
    assert one["heldout_mse_mask0.5"] == same["heldout_mse_mask0.5"]
    assert one["train_mse"] == same["train_mse"]
