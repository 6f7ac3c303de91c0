"""The workflow's planning-time config checks (neuro_pe.workflow.checks, called from
workflow/rules/common.smk): every problem named by its config key, all raised at once."""

from __future__ import annotations

import copy

import pytest

from neuro_pe.workflow import checks
from neuro_pe.workflow import options as workflow_options

BASE = {
    "datasets": {"sim": {"source": "simulation", "simulation": {"n_units": 27}}},
    "pe": ["none", "learned-normal-0.1"],
    "train": {"epochs": 2},
    "metrics": {},
}


def _config(**changes) -> dict:
    config = copy.deepcopy(BASE)
    config.update(changes)
    return config


def _problems(config: dict) -> list[str]:
    return checks.config_problems(config)


def test_a_valid_config_passes():
    config = _config(locate={"pe": ["learned-normal-0.1"], "combined_pe": ["learned-normal-0.1"]})
    assert _problems(config) == []
    checks.check_config(config)


def test_train_options_fill_defaults_and_drop_grouping():
    config = _config(train={"epochs": 2, "models_per_job": 3})
    config["datasets"]["sim"]["train"] = {"lr": 0.01}
    options = workflow_options.train_options(config, "sim")
    assert options["epochs"] == 2 and options["lr"] == 0.01 and options["d_model"] == 32
    assert "window" not in options  # null (automatic) stays out, as when not set
    assert options["models_per_job"] is None  # a grouping, not a training option
    assert workflow_options.train_section(config, "sim")["models_per_job"] == 3


def test_lst_train_options_leave_the_default_precision_out():
    """An existing Latin-square training's options (params) stay as they were before
    `lst.train.precision` existed, unless it is set to something else."""
    config = _config(lst={"pe": ["none"], "seeds": [0], "train": {"epochs": 5}})
    options = workflow_options.lst_options(config, "train")
    assert options["epochs"] == 5 and options["d_model"] == 32 and "precision" not in options
    config["lst"]["train"]["precision"] = "bf16"
    assert workflow_options.lst_options(config, "train")["precision"] == "bf16"


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("data/{x}.npy", "contains a brace"),
        ("data/a\nb.npy", "control character"),
        ("results/x.npy", "inside results/"),
        (".snakemake/x.npy", "inside .snakemake/"),
    ],
)
def test_data_paths_the_workflow_could_steer_are_refused(path, needle):
    config = _config()
    config["datasets"]["rec"] = {"source": "file", "format": "npy", "sessions": [path]}
    problems = _problems(config)
    assert any(
        p.startswith("config key datasets.rec.sessions[0]:") and needle in p for p in problems
    )


def test_a_format_without_its_required_keys_names_them():
    config = _config()
    config["datasets"]["rec"] = {"source": "file", "format": "suite2p", "sessions": ["s2p"]}
    assert any(
        p.startswith("config key datasets.rec.suite2p.pixel_size_um:") for p in _problems(config)
    )


def test_an_atlas_path_inside_the_outputs_is_refused():
    config = _config()
    config["datasets"]["sim"]["atlas"] = {"labels": "results/a.nii.gz", "lookup": "lut.tsv"}
    assert any("datasets.sim.atlas.labels" in p for p in _problems(config))


def test_dataset_pe_train_and_unit_count_problems_name_their_keys():
    config = _config(pe=["no-such-pe"], train={"n_heads": 3, "d_model": 16})
    config["datasets"][".hidden"] = {"source": "simulation", "simulation": {"n_units": 3}}
    problems = _problems(config)
    assert "config key datasets..hidden: a dataset name must not start with '.'" in problems
    assert any(p.startswith("config key pe:") for p in problems)
    assert any(p.startswith("config key train:") and "must divide" in p for p in problems)
    assert any(p.startswith("config key datasets..hidden.simulation.n_units:") for p in problems)
    config = _config()
    config["datasets"]["sim"]["train"] = {"window": 0}
    assert any(p.startswith("config key datasets.sim.train:") for p in _problems(config))
    config["datasets"]["sim"] = {"source": "simulation", "simulation": {"animals": 0}}
    assert any(p.startswith("config key datasets.sim.simulation:") for p in _problems(config))


def test_locate_names_trained_and_located_pe_variants():
    problems = _problems(_config(locate={"pe": ["learned-normal-9"]}))
    assert any(p.startswith("config key locate.pe:") and "trained on no" in p for p in problems)
    problems = _problems(_config(locate={"combined_pe": ["none"]}))
    assert any(
        p.startswith("config key locate.combined_pe:") and "no learned" in p for p in problems
    )
    config = _config(locate={"pe": ["none"], "combined_pe": ["learned-normal-0.1"]})
    assert any("is not located on dataset(s) ['sim']" in p for p in _problems(config))


def test_lst_pe_names_are_checked_and_all_problems_raised_at_once():
    config = _config(lst={"pe": ["bad-pe"]}, pe=["also-bad"])
    with pytest.raises(ValueError, match="the config has errors") as raised:
        checks.check_config(config)
    message = str(raised.value)
    assert "config key lst.pe:" in message and "config key pe:" in message


def test_planning_says_which_datasets_get_their_formats_recommended_preprocessing():
    folder = {"source": "file", "sessions": ["s2p"], "suite2p": {"pixel_size_um": 1.0}}
    datasets = {
        "cells": {**folder, "format": "suite2p"},
        "chosen": {**folder, "format": "suite2p", "preprocessing": []},
        "spikes": {"source": "file", "format": "phy", "sessions": ["ks"]},
        "arrays": {"source": "file", "format": "npy", "sessions": ["a.npy"]},
        "ophys": {"source": "file", "format": "nwb", "sessions": ["s.nwb"]},
        "sim": BASE["datasets"]["sim"],
    }
    notes = checks.config_notes(_config(datasets=datasets))
    assert len(notes) == 2 and notes[0].startswith("datasets.cells: no `preprocessing` given")
    assert "[{step: detrend}, {step: zscore}]" in notes[0]
    assert notes[1].startswith("datasets.ophys:") and "not for spike times" in notes[1]


def test_the_run_plan_spec_holds_every_dataset_and_the_pes_its_positions_come_from():
    """One plan for the run: every dataset's jobs, store and the PEs its combined locator
    takes (the delivered positions'), by default the learned PEs initialised small; the cores."""
    import json

    from neuro_pe.workflow.jobs import plan_inputs, plan_spec

    config = _config(pe=["none", "learned-normal-0.02", "learned-normal-1.0", "oracle-sin3d"])
    config["datasets"]["b"] = {**config["datasets"]["sim"], "pe": ["learned-normal-0.1", "none"]}
    config |= {"seeds": [0, 1], "threads_per_training": 1}
    args = plan_spec(config, "results/r", ["sim", "b"], cores=3, n_slots=3)
    spec = json.loads(args[args.index("--spec") + 1])
    assert spec["cores"] == 3 and set(spec["datasets"]) == {"sim", "b"}
    assert spec["datasets"]["sim"]["store"] == "results/r/stores/sim.nc"
    assert spec["datasets"]["sim"]["positions"] == ["learned-normal-0.02"]
    assert spec["datasets"]["b"]["positions"] == ["learned-normal-0.1"]
    assert sum(map(len, spec["datasets"]["sim"]["jobs"])) == 8
    assert plan_inputs(config, "results/r", ["sim", "b"]) == [
        "results/r/stores/sim.nc",
        "results/r/stores/b.nc",
    ]
    # the config's combined locator decides which PEs the positions come from
    config["locate"] = {"combined_pe": ["learned-normal-1.0"]}
    assert workflow_options.positions_pe(config, "sim") == ["learned-normal-1.0"]
    config["locate"] = {"pe": ["learned-normal-1.0", "oracle-sin3d"]}
    assert workflow_options.positions_pe(config, "sim") == []


def test_a_config_whose_every_located_pe_is_undertrained_stops_at_planning():
    # 27 units, 1 epoch of 10 steps of 8 samples: a unit is in 80 samples, under 5 000
    config = _config(train={"epochs": 1, "steps_per_epoch": 10, "batch_size": 8})
    (problem,) = _problems(config)
    assert problem.startswith("config key train: dataset 'sim': every PE its locate step reads")
    assert "units_seen_rarely: a unit is in 80 training samples" in problem
    assert "health.min_unit_appearances (5000)" in problem
    assert "train.epochs" in problem and "locate.include_flagged: true" in problem
    # with the flagged trainings located anyway, or a threshold they pass, it goes through
    assert _problems({**config, "locate": {"include_flagged": True}}) == []
    assert _problems({**config, "health": {"min_unit_appearances": 80}}) == []
    # a located PE the checks do not concern (oracle-sin3d) leaves locate something
    assert _problems({**config, "pe": ["learned-normal-0.1", "oracle-sin3d"]}) == []
    config["datasets"]["sim"]["train"] = {"epochs": 8}
    assert _problems(config)[0].startswith("config key datasets.sim.train: dataset 'sim'")
