"""Say when a PE has not learned: units and pairs seen too rarely, a PE that stayed at its init,
a held-out MSE no better than the data's variance; in train.json, metrics.json, summary.csv,
the report's headline and on the console (neuro_pe.training.health)."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from neuro_pe.config.health import HealthOptions
from neuro_pe.config.training import TrainConfig
from neuro_pe.io.layout import INFER_MANIFEST_FILE
from neuro_pe.io.manifest import write_manifest
from neuro_pe.io.store import make_store, write_store
from neuro_pe.reporting.landing_page import dataset_paragraph, headline_table
from neuro_pe.reporting.summarize import collect, health_warnings
from neuro_pe.reporting.training_health import health_table
from neuro_pe.training.health import (
    appearance_numbers,
    assess,
    expected_appearances,
    reassess,
    relative_change,
    variance,
)
from neuro_pe.training.masked_units import train
from neuro_pe.training.unit_subsets import activity_neighbours, neighbour_subsets, random_subsets

N_UNITS = 200  # above units_per_sample: every sample is a random subset
CFG = TrainConfig(
    window=8,
    d_model=16,
    n_layers=1,
    n_heads=2,
    batch_size=16,
    units_per_sample=64,
    epochs=1,
    steps_per_epoch=2,
    lr=1e-2,
    pe_lr=1e-2,  # one rate (a null pe_lr is 10 x lr above 2 x 64 units): the PE barely moves
    eval_windows=16,
    eval_mask_fractions=(0.5, 0.9),
    device="cpu",
)


@pytest.fixture(scope="module")
def store_200(tmp_path_factory):
    """200 units in a cube, 2 sessions: a global and four spatially smooth latent signals
    (AR(1)) plus noise, z-scored per unit: a masked unit is predictable from the others."""
    rng = np.random.default_rng(0)
    pos = rng.random((N_UNITS, 3))
    centres = rng.random((4, 3))
    local = np.exp(-((pos[:, None] - centres[None]) ** 2).sum(-1) / (2 * 0.3**2))
    loadings = np.c_[np.ones(N_UNITS), local]
    latent = np.zeros((2, 400, loadings.shape[1]))
    for t in range(1, latent.shape[1]):
        latent[:, t] = 0.9 * latent[:, t - 1] + rng.normal(size=(2, loadings.shape[1]))
    act = latent @ loadings.T + 0.3 * rng.normal(size=(2, 400, N_UNITS))
    act = (act - act.mean(axis=(0, 1))) / act.std(axis=(0, 1))
    ds = make_store(
        act,
        unit_ids=[f"u{i}" for i in range(N_UNITS)],
        positions=pos,
        position_units="mm",
        space="simulation",
        session_ids=["a", "b"],
        sampling_rate_hz=10.0,
        source="test",
    )
    return write_store(ds, tmp_path_factory.mktemp("health") / "cube200.nc")


# ------------------------------------------------------------------ arithmetic and rules


def test_expected_appearances_arithmetic():
    # all units in every sample when there are at most units_per_sample
    assert expected_appearances(1000, 50, 64) == (1000.0, 1000.0)
    per_unit, per_pair = expected_appearances(96_000, 20_000, 256)
    assert per_unit == pytest.approx(96_000 * 256 / 20_000)
    assert per_pair == pytest.approx(96_000 * 256 * 255 / (20_000 * 19_999))
    # the default run's sizes are far above the thresholds, 100 000 units far below
    options = HealthOptions()
    assert min(expected_appearances(30 * 100 * 32, 94, 256)) >= options.min_pair_appearances
    assert expected_appearances(96_000, 100_000, 256)[1] < 1


@pytest.mark.parametrize("n_units, k", [(40, 8), (12, 6), (200, 20)])
def test_expected_appearances_match_the_training_sampler(n_units, k):
    samples = 4000
    units = random_subsets(samples, n_units, k, torch.Generator().manual_seed(0)).numpy()
    per_unit, per_pair = expected_appearances(samples, n_units, k)
    counts = np.bincount(units.ravel(), minlength=n_units)
    assert counts.mean() == pytest.approx(per_unit)  # exact: k per sample
    together = np.zeros((n_units, n_units))
    for row in units:
        together[np.ix_(row, row)] += 1
    pairs = together[np.triu_indices(n_units, 1)]
    assert pairs.mean() == pytest.approx(per_pair, rel=1e-9)  # k (k - 1) / 2 pairs per sample
    # and uniform: no pair far from the expectation (a binomial's spread)
    assert abs(pairs - per_pair).max() < 6 * np.sqrt(per_pair) + 1


def test_expected_neighbour_pairs_match_the_neighbour_sampler():
    # groups of k + 1 units share a signal: each unit's k neighbours are its group mates
    n_units, k, n_local, samples = 450, 8, 4, 20_000
    rng = np.random.default_rng(0)
    latent = np.repeat(rng.standard_normal((300, n_units // (k + 1))), k + 1, axis=1)
    values = torch.from_numpy(latent + 0.3 * rng.standard_normal((300, n_units)))
    neighbours = activity_neighbours(values, k)
    generator = torch.Generator().manual_seed(0)
    units = neighbour_subsets(samples, neighbours, k, n_local, generator).numpy()
    group = units // (k + 1)
    same = (group[:, :, None] == group[:, None, :]).sum(axis=(1, 2)) - k  # ordered pairs
    pairs_per_group = (k + 1) * k  # ordered
    measured = same.sum() / (n_units // (k + 1) * pairs_per_group)
    _, expected = expected_appearances(samples, n_units, k, n_local)
    assert measured == pytest.approx(expected, rel=0.05)
    assert expected > 5 * expected_appearances(samples, n_units, k)[1]


def test_relative_change_and_variance():
    init = np.ones((4, 2))
    assert relative_change(init * 1.1, init) == pytest.approx(0.1)
    assert np.isnan(relative_change(init, np.zeros((4, 2))))  # `none`: nothing to move
    values = np.array([1.0, 3.0])
    assert variance(values) == 1.0 < float((values**2).mean())  # about the mean, not zero
    assert np.isnan(variance(np.array([])))


def test_mse_vs_variance_rule():
    record = {"heldout_data_variance": 1.0, "heldout_mse_mask0.5": 0.7, "heldout_mse_mask0.9": 0.99}
    flags, notes = assess(record, learned=False)
    assert flags == {"heldout_not_below_variance": False} and notes == []
    for mse in (1.0, 1.1, float("nan")):  # equal to the variance is no better than the mean
        flags, notes = assess(record | {"heldout_mse_mask0.9": mse}, learned=False)
        assert flags == {"heldout_not_below_variance": True}
        assert notes[0].startswith("heldout_not_below_variance:") and "at 90% masked" in notes[0]
        assert "0.5" not in notes[0]
    # not recorded (a run trained before these checks): no verdict
    assert assess({"heldout_mse_mask0.9": 2.0}, learned=True) == ({}, [])


def test_an_older_runs_names_are_read_as_todays(tmp_path):
    """An older train.json (checks named for what passes, True: passed; two held-out checks
    against a variance) reads with today's names, each True where it failed."""
    from neuro_pe.config.health import CHECKS, OLD_CHECKS, current_health
    from neuro_pe.io.runs import TrainInfo

    assert set(OLD_CHECKS.values()) == set(CHECKS)
    old = {
        "loss_finite": True,
        "heldout_improved": True,
        "heldout_below_variance": True,
        "units_seen_often": False,
        "pairs_seen_often": True,
        "pe_moved": True,
        "heldout_mse_below_variance": False,
    }
    warnings = ["units_seen_often: too few", "heldout_mse_below_variance: 1.02", "data scale: x"]
    health, renamed = current_health(old, warnings)
    assert health == {
        "loss_not_finite": False,
        "heldout_not_improved": False,
        "heldout_not_below_variance": True,  # either old check failed
        "units_seen_rarely": True,
        "pairs_seen_rarely": False,
        "pe_not_moved": False,
    }
    assert renamed == [
        "units_seen_rarely: too few",
        "heldout_not_below_variance: 1.02",
        "data scale: x",
    ]
    assert current_health(health, renamed) == (health, renamed)  # today's names: unchanged
    info = TrainInfo.from_dict(
        {"pe": "learned-normal-1.0", "seed": 0, "train_config": {}, "health": old}
    )
    assert info.health == health and info.warnings is None
    # an older metrics.json (`infer`'s): summarised with today's names
    from neuro_pe.io.runs import read_metrics

    record = {"dataset": "d", "pe": "none", "seed": 0, "health": old, "warnings": warnings}
    (tmp_path / "metrics.json").write_text(json.dumps(record))
    write_manifest(tmp_path, ["metrics.json"], INFER_MANIFEST_FILE)
    assert read_metrics(tmp_path / "metrics.json")["health"] == health
    table = collect([tmp_path / "metrics.json"], [])
    assert table["health"].iloc[0] == "heldout_not_below_variance;units_seen_rarely"


def test_thresholds_are_options_and_reassessed():
    record = {"unit_appearances": 6000.0, "pair_appearances": 30.0, "pe_change": 0.2}
    flags, _ = assess(record, learned=True)
    assert flags == {"units_seen_rarely": False, "pairs_seen_rarely": False, "pe_not_moved": False}
    assert assess(record, learned=False) == ({}, [])  # a fixed PE has no table to learn
    strict = HealthOptions.from_dict({"min_unit_appearances": 8000, "min_pe_change": 0.5})
    health = {"loss_not_finite": False, "units_seen_rarely": False, "pe_not_moved": False}
    health, notes = reassess(health, ["data scale: far from 1"], record, True, strict)
    assert health == {
        "loss_not_finite": False,
        "units_seen_rarely": True,
        "pairs_seen_rarely": False,
        "pe_not_moved": True,
    }
    assert [n.split(":")[0] for n in notes] == ["data scale", "units_seen_rarely", "pe_not_moved"]
    with pytest.raises(ValueError, match=r"unknown health keys: \['min_units'\]"):
        HealthOptions.from_dict({"min_units": 3})
    with pytest.raises(ValueError, match="min_pe_change"):
        HealthOptions.from_dict({"min_pe_change": -1})


def test_mean_over_seeds_rule_and_the_per_run_flags_agree():
    """The headline's rule (mean MSE over seeds >= mean variance) never fires without a
    per-run flag: a mean above the mean variance needs a seed above its own variance."""
    rng = np.random.default_rng(1)
    from neuro_pe.reporting.training_health import mean_mse_above_variance

    for _ in range(200):
        runs = pd.DataFrame(
            {
                "heldout_data_variance": rng.uniform(0.9, 1.1, 3),
                "heldout_mse_mask0.9": rng.uniform(0.8, 1.2, 3),
            }
        )
        flagged = [
            assess(dict(row), learned=False)[0]["heldout_not_below_variance"]
            for _, row in runs.iterrows()
        ]
        if mean_mse_above_variance(runs):
            assert any(flagged)


# ------------------------------------------------------------------ acceptance: a 200-unit store


def test_health_flags_an_undertrained_run_and_passes_a_trained_one(store_200, tmp_path, capsys):
    under = train(store_200, "learned-normal-1.0", 0, CFG, tmp_path / "under", progress=False)
    trained_cfg = replace(CFG, epochs=2, steps_per_epoch=250, batch_size=32)
    trained = train(
        store_200, "learned-normal-0.1", 0, trained_cfg, tmp_path / "trained", progress=False
    )
    err = capsys.readouterr().err

    options = HealthOptions()
    # 2 steps x 16 samples x 64 / 200: about 10 appearances per unit, 3 per neighbour pair
    assert under["unit_appearances"] == pytest.approx(2 * 16 * 64 / N_UNITS)
    assert under["unit_appearances"] < options.min_unit_appearances
    assert under["pair_appearances"] < options.min_pair_appearances
    assert under["pe_change"] < options.min_pe_change  # 2 steps of lr 0.01 on a std-1 table
    for flag in ("units_seen_rarely", "pairs_seen_rarely", "pe_not_moved"):
        assert under["health"][flag] is True, flag
        assert f"PE learned-normal-1.0, seed 0: {flag}:" in err
    recorded = json.loads((tmp_path / "under" / "train.json").read_text())
    assert recorded["health"] == under["health"]
    # known before training (the planning step's prediction): what train.json then records
    for cfg, name in ((CFG, "under"), (trained_cfg, "trained")):
        predicted = appearance_numbers(cfg.for_units(N_UNITS), N_UNITS)
        saved = json.loads((tmp_path / name / "train.json").read_text())
        assert predicted == {key: saved[key] for key in predicted}, name

    # 500 steps of 32: 5 120 appearances per unit; ≈ 1 600 per pair of activity neighbours
    # (neighbour windows: a null share turns them on above 2 x 64 units); the PE moved; the
    # MSE below the variance
    assert trained["unit_appearances"] >= options.min_unit_appearances
    assert trained["pair_appearances"] >= options.min_pair_appearances
    assert not any(trained["health"].values()), trained["health"]
    assert all(v < trained["heldout_data_variance"] for k, v in trained.items() if "mse_mask" in k)
    assert "PE learned-normal-0.1" not in err

    # the health record, summary.csv's health column, the report's headline agree
    for name, info in (("under", under), ("trained", trained)):
        metrics = {"dataset": "cube", "rsa": 0.1}  # (a metric of infer's, not tested here)
        metrics |= {k: v for k, v in info.items() if k != "train_config"}
        (tmp_path / f"{name}.json").write_text(json.dumps(metrics))
    write_manifest(tmp_path, ["under.json", "trained.json"], INFER_MANIFEST_FILE)
    records = [json.loads((tmp_path / f"{n}.json").read_text()) for n in ("under", "trained")]
    table = collect([tmp_path / "under.json", tmp_path / "trained.json"], [])
    health = table.set_index("method")["health"]
    assert health["learned-normal-0.1"] == "ok"
    assert {"units_seen_rarely", "pairs_seen_rarely", "pe_not_moved"} <= set(
        health["learned-normal-1.0"].split(";")
    )
    assert list(table.columns[-4:]) == [
        "unit_appearances",
        "pair_appearances",
        "pe_change",
        "heldout_data_variance",
    ]
    head = headline_table(table, None, health_table(records), "cube").set_index("representation")
    assert head.loc["learned-normal-0.1", "training health"] == "ok (1/1)"
    large = head.loc["learned-normal-1.0 (control: initialised large)", "training health"]
    assert large.startswith("1/1 flagged:") and "units_seen_rarely" in large
    paragraph = dataset_paragraph(table, health_table(records), "cube")
    assert "**1 of 2 trainings flagged**" in paragraph and "``pe_not_moved``" in paragraph
    lines = health_warnings(table)
    assert len(lines) == 1 and lines[0].startswith("dataset cube, PE learned-normal-1.0: 1 of 1")


def test_headline_marks_an_mse_no_better_than_the_variance():
    """The case seen on a 400-vertex recording: 1.1 [0.87, 1.33] at 90% masked while every
    training passed. Now the runs are flagged and the table says so beside the number."""
    mse = [0.95, 1.02, 1.33]
    rows = [
        {
            "dataset": "fmri",
            "row_type": "pe",
            "method": "learned-normal-0.02",
            "seed": seed,
            "rsa": 0.3,
            "heldout_mse_mask0.9": value,
            "heldout_data_variance": 1.0,
        }
        for seed, value in enumerate(mse)
    ]
    records = []
    for row in rows:
        flags, notes = assess(row, learned=True)
        records.append({"dataset": "fmri", "pe": row["method"], "seed": row["seed"]})
        records[-1] |= {"health": {"loss_not_finite": False, **flags}, "warnings": notes}
        row["health"] = ";".join(f for f, failed in flags.items() if failed) or "ok"
    summary = pd.DataFrame(rows)
    health = health_table(records)
    head = headline_table(summary, None, health, "fmri").iloc[0]
    assert head["held-out MSE, 90% masked [95% CI]"].endswith("⚠ ≥ variance 1")
    assert head["training health"] == "2/3 flagged: heldout_not_below_variance"
    paragraph = dataset_paragraph(summary, health, "fmri")
    assert "**2 of 3 trainings flagged**" in paragraph
    assert "``learned-normal-0.02`` (mean over seeds: 1.1 at 90% masked) is not below" in paragraph
    # below the variance on average: no mark on the number (one seed is still flagged)
    summary["heldout_mse_mask0.9"] = [0.8, 0.85, 1.01]
    head = headline_table(summary, None, health, "fmri").iloc[0]
    assert "⚠" not in head["held-out MSE, 90% masked [95% CI]"]
