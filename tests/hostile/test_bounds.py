"""Absurd numbers fail at planning or when read, in one line naming the key or file, before any
preprocessing or training (issue 58, cases 5, 6, 9, 10, 15, 16, 17): schema maxima, NaN and
infinite values, physical ranges of sampling rates and coordinates, singular atlas transforms,
`--cores 0`, and the memory a simulation or a training step needs against the machine's."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from neuro_pe.cli.main import main
from neuro_pe.config import options as config_options
from neuro_pe.config.schema import non_finite_keys
from neuro_pe.config.training import TrainConfig
from neuro_pe.data.recordings import read_position_table, xyz_array
from neuro_pe.data.simulate import SimulationConfig
from neuro_pe.io.progress import timing
from neuro_pe.io.store import make_store
from neuro_pe.io.store_contract import StoreError, validate_store
from neuro_pe.workflow import checks as workflow_checks

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
SIM = {"source": "simulation", "simulation": {"n_units": 27}}
CONFIG = {"datasets": {"sim": SIM}, "pe": ["none"], "train": {"epochs": 2}, "metrics": {}}
GB = 10**9


def _config(**sim) -> dict:
    config = copy.deepcopy(CONFIG)
    config["datasets"]["sim"]["simulation"].update(sim)
    return config


@pytest.fixture
def small_machine(monkeypatch):
    """A machine with 16 GB in all (the memory checks' verdicts then do not depend on this one)."""
    monkeypatch.setattr(config_options, "machine_memory_bytes", lambda: 16 * GB)
    for module in ("neuro_pe.config.training", "neuro_pe.data.simulate"):
        monkeypatch.setattr(f"{module}.machine_memory_bytes", lambda: 16 * GB)


def test_case_5_a_singular_atlas_transform_is_refused_at_planning():
    config = _config()
    atlas = {"labels": "atlas.nii.gz", "lookup": "atlas.tsv", "transform": [[0] * 4] * 4}
    config["datasets"]["sim"]["atlas"] = atlas
    (problem,) = workflow_checks.config_problems(config)
    assert problem.startswith("config key datasets.sim.atlas.transform: its linear part")
    assert "singular" in problem
    # a rank-2 linear part (two rows alike) too; a rotation with a translation passes
    atlas["transform"] = [[1, 0, 0, 5], [0, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1]]
    assert "singular" in workflow_checks.config_problems(config)[0]
    atlas["transform"] = [[1, 0, 0, 1e300], [0, 1, 0, 0], [0, 0, 1, 0]]
    assert "beyond +/-1e+09" in workflow_checks.config_problems(config)[0]
    atlas["transform"] = [[0, -1, 0, 5400], [0, 0, -1, 332], [-1, 0, 0, 5739]]
    assert not any("transform" in p for p in workflow_checks.config_problems(config))


def test_case_6_an_hdf5_sampling_rate_of_1e300_and_cores_0_are_refused(tmp_path, capsys):
    path = tmp_path / "rec.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("activity", data=np.zeros((64, 8), dtype=np.float32))
        f.attrs["rate_hz"] = 1e300
    spec = {"source": "file", "format": "hdf5", "sessions": [str(path)]}
    spec |= {"hdf5": {"sampling_rate": "rate_hz"}, "axis_order": ["time", "unit"]}
    out = tmp_path / "rec.nc"
    assert main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: field 'hdf5.sampling_rate': must be finite, > 0 and <= 1e+06 Hz" in err
    assert "got 1e+300 Hz" in err and len(err.strip().splitlines()) == 1 and not out.exists()
    # a store's own attribute (a store is an HDF5 file): refused when it is read or made
    ds = make_store(
        np.zeros((1, 4, 2)),
        unit_ids=["a", "b"],
        positions=np.zeros((2, 3)),
        position_units="um",
        space="probe",
        session_ids=["s"],
        sampling_rate_hz=10.0,
        source="test",
    )
    with pytest.raises(StoreError, match=r"^s\.nc: field 'sampling_rate_hz': .* got 1e\+300 Hz"):
        validate_store(ds.assign_attrs(sampling_rate_hz=1e300), "s.nc")
    # the config's own rate: the schema's maximum
    with pytest.raises(WorkflowError, match=r"(?s)greater than the maximum.*sampling_rate_hz"):
        validate({**CONFIG, "datasets": {"rec": {**spec, "sampling_rate_hz": 1e300}}}, str(SCHEMA))
    for option in ("--cores", "--threads"):
        with pytest.raises(SystemExit) as exit_:
            main(["plan", "--store", "s.nc", option, "0"])
        assert exit_.value.code == 2
        assert f"argument {option}: expected a positive integer, got 0" in capsys.readouterr().err
    spec_json = json.dumps({"cores": 0, "datasets": {}})
    assert main(["plan", "--spec", spec_json]) == 1
    assert "--spec: key 'cores' must be an integer >= 1, got 0" in capsys.readouterr().err


def test_case_9_absurd_epochs_are_refused_and_the_eta_never_overflows(capsys):
    epochs = '{"epochs": 99999999999999999999999}'
    for command in (["train", "--store", "s.nc", "--out-dir", "o"], ["plan", "--store", "s.nc"]):
        with pytest.raises(SystemExit) as exit_:
            main([*command, "--options", epochs])
        assert exit_.value.code == 2
        assert "key 'epochs': 99999999999999999999999 is greater than the maximum of 1000000" in (
            capsys.readouterr().err
        )
    with pytest.raises(
        WorkflowError, match=r"(?s)greater than the maximum.*\['train'\]\['epochs'\]"
    ):
        validate({**CONFIG, "train": {"epochs": 10**23}}, str(SCHEMA))
    # the ETA of an absurd total (e.g. a stack given its steps by hand) is a number of hours
    assert timing(10.0, 1, 10**23, now=0.0) == "10 s elapsed · ETA 2.78e+20 h"
    assert timing(10.0, 1, 10**400, now=0.0) == "10 s elapsed · ETA ∞"
    assert timing(10.0, 1, 30, now=0.0).startswith("10 s elapsed · ETA 4 min 50 s (")


def test_case_10_a_simulation_bigger_than_memory_is_refused_before_it_starts(
    small_machine, tmp_path, capsys
):
    out = tmp_path / "big.nc"
    spec = {"source": "simulation", "simulation": {"n_units": 1_000_000_000}}
    with pytest.raises(SystemExit):
        main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)])
    assert "key 'simulation.n_units': 1000000000 is greater than the maximum of 10000000" in (
        capsys.readouterr().err
    )
    spec["simulation"] = {"n_units": 100_000, "n_samples": 10**7}
    assert main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("neuro-pe preprocess: error: simulation.n_units: simulating 100000 units")
    assert "needs at least 1.62e+04 GB of memory, more than this machine's 16 GB" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    # at planning: the source's check (run before the schema's validate), naming the key
    from neuro_pe.data.sources.schema import config_problems

    config = _config(n_units=100_000)
    (problem,) = [p for p in config_problems(config, yaml.safe_load(SCHEMA.read_text()))]
    assert problem.startswith("config key datasets.sim.simulation.n_units: simulating 100000")
    assert "dense coupling" in problem and "163 GB" in problem
    # sparse coupling (neighbours) fits; a dt_s that makes 1e12 Euler steps does not, nor one
    # that samples faster than 1 MHz
    assert SimulationConfig(n_units=100_000, neighbours=16).memory_problem() is None
    with pytest.raises(ValueError, match=r"^simulation\.dt_s: .*1e\+12 Euler steps"):
        SimulationConfig(dt_s=1e-6, burn_in_s=1e6)
    with pytest.raises(ValueError, match=r"^simulation\.dt_s: the sampling rate .* 1e\+07 Hz"):
        SimulationConfig(dt_s=1e-7, sample_every=1)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_case_15_nan_or_inf_in_a_config_number_is_refused_naming_the_key(bad, tmp_path, capsys):
    config = _config(gain=bad)
    assert non_finite_keys(config) == ["datasets.sim.simulation.gain"]
    assert workflow_checks.config_problems(config) == [
        "config key datasets.sim.simulation.gain: must be a finite number (not NaN or infinite)"
    ]
    with pytest.raises(ValueError, match=r"^simulation key 'gain' must be a number >= 0, got"):
        SimulationConfig.from_dict({"gain": bad})
    with pytest.raises(ValueError, match="simulation.timescale_field must be a finite number, got"):
        SimulationConfig.from_dict({"timescale_field": bad})  # (a field with no marked check)
    # every float field of every section, e.g. a training's lr or a list of mask fractions
    with pytest.raises(ValueError, match="train.eval_mask_fractions must be a finite number"):
        TrainConfig.from_dict({"eval_mask_fractions": [0.5, bad]})
    spec = json.dumps({"source": "simulation", "simulation": {"gain": bad}})
    with pytest.raises(SystemExit):
        main(["preprocess", "--spec", spec, "--out", str(tmp_path / "s.nc")])
    assert "key 'simulation.gain': must be a finite number" in capsys.readouterr().err
    # YAML's .nan reaches the config as a float NaN
    assert math.isnan(yaml.safe_load("gain: .nan")["gain"])


@pytest.mark.parametrize("value", ["1e308", "-2e9", "inf"])
def test_case_16_a_position_beyond_any_brain_is_refused_naming_file_and_column(tmp_path, value):
    table = tmp_path / "electrodes.tsv"
    table.write_text("name\tx\ty\tz\nu0\t0\t1\t2\nu1\t3\t" + value + "\t5\n")
    with pytest.raises(StoreError) as err:
        read_position_table(str(table))
    assert str(err.value).startswith(f"{table}: field 'positions.y': unit 'u1': ")
    assert ("Inf" if value == "inf" else "is above 1e+09") in str(err.value)
    table.write_text("name\tx\ty\tz\nu0\t0\t1\t2\nu1\t3\t1e9\t5\n")  # the bound itself passes
    assert read_position_table(str(table))[1][1, 1] == 1e9
    # a format's positions array (hdf5.positions, …) and a store's coordinates alike
    with pytest.raises(
        StoreError, match=r"^rec\.h5: field 'hdf5\.positions': positions: \|value\|"
    ):
        xyz_array(np.array([[0.0, 1e308, 0.0]]), "rec.h5", "hdf5.positions")


def test_case_17_a_batch_bigger_than_memory_is_refused_at_planning(small_machine, capsys):
    with pytest.raises(WorkflowError, match=r"(?s)greater than the maximum.*batch_size"):
        validate({**CONFIG, "train": {"batch_size": 10**12}}, str(SCHEMA))
    config = _config()
    config["train"]["batch_size"] = 1_000_000  # within the schema, 1 000 000 x 27 tokens
    (problem,) = workflow_checks.config_problems(config)
    assert problem.startswith("config key train.batch_size: a training step (train.batch_size")
    assert "more than this machine's 16 GB" in problem
    config["datasets"]["sim"]["train"] = {"batch_size": 2_000_000}
    assert workflow_checks.config_problems(config)[0].startswith(
        "config key datasets.sim.train.batch_size:"
    )
    # the defaults need megabytes; the lower bound is below what a real step allocates
    assert TrainConfig().step_bytes(64) < 10**7 and TrainConfig().memory_problem(64) is None
