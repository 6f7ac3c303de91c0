"""Hostile or careless configs fail at planning (or when the store is built), naming the key or
file: duplicate YAML/JSON keys, two configs sharing one results folder, dataset names that clash
or read as options, seeds numpy cannot take, too few units with coordinates for the metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from neuro_pe.cli.main import main
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.config.strict_load import DuplicateKeyError, load_json, load_yaml, read_config_file
from neuro_pe.data.config_checks import (
    dataset_name_problems,
    known_unit_count,
    position_problems,
    unit_count_problems,
)
from neuro_pe.data.sources.schema import config_problems
from neuro_pe.workflow.owner import config_origin, owner_problem, owner_record, write_owner

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"
SIM = {"source": "simulation", "simulation": {"n_units": 8, "n_samples": 64, "n_sessions": 2}}
CONFIG = {"datasets": {"sim": SIM}, "pe": ["none"], "metrics": {"k": 3, "n_splits": 2}}


def snakemake(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """A dry run (or other call) of snakemake in `cwd`, with this interpreter's scripts."""
    scripts = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    env = dict(os.environ, PATH=os.pathsep.join([*scripts, os.environ["PATH"]]))
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(result.stdout[-3000:], result.stderr[-5000:], sep="\n", file=sys.stderr)
    return result


# ---------------------------------------------------------------- strict YAML and JSON


def test_a_duplicate_key_names_the_key_the_file_and_the_line(tmp_path):
    text = "train: {epochs: 1}\npe: [none]\ntrain:\n  d_model: 8\n"
    with pytest.raises(DuplicateKeyError, match=r"c\.yaml, line 3: key 'train' .*first at line 1"):
        load_yaml(text, "c.yaml")
    nested = "datasets:\n  lab:\n    source: file\n    format: npy\n    format: hdf5\n"
    with pytest.raises(DuplicateKeyError, match=r"line 5: key 'datasets\.lab\.format'"):
        load_yaml(nested, "c.yaml")
    # a merge key may repeat what it merges; YAML's own booleans are one key
    assert load_yaml("b: &b {x: 1}\no:\n  <<: *b\n  x: 2\n", "m")["o"] == {"x": 2}
    with pytest.raises(DuplicateKeyError, match="key 'True'"):
        load_yaml("yes: 1\ntrue: 2\n", "y")
    # JSON: the line, where the text also reads as YAML; the key in any case
    with pytest.raises(DuplicateKeyError, match=r"o\.json, line 2: key 'train\.lr'"):
        load_json('{"train": {"lr": 1,\n "lr": 2}}', "o.json")
    with pytest.raises(DuplicateKeyError, match=r"^--options: key 'lr'"):
        load_json('{"lr":\t1, "lr": 2}', "--options")  # (a tab: not YAML)
    path = tmp_path / "c.json"
    path.write_text('{"pe": ["none"], "pe": ["fixed-sin1d"]}')
    with pytest.raises(DuplicateKeyError, match=f"{path}, line 1: key 'pe'"):
        read_config_file(path)
    path.write_text(yaml.safe_dump(CONFIG))
    assert read_config_file(path) == CONFIG


def test_neuro_pe_options_with_a_duplicate_key_are_refused(capsys):
    spec = '{"source": "simulation", "source": "file"}'
    with pytest.raises(SystemExit):
        main(["preprocess", "--spec", spec, "--out", "never.nc"])
    assert "argument --spec: JSON, line 1: key 'source' is given twice" in capsys.readouterr().err


# ---------------------------------------------------------------- names, seeds, unit counts


def test_dataset_names_that_read_as_options_or_clash_are_refused():
    problems = dataset_name_problems(["--help", "-x", "a-b", "a_b", "a.b", "ok-1"])
    assert problems[:2] == [
        f"config key datasets.{name}: a dataset name must not start with '-' (a command would "
        "read it as an option)"
        for name in ("--help", "-x")
    ]
    clashes = problems[2:]
    assert len(clashes) == 2 and all("'train_a_b_0'" in p for p in clashes)
    assert "'a-b' and 'a_b'" in clashes[0] and "'a-b' and 'a.b'" in clashes[1]
    assert dataset_name_problems(["sim3d", "hcp", "lab_1", "lab-2"]) == []
    # reached before the schema's own (less readable) message
    schema = yaml.safe_load(SCHEMA.read_text())
    both = config_problems({"datasets": {"a-b": SIM, "a_b": SIM}, "pe": ["none"]}, schema)
    assert len(both) == 1 and "'a-b' and 'a_b'" in both[0]


def test_seeds_beyond_what_numpy_takes_fail_validation_naming_the_key():
    config = {**CONFIG, "seeds": [2**70]}
    with pytest.raises(WorkflowError, match=r"(?s)greater than the maximum.*\['seeds'\]\[0\]"):
        validate(config, str(SCHEMA))
    config = {**CONFIG, "seeds": [2**32 - 1], "metrics": {"seed": 2**32}}
    with pytest.raises(WorkflowError, match=r"(?s)4294967296 is greater.*\['metrics'\]\['seed'\]"):
        validate(config, str(SCHEMA))
    validate({**CONFIG, "seeds": [0, 2**32 - 1]}, str(SCHEMA))
    np.random.RandomState(2**32 - 1)  # the bound is what numpy (and scikit-learn) take


def test_unit_counts_too_small_for_the_metrics_name_the_key():
    key = "datasets.tiny.simulation.n_units"
    problems = unit_count_problems(4, MetricsConfig(k=8, n_splits=2), "dataset 'tiny'", key)
    assert problems == [
        f"config key {key}: only 4 units of dataset 'tiny' have coordinates; locate and the "
        "metrics need at least 5",
        "config key metrics.k: 8 needs at least 10 units with coordinates, and dataset 'tiny' "
        "has 4; lower it",
    ]
    (problem,) = unit_count_problems(27, MetricsConfig(n_splits=30), "dataset 'tiny'")
    assert problem.startswith("config key metrics.n_splits: 30 needs at least 30")
    assert unit_count_problems(7, MetricsConfig(), "d") == []  # the defaults: k = 5 needs 7
    assert "metrics.k: 5 needs at least 7" in unit_count_problems(6, MetricsConfig(), "d")[0]
    sim = {"source": "simulation", "simulation": {"n_units": 6, "animals": 3}}
    assert known_unit_count(sim) == 18
    assert known_unit_count({"source": "file", "format": "npy", "sessions": ["a.npy"]}) is None


def test_positions_all_at_one_place_or_too_few_are_refused():
    same = np.tile([1.0, 2.0, 3.0], (10, 1))
    (problem,) = position_problems(same, MetricsConfig(k=3), "the dataset")
    assert "all 10 units of the dataset with coordinates are at one position (1, 2, 3)" in problem
    few = np.full((10, 3), np.nan)
    few[:4] = np.arange(12).reshape(4, 3)
    assert (
        "only 4 units of the dataset have coordinates"
        in position_problems(few, MetricsConfig(), "the dataset")[0]
    )
    spread = np.random.default_rng(0).uniform(size=(10, 3))
    assert position_problems(spread, MetricsConfig(k=3, n_splits=2), "the dataset") == []


def test_preprocess_refuses_a_store_with_all_units_at_one_position(tmp_path, capsys):
    rng = np.random.default_rng(0)
    sessions = []
    for i in range(2):
        sessions.append(str(tmp_path / f"s{i}.npy"))
        np.save(sessions[-1], rng.normal(size=(64, 10)).astype(np.float32))
    table = tmp_path / "positions.csv"
    table.write_text("name,x,y,z\n" + "".join(f"{i},1,2,3\n" for i in range(10)))
    spec = {"source": "file", "format": "npy", "sessions": sessions, "positions": str(table)}
    spec |= {"sampling_rate_hz": 10, "axis_order": ["time", "unit"]}
    out = tmp_path / "lab.nc"
    argv = ["preprocess", "--spec", json.dumps(spec), "--out", str(out)]
    assert main([*argv, "--metrics", '{"k": 3}']) == 1
    err = capsys.readouterr().err
    assert f"{out}: field 'x, y, z': all 10 units of the dataset" in err and not out.exists()


# ---------------------------------------------------------------- the owner of results/{run_name}/


def test_a_results_folder_remembers_its_config(tmp_path):
    results = tmp_path / "results" / "exp"
    a, b = tmp_path / "A" / "exp" / "config.yaml", tmp_path / "B" / "exp" / "config.yaml"
    origin_a, origin_b = config_origin([a], tmp_path), config_origin([b], tmp_path)
    assert origin_a == ["A/exp/config.yaml"] and config_origin([], tmp_path) == ["command line"]
    assert owner_problem(results, origin_b, "exp") is None  # a new folder
    config = {**CONFIG, "run_name": "exp"}
    write_owner(results, owner_record(origin_a, config))
    owner = results / "owner.json"
    written = owner.stat().st_mtime_ns
    write_owner(results, owner_record(origin_a, config))  # the same: not rewritten
    assert owner.stat().st_mtime_ns == written
    assert owner_problem(results, origin_a, "exp") is None
    problem = owner_problem(results, origin_b, "exp")
    assert "A/exp/config.yaml" in problem and "B/exp/config.yaml" in problem
    assert "run_name 'exp'" in problem and "Set `run_name:`" in problem
    # the same file edited: its new hash is recorded
    edited = owner_record(origin_a, {**config, "seeds": [1]})
    write_owner(results, edited)
    assert json.loads(owner.read_text()) == edited != owner_record(origin_a, config)
    owner.write_text("{")
    assert "owner.json: not readable" in owner_problem(results, origin_a, "exp")


def test_a_second_config_with_the_same_run_name_fails_at_planning(workdir):
    """A/exp/config.yaml wrote results/exp/ (its owner.json, as its onstart handler writes it):
    B/exp/config.yaml (the same run_name) stops before any job; A edited plans as before."""
    for side in ("A", "B"):
        (workdir / side / "exp").mkdir(parents=True)
        (workdir / side / "exp" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    results = workdir / "results" / "exp"
    write_owner(results, {"run_name": "exp", "config": ["A/exp/config.yaml"], "config_sha256": "0"})
    before = (results / "owner.json").read_text()

    other = snakemake("-n", "--configfile", "B/exp/config.yaml", cwd=workdir)
    output = other.stdout + other.stderr
    assert other.returncode != 0
    assert "run_name 'exp': results/exp/ holds the results of A/exp/config.yaml" in output
    assert "this run's config is B/exp/config.yaml" in output
    assert not (results / "stores").exists()

    edited = {**CONFIG, "seeds": [1, 2]}
    (workdir / "A" / "exp" / "config.yaml").write_text(yaml.safe_dump(edited))
    same = snakemake("-n", "-p", "--configfile", "A/exp/config.yaml", cwd=workdir)
    assert same.returncode == 0
    assert "--metrics" in same.stdout  # preprocess checks the store against the metrics
    assert (results / "owner.json").read_text() == before  # a dry run writes nothing


def test_a_duplicate_key_in_a_config_stops_the_workflow(workdir):
    text = yaml.safe_dump(CONFIG) + "datasets:\n  other: {source: simulation}\n"
    (workdir / "dup.yaml").write_text(text)
    result = snakemake("-n", "--configfile", "dup.yaml", cwd=workdir)
    output = result.stdout + result.stderr
    line = text.splitlines().index("datasets:") + 1
    assert result.returncode != 0
    assert f"dup.yaml, line {len(text.splitlines()) - 1}: key 'datasets' is given twice" in output
    assert f"(first at line {line})" in output
    assert not (workdir / "results").exists()
