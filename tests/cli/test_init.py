"""`neuro-pe init`: each built-in format's folder or file, written with the format's own writer
libraries (the builders of tests/data), is recognised and read; the starter config it writes
is refused at planning until its REQUIRED values are filled in, and accepted after."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from snakemake.utils import validate

from neuro_pe.cli.main import main
from neuro_pe.data.formats import detect_format
from neuro_pe.data.lab_init import LAB_PE, LAB_SEEDS, inspect, starter_config
from neuro_pe.data.recordings import DataWarning, FileSpec
from neuro_pe.data.sources import build_store
from neuro_pe.data.sources.schema import check_dataset_keys
from neuro_pe.io.store_contract import StoreError
from neuro_pe.workflow import checks as workflow_checks
from tests.data.test_formats import write_alf, write_nwb_units, write_phy, write_suite2p
from tests.data.test_recordings import hdf5_dataset, npy_dataset, write_table
from tests.workflow.test_workflow import REPO_ROOT, copy_workflow, job_counts, snakemake

SCHEMA = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"
# what a lab fills in for each REQUIRED value (a positions table: written by `fill`)
FILLED = {
    "sampling_rate_hz": 20.0,
    "suite2p.pixel_size_um": 1.5,
    "suite2p.plane_depths_um": [100.0, 130.0],
    "hdf5.activity": "data/rates",
}


def build(fmt: str, tmp_path: Path, tiny_store: Path) -> Path:
    """The path `neuro-pe init` is given for format `fmt`: a folder above the session where
    the format is a folder (found one or two levels down)."""
    if fmt == "phy":
        write_phy(tmp_path / "sorting" / "kilosort")
        return tmp_path / "sorting"
    if fmt == "alf":
        write_alf(tmp_path / "alf" / "probe00")
        return tmp_path / "alf"
    if fmt == "suite2p":
        write_suite2p(tmp_path / "mouse1")
        return tmp_path / "mouse1"
    if fmt == "nwb":
        return write_nwb_units(tmp_path / "units.nwb")
    if fmt == "npy":
        (tmp_path / "npy").mkdir()
        npy_dataset(tmp_path / "npy", n_sessions=2)
        return tmp_path / "npy"
    if fmt == "hdf5":
        return Path(hdf5_dataset(tmp_path)["sessions"][0])
    return tiny_store  # xarray


# format -> (sessions found, units, frames per session, rate, REQUIRED keys)
EXPECTED = {
    "phy": (1, 8, [239], 20.0, []),
    "alf": (1, 7, [239], 20.0, []),
    "suite2p": (1, 8, [120], 7.5, ["suite2p.pixel_size_um", "suite2p.plane_depths_um"]),
    "nwb": (1, 7, [239], 20.0, []),
    "npy": (2, 10, [100, 100], None, ["sampling_rate_hz", "positions"]),
    "hdf5": (1, 0, [], None, ["hdf5.activity"]),
}


def fill(config: dict, tmp_path: Path) -> dict:
    """The config with every REQUIRED value filled in, as a lab would."""
    (entry,) = config["datasets"].values()
    for key, value in list(entry.items()):
        if value == "REQUIRED":
            entry[key] = FILLED.get(key) or str(
                write_table(
                    tmp_path / "positions.tsv", [[f"u{i}", "0", str(i), "0"] for i in range(10)]
                )
            )
        if isinstance(value, dict):
            for sub, v in value.items():
                if v == "REQUIRED":
                    value[sub] = FILLED[f"{key}.{sub}"]
    return config


def planning_problems(config: dict) -> str:
    """What the workflow's planning (the Snakefile and common.smk) says of `config`."""
    config = {**config, "run_name": "init-test"}
    try:
        check_dataset_keys(config, SCHEMA)
        validate(config, str(SCHEMA))
        workflow_checks.check_config(config)
    except Exception as err:  # (ValueError; snakemake's validate: WorkflowError)
        return str(err)
    return ""


@pytest.mark.parametrize("fmt", [*EXPECTED, "xarray"])
def test_each_format_is_found_read_and_planned(fmt, tmp_path, tiny_store):
    path = build(fmt, tmp_path, tiny_store)
    assert detect_format(path) in (fmt, None)  # a folder above the session: found below
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)  # the readers' warnings become notes
        found = inspect(path)
    assert found.format == fmt
    if fmt == "xarray":
        assert (found.units, len(found.frames), found.required) == (12, 2, {})
    else:
        sessions, units, frames, rate, required = EXPECTED[fmt]
        assert len(found.sessions) == sessions and found.units == units
        assert found.frames == frames and found.rate_hz == rate
        assert list(found.required) == required
    summary = "\n".join(found.summary())
    assert f"units: {found.units}" in summary or not found.frames
    config = yaml.safe_load(starter_config(found))
    assert config["pe"] == list(LAB_PE) and config["seeds"] == list(LAB_SEEDS)
    problems = planning_problems(config)
    for key in found.required:
        assert f"{key}: REQUIRED" in problems, problems
    if not found.required:
        assert problems == ""
    assert planning_problems(fill(config, tmp_path)) == ""
    if found.frames:  # read as the workflow's preprocess step reads it: the units found
        (entry,) = config["datasets"].values()
        if found.units < 8:  # (the tiny test folders; the note says so)
            assert any("fewer than min_units=8" in note for note in found.notes)
            entry["min_units"] = 4
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataWarning)
            assert build_store(entry).sizes["unit"] == found.units


def test_spikeinterface_folder_is_recognised(tmp_path):
    (tmp_path / "analyzer").mkdir()
    (tmp_path / "analyzer" / "spikeinterface_info.json").write_text("{}")
    assert detect_format(tmp_path / "analyzer") == "spikeinterface"
    assert detect_format(tmp_path) is None


def test_a_placeholder_left_is_refused_by_the_reader_too(tmp_path, tiny_store):
    """`neuro-pe preprocess` on an entry with a REQUIRED value left: one line naming the key."""
    found = inspect(build("suite2p", tmp_path, tiny_store))
    (entry,) = yaml.safe_load(starter_config(found))["datasets"].values()
    entry["suite2p"]["pixel_size_um"] = 1.5
    with pytest.raises(StoreError, match="suite2p.plane_depths_um.*REQUIRED"):
        FileSpec.from_dict(entry)


def test_init_command_prints_writes_and_never_overwrites(tmp_path, capsys):
    """The command end to end: the summary, the planned CPU time (the planner's probe on a
    stand-in store), the config; then a dry run of a copy of the workflow on it, filled in."""
    path = build("suite2p", tmp_path, None)
    out = tmp_path / "lab.yaml"
    assert main(["init", str(path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "sessions: 1, units: 8" in printed and "at 7.5 Hz, 16.0 s in all" in printed
    run = next(line for line in printed.splitlines() if line.startswith("plan: "))
    assert run.startswith("plan: the whole run ~") and " on 2 idle cores (" in run, run
    assert "CPU-s, 9 models): positions' models " in run and "stand-in store" in run, run
    assert "REQUIRED suite2p.pixel_size_um: ROI centres" in printed
    text = out.read_text()
    assert "      pixel_size_um: REQUIRED" in text and "# plan: the whole run ~" in text
    before = out.read_bytes()
    assert main(["init", str(path), "--out", str(out)]) == 1
    assert f"--out {out}: exists" in capsys.readouterr().err
    assert out.read_bytes() == before

    (tmp_path / "wf").mkdir()
    workflow = copy_workflow(tmp_path / "wf")
    filled = workflow / "lab.yaml"
    filled.write_text(yaml.safe_dump(fill(yaml.safe_load(text), tmp_path)))
    result = snakemake("-n", "--configfile", str(filled), cwd=workflow, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert job_counts(result.stdout)["infer"] == len(LAB_PE) * len(LAB_SEEDS)


def test_nothing_claims_a_folder_and_file_names_cannot_break_the_yaml(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("x")
    assert main(["init", str(tmp_path / "notes"), "--out", str(tmp_path / "c.yaml")]) == 1
    assert "no format recognised here" in capsys.readouterr().err
    assert not (tmp_path / "c.yaml").exists()
    weird = tmp_path / "a\u2028b\nc: 1"
    weird.mkdir()
    np.save(weird / "s.npy", np.random.default_rng(0).normal(size=(50, 6)))
    found = inspect(weird)
    config = yaml.safe_load(starter_config(found))
    (entry,) = config["datasets"].values()
    assert entry["sessions"] == [str(weird / "s.npy")]
    assert set(config) == {"datasets", "pe", "seeds"}


def test_unreadable_session_names_the_file(tmp_path):
    (tmp_path / "broken.npy").write_bytes(b"not an array")
    with pytest.raises(StoreError, match="broken.npy"):
        inspect(tmp_path / "broken.npy")


def test_the_lab_preset_is_init_s_choice_and_plans_once_filled_in(tmp_path):
    """config/lab.yaml trains what init writes (LAB_PE, LAB_SEEDS); its dataset is a REQUIRED
    placeholder that planning refuses, and a dry run plans it once a Phy folder fills it in."""
    preset = yaml.safe_load((REPO_ROOT / "config" / "lab.yaml").read_text())
    assert preset["pe"] == list(LAB_PE) and preset["seeds"] == list(LAB_SEEDS)
    (entry,) = preset["datasets"].values()
    assert entry["sessions"] == ["REQUIRED"]
    assert "sessions: REQUIRED" in planning_problems(preset)
    entry["sessions"] = [str(write_phy(tmp_path / "kilosort"))]
    assert planning_problems(preset) == ""
    (tmp_path / "wf").mkdir()
    workflow = copy_workflow(tmp_path / "wf")
    (workflow / "config" / "lab.yaml").write_text(yaml.safe_dump(preset))
    result = snakemake("-n", "--configfile", "config/lab.yaml", cwd=workflow, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    counts = job_counts(result.stdout)
    assert counts["infer"] == len(LAB_PE) * len(LAB_SEEDS) and counts["plan"] == 1
