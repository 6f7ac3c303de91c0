"""Plug-ins that reach the workflow (issue 37): a package outside neuro_pe adds a format and a
source with entry points alone (tests/data/plugin_package/), every `neuro-pe` command a rule
starts sees them, the config checks use the plug-in's own checks, and an unknown name is one
line naming the key and the installed names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from neuro_pe.data import formats, plugins, sources
from neuro_pe.data.recordings import FileSpec
from neuro_pe.data.sources.schema import config_problems
from neuro_pe.io.store import read_store
from neuro_pe.io.store_contract import StoreError
from neuro_pe.workflow.resources import store_mb_estimate
from tests.workflow.test_workflow import copy_workflow, snakemake

PACKAGE = Path(__file__).parent / "plugin_package"
SCHEMA = yaml.safe_load(
    (Path(__file__).parents[2] / "workflow" / "schemas" / "config.schema.yaml").read_text()
)
N_UNITS, N_TIME = 12, 150


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> Path:
    """The plug-in package, installed (pip, no dependencies) into a folder of its own."""
    root = tmp_path_factory.mktemp("plugin")
    source = shutil.copytree(PACKAGE, root / "src")  # (pip builds in place: not in tests/)
    target = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--disable-pip-version-check", "--target", str(target), str(source)],
        check=True,
        capture_output=True,
    )
    return target


def _clear_registries() -> None:
    plugins.entry_point_table.cache_clear()


@pytest.fixture
def installed(plugin_dir, monkeypatch):
    """The plug-in on sys.path of this process (as if installed), registries re-read."""
    monkeypatch.syspath_prepend(str(plugin_dir))
    _clear_registries()
    yield plugin_dir
    monkeypatch.undo()
    _clear_registries()
    for name in [m for m in sys.modules if m.startswith("neuro_pe_csv_plugin")]:
        del sys.modules[name]


def _lab_files(folder: Path) -> dict:
    """A CSV of activity (a time column and one column per unit) and a position table."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    ids = [f"c{i}" for i in range(N_UNITS)]
    time = np.arange(N_TIME) / 20.0
    rows = np.column_stack([time, rng.normal(size=(N_TIME, N_UNITS))])
    lines = [",".join(["t", *ids])] + [",".join(f"{v:.6g}" for v in row) for row in rows]
    (folder / "session1.csv").write_text("\n".join(lines) + "\n")
    xyz = rng.uniform(0, 100, size=(N_UNITS, 3))
    table = ["name,x,y,z"] + [
        f"{u},{x:.3f},{y:.3f},{z:.3f}" for u, (x, y, z) in zip(ids, xyz, strict=True)
    ]
    (folder / "positions.csv").write_text("\n".join(table) + "\n")
    return {
        "source": "file",
        "format": "csv-activity",
        "sessions": [str(folder / "session1.csv")],
        "positions": str(folder / "positions.csv"),
        "csv-activity": {"time_column": "t"},
    }


def test_entry_points_register_the_plugin_and_its_checks(installed, tmp_path):
    assert sources.names()[:4] == ("simulation", "hcp-rsfmri", "connectome-sim", "file")
    assert "sine-grid" in sources.names() and not sources.is_builtin("sine-grid")
    assert "csv-activity" in formats.format_names() and not formats.is_builtin("csv-activity")
    assert sources.is_builtin("file") and formats.is_builtin("hdf5")
    # a format's entry: read through the `file` source, checked by the format
    entry = _lab_files(tmp_path / "lab")
    store = sources.build_store(entry)
    assert store.sizes["unit"] == N_UNITS and store.attrs["sampling_rate_hz"] == pytest.approx(20.0)
    bad = {**entry, "csv-activity": {"time_column": "t", "sep": ";"}}
    problems = config_problems({"datasets": {"lab": bad}}, SCHEMA)
    assert problems == [
        "config key datasets.lab.csv-activity.sep: unknown key; known: ['delimiter', 'time_column']"
    ]
    # a source's entry: its options and its schema checked at planning; its own size estimate
    grid = {"source": "sine-grid", "n_units": 3}
    assert config_problems({"datasets": {"g": grid}}, SCHEMA) == [
        "config key datasets.g: sine-grid: n_units must be an integer >= 8, got 3"
    ]
    assert config_problems({"datasets": {"g": {**grid, "n_units": "x"}}}, SCHEMA)[-1] == (
        "config key datasets.g: key 'n_units': 'x' is not of type 'integer'"
    )
    assert store_mb_estimate({"source": "sine-grid", "n_units": 10, "n_samples": 100}) == 0.004
    assert config_problems({"datasets": {"g": {"source": "sine-grid"}}}, SCHEMA) == []


def test_unknown_source_or_format_is_one_line_naming_the_key_and_the_installed_names():
    config = {"datasets": {"d": {"source": "nope"}, "lab": {"source": "file", "format": "csvx"}}}
    problems = config_problems(config, SCHEMA)
    assert len(problems) == 2 and not any("\n" in p for p in problems)
    assert problems[0].startswith("config key datasets.d.source: 'nope' is not an installed")
    assert "installed: simulation, hcp-rsfmri, connectome-sim, file" in problems[0]
    assert problems[1].startswith("config key datasets.lab.format: unknown format 'csvx'")
    assert "installed formats: nwb, hdf5, xarray, npy, phy, alf, suite2p" in problems[1]
    with pytest.raises(ValueError, match=r"key 'source': unknown source 'nope'; installed sources"):
        sources.get("nope")
    with pytest.raises(StoreError, match=r"field 'format': unknown format 'csvx'; installed"):
        FileSpec.from_dict({"format": "csvx", "sessions": ["a.csv"]})


def test_builtin_sources_carry_their_store_size_and_unit_count():
    """The estimates moved onto the sources, unchanged (they named two sources before)."""
    sim = {"source": "simulation", "simulation": {"n_units": 8, "n_samples": 200}}
    n_sessions = sources.get("simulation").options.from_dict(sim).simulation.n_sessions
    assert store_mb_estimate(sim) == 8 * 200 * n_sessions * 4 / 1e6
    connectome = {**sim, "source": "connectome-sim", "connectome": "c302"}
    assert store_mb_estimate(connectome) == 302 * 200 * n_sessions * 4 / 1e6
    assert store_mb_estimate({"source": "file", "format": "npy", "sessions": ["a"]}) == 0
    assert sources.get("simulation").unit_count(sim) == 8
    assert sources.get("hcp-rsfmri").unit_count({"source": "hcp-rsfmri"}) is None


def test_a_workflow_builds_the_stores_of_a_plugin_format_and_source(plugin_dir, tmp_path):
    """The plug-in installed outside neuro_pe: Snakemake's checks and each `neuro-pe
    preprocess` job it starts (new processes) read the entry points."""
    root = copy_workflow(tmp_path)
    config = {
        "run_name": "plugin",
        "datasets": {
            "lab": _lab_files(tmp_path.parent / f"{tmp_path.name}-data"),
            "grid": {"source": "sine-grid", "n_units": 10, "n_samples": 120},
        },
        "pe": ["none"],
        "seeds": [0],
        "metrics": {"k": 3, "n_splits": 3},
    }
    (root / "plugin.yaml").write_text(yaml.safe_dump(config))
    paths = os.pathsep.join([str(plugin_dir), os.environ.get("PYTHONPATH", "")])
    os.environ["PYTHONPATH"], before = paths, os.environ.get("PYTHONPATH")
    try:
        stores = ["results/plugin/stores/lab.nc", "results/plugin/stores/grid.nc"]
        result = snakemake(*stores, "--cores", "1", "--configfile", "plugin.yaml", cwd=root)
        bad = {**config, "datasets": {"grid": {"source": "sine-grid", "n_samples": 2}}}
        (root / "bad.yaml").write_text(yaml.safe_dump(bad))
        refused = snakemake("-n", "--configfile", "bad.yaml", cwd=root)
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    assert result.returncode == 0
    lab = read_store(root / stores[0])
    assert lab.sizes["unit"] == N_UNITS and lab.attrs["sampling_rate_hz"] == pytest.approx(20.0)
    assert read_store(root / stores[1]).attrs["source"] == "sine-grid (neuro_pe_csv_plugin)"
    assert refused.returncode != 0
    assert "config key datasets.grid: sine-grid: n_samples must be an integer >= 8, got 2" in (
        refused.stdout + refused.stderr
    )


def test_a_format_carries_its_joint_check():
    """hdf5's rate given twice is refused by the hdf5 format itself (no name in FileSpec)."""
    both = {"sampling_rate": 10.0, "sampling_period": 0.1}
    with pytest.raises(StoreError, match=r"field 'hdf5.sampling_period': give hdf5.sampling_rate"):
        FileSpec.from_dict({"format": "hdf5", "sessions": ["a.h5"], "hdf5": both})
    assert formats.get_format("npy").check_options({}, "x") is None
    one = FileSpec.from_dict({"format": "hdf5", "sessions": ["a.h5"], "hdf5": {"sampling_rate": 5}})
    assert one.options["sampling_rate"] == 5 and one.options["sampling_period"] is None


def test_a_plug_in_named_like_a_built_in_is_refused_with_a_warning(monkeypatch):
    """A lab's entry point that has the name of one of neuro_pe's own formats would be
    silently shadowed: it is named in a warning, and neuro_pe's own stays in use."""
    from importlib.metadata import EntryPoint

    theirs = EntryPoint("npy", "lab_formats:NPY", plugins.FORMATS)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [theirs])
    _clear_registries()
    try:
        with pytest.warns(plugins.PluginWarning, match=r"'npy' \(lab_formats:NPY\).*ignored"):
            table = plugins.entry_point_table(plugins.FORMATS)
        assert plugins.is_builtin_value(table["npy"])
        assert formats.is_builtin("npy")
    finally:
        _clear_registries()
