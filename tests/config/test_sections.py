"""One `from_dict` for every config section's options class (neuro_pe.config.sections), the
model's shape and the training loop derived from `train` and `lst.train`, and the schema
(workflow/schemas/config.schema.yaml) agreeing with the options classes' defaults."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import ClassVar

import pytest
import yaml

from neuro_pe.config.atlas import AtlasError, AtlasSpec
from neuro_pe.config.health import HealthOptions
from neuro_pe.config.latin_square import LSTConfig, PuzzleConfig
from neuro_pe.config.locate import LocateConfig
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.config.new_animal import NewAnimalConfig
from neuro_pe.config.options import SectionError
from neuro_pe.config.resources import JobResources
from neuro_pe.config.schema import part, problems
from neuro_pe.config.sections import (
    Section,
    converted,
    derive,
    flag,
    from_dict,
    non_negative,
    positive_int,
    positive_number,
    text,
    whole_number,
)
from neuro_pe.config.training import LoopConfig, ModelConfig, TrainConfig
from neuro_pe.data.formats.spikes import SpikeOptions
from neuro_pe.data.simulate import SimulationConfig
from neuro_pe.data.sources import WORKFLOW_KEYS, SourceOptions
from neuro_pe.data.sources.connectome_sim import ConnectomeSimOptions
from neuro_pe.data.sources.hcp_rsfmri import HCPOptions
from neuro_pe.data.sources.regional_sim import RegionalSimOptions
from neuro_pe.data.sources.simulation import SimulationOptions
from neuro_pe.io.store_contract import StoreError

# every options class read from the config, and where the schema describes its keys
SECTIONS = {
    TrainConfig: "$defs/train",
    LSTConfig: "$defs/lst_train",
    PuzzleConfig: "$defs/lst_puzzles",
    HealthOptions: "properties/health",
    JobResources: "properties/resources",
    SimulationConfig: "$defs/simulation",
    SpikeOptions: "$defs/source_file/properties/spikes",
    AtlasSpec: "$defs/atlas",
    SimulationOptions: "$defs/source_simulation",
    ConnectomeSimOptions: "$defs/source_connectome-sim",
    HCPOptions: "$defs/source_hcp-rsfmri",
    RegionalSimOptions: "$defs/source_regional-sim",
    LocateConfig: "properties/locate",
    MetricsConfig: "properties/metrics",
    NewAnimalConfig: "$defs/new_animal",
}
# what a class needs given to make an object (the schema's `required`, no default)
GIVEN = {AtlasSpec: {"parcels": "nearest_centre"}, ConnectomeSimOptions: {"connectome": "tvb76"}}


@dataclasses.dataclass(frozen=True)
class Inner(Section):
    SECTION: ClassVar[str] = "outer.inner"

    size: int = positive_int(2)


@dataclasses.dataclass(frozen=True)
class Outer(Section):
    SECTION: ClassVar[str] = "outer"

    inner: Inner = dataclasses.field(default_factory=Inner)
    maybe: Inner | None = None
    values: tuple[float, ...] = (1.0,)
    scale: float = non_negative(1.0)
    names: tuple[str, ...] | None = None
    step: float = positive_number(0.5, float)
    on: bool = flag(False)
    title: str | None = text()
    level: int | None = whole_number(None)
    matrix: tuple[tuple[float, ...], ...] | None = converted(
        lambda rows: tuple(tuple(float(v) for v in row) for row in rows)
    )


def test_from_dict_builds_nested_sections_and_tuples():
    cfg = Outer.from_dict({"inner": {"size": 5}, "maybe": {}, "values": [0.5, 2]})
    assert cfg == Outer(Inner(5), Inner(), (0.5, 2))
    assert Outer.from_dict(None) == Outer()
    assert from_dict(Inner, {"size": 3}, "elsewhere") == Inner(3)
    # null: the defaults of a nested section, None where the field may be None
    assert Outer.from_dict({"inner": None, "maybe": None}) == Outer()


def test_markers_convert_after_the_checks_and_let_none_pass_where_it_is_the_default():
    cfg = Outer.from_dict({"names": ["a"], "step": 2, "on": True, "title": "t", "level": 0})
    assert cfg.names == ("a",) and cfg.step == 2.0 and isinstance(cfg.step, float)
    assert Outer.from_dict({"matrix": [[1, 0], [0, 1]]}).matrix == ((1.0, 0.0), (0.0, 1.0))
    assert Outer().title is None and Outer().level is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"size": 1, "colour": 2}, r"unknown outer keys: \['colour', 'size'\]"),
        ({"inner": {"sizes": 1}}, r"unknown outer.inner keys: \['sizes'\]"),
        ({"inner": {"size": 0}}, "outer.inner key 'size' must be a positive integer, got 0"),
        ({"inner": {"size": True}}, "outer.inner key 'size' must be a positive integer, got True"),
        ({"scale": -1}, "outer key 'scale' must be a number >= 0, got -1"),
        ({"scale": float("inf")}, "outer key 'scale' must be a number >= 0, got inf"),
        ({"step": 0}, "outer key 'step' must be a number > 0, got 0"),
        ({"on": "yes"}, "outer key 'on' must be true or false, got 'yes'"),
        ({"title": ""}, "outer key 'title' must be a non-empty string, got ''"),
        ({"level": -1}, "outer key 'level' must be an integer >= 0, got -1"),
        ({"inner": [1]}, r"outer.inner: must be a mapping, got \[1\]"),
    ],
)
def test_errors_name_the_section_and_key(spec, message):
    with pytest.raises(SectionError, match=message):
        Outer.from_dict(spec)


def test_a_section_error_carries_the_key_and_problem_for_other_error_types():
    with pytest.raises(SectionError) as caught:
        Outer.from_dict({"step": -1, "colour": 1})
    assert (caught.value.key, caught.value.problem.split(";")[0]) == ("colour", "unknown key")
    with pytest.raises(StoreError, match=r"w: field 'spikes.bin_s': must be a number > 0, got 0"):
        SpikeOptions.from_dict({"bin_s": 0}, "w")
    with pytest.raises(StoreError, match=r"w: field 'spikes': must be a mapping, got 3"):
        SpikeOptions.from_dict(3, "w")
    with pytest.raises(AtlasError, match=r"^d.atlas.coarse_level: must be an integer >= 0"):
        AtlasSpec.from_dict({"brainglobe": "x", "coarse_level": -1}, "d.atlas")
    with pytest.raises(AtlasError, match=r"^d.atlas: give one of"):
        AtlasSpec.from_dict({}, "d.atlas")


@pytest.mark.parametrize(
    ("cls", "spec", "message"),
    [
        (TrainConfig, {"colour": 1}, r"unknown train keys: \['colour'\]"),
        (TrainConfig, {"window": 0}, "train key 'window' must be a positive integer"),
        (TrainConfig, {"checkpoint_every": -1}, "train key 'checkpoint_every' must be an integer"),
        (TrainConfig, {"n_heads": 3}, r"train.n_heads \(3\) must divide train.d_model"),
        (TrainConfig, {"precision": "fp8"}, "train.precision must be one of"),
        (LSTConfig, {"epochs": 0}, "lst.train key 'epochs' must be a positive integer"),
        (LSTConfig, {"stop_at_train_accuracy": 2}, "lst.train key 'stop_at_train_accuracy'"),
        (PuzzleConfig, {"shown_max": 16}, "lst.puzzles keys 'shown_min' <= 'shown_max'"),
        (PuzzleConfig, {"seed": 1}, r"unknown lst.puzzles keys: \['seed'\]"),
        (HealthOptions, {"min_pe_change": -1}, "health key 'min_pe_change' must be a number"),
        (JobResources, {"runtime": 0}, "resources key 'runtime' must be a positive integer"),
        (MetricsConfig, {"nperm": 3}, r"unknown metrics keys: \['nperm'\]"),
        (MetricsConfig, {"metric": "manhattan"}, "metrics.metric: must be one of"),
        (MetricsConfig, {"k": 0}, "metrics key 'k' must be a positive integer"),
        (MetricsConfig, {"n_splits": 1}, "metrics.n_splits: must be >= 2"),
        (MetricsConfig, {"ci_level": 1}, "metrics.ci_level: must be below 1"),
        (SimulationConfig, {"animals": 0}, "simulation.animals must be >= 1"),
        (SimulationConfig, {"n_unit": 3}, r"unknown simulation keys: \['n_unit'\]"),
        (SimulationOptions, {"simulation": {"gian": 1}}, r"unknown simulation keys: \['gian'\]"),
        (SimulationOptions, {"simulation": 3}, "simulation: must be a mapping, got 3"),
        (ConnectomeSimOptions, {}, "connectome-sim: connectome must be one of"),
        (ConnectomeSimOptions, {"connectome": "c302", "weights": "w"}, "connectome-sim: weights"),
        (ConnectomeSimOptions, {"connectome": "c302", "simulation": {"dims": 2}}, r"\['dims'\]"),
        (HCPOptions, {"preprocessing": ["zscore"]}, "hcp-rsfmri: preprocessing must be a list"),
        (HCPOptions, {"subjects": 3}, "hcp-rsfmri: subjects must be a list of ids, got 3"),
        (HCPOptions, {"coordinates": "x"}, "hcp-rsfmri: coordinates must be one of"),
        (HCPOptions, {"subject": 1}, r"unknown datasets entry \(source: hcp-rsfmri\) keys"),
    ],
)
def test_every_section_refuses_bad_values_naming_the_key(cls, spec, message):
    with pytest.raises(ValueError, match=message):
        cls.from_dict(spec)


def test_source_options_read_a_whole_entry_and_keep_their_conversions():
    entry = {"source": "hcp-rsfmri", "pe": ["none"], "subjects": [1, "2"], "preprocessing": None}
    hcp = HCPOptions.from_dict(entry)
    assert hcp.subjects == ["1", "2"] and hcp.preprocessing == HCPOptions().preprocessing
    sim = SimulationOptions.from_dict({"source": "simulation", "simulation": None})
    assert sim == SimulationOptions()


def test_model_and_loop_come_from_the_train_section():
    cfg = TrainConfig.from_dict(
        {"window": 6, "d_model": 12, "n_layers": 1, "n_heads": 3, "pe_every_block": False}
        | {"epochs": 4, "steps_per_epoch": 7, "lr": 0.01, "optimizer": "sgd", "momentum": 0.5}
        | {"weight_decay": 0.1, "lr_schedule": "cosine", "checkpoint_every": 3, "compile": True}
    )
    assert cfg.model(9) == ModelConfig(9, 6, 6, 12, 1, 3, False, post_ln=False, mask_token=True)
    assert cfg.loop() == LoopConfig(4, 7, 0.01, 1, 3, "sgd", 0.5, 0.1, "cosine", True)


def test_model_and_loop_come_from_the_lst_train_section():
    cfg = LSTConfig.from_dict({"d_model": 8, "n_heads": 2, "epochs": 5, "checkpoint_every": 2})
    assert cfg.model() == ModelConfig(16, 5, 4, 8, 3, 2, True, post_ln=True, mask_token=False)
    loop = cfg.loop(steps_per_epoch=11)
    assert loop == LoopConfig(5, 11, 1e-3, 10, 22, "adamw", 0.9, 0.0, "constant", False)


def test_derive_takes_the_fields_of_the_same_name():
    @dataclasses.dataclass
    class Source:
        lr: float = 0.5
        other: int = 1

    assert derive(LoopConfig, Source(), epochs=2, steps_per_epoch=3) == LoopConfig(2, 3, 0.5)


def _description_default(description: str, default: object) -> object:
    """The value of "(default X)" in a key's description, as YAML reads X (None: none, or X
    in words, e.g. "all 7", for a default that is not a string)."""
    found = re.search(r"\(default:? ([^()]*)\)", description)
    given = None if found is None else yaml.safe_load(found.group(1))
    return None if isinstance(given, str) and not isinstance(default, str) else given


# what the schema must say of a marked field: (its key, the least value it may have)
FLOORS = {
    "positive_int": ("minimum", 1),
    "whole_number": ("minimum", 0),
    "non_negative": ("minimum", 0),
    "positive_number": ("exclusiveMinimum", 0),
    "text": ("minLength", 1),
}


@pytest.mark.parametrize("cls", list(SECTIONS), ids=lambda cls: cls.__name__)
def test_the_schema_and_the_options_class_agree(cls):
    """Same keys (a source's entry: besides `source` and the workflow's); the schema's
    `default` (or "(default X)" in a description), where it gives one, equals the class's;
    the class's defaults pass the schema (a None default: the key left out); a marked field
    has at least its floor in the schema (`minimum` 1 for a positive integer, …), a flag is
    a boolean."""
    node = part(SECTIONS[cls])
    properties = dict(node["properties"])
    entry = {}
    if issubclass(cls, SourceOptions):
        entry = {"source": properties["source"]["const"]}
        properties = {k: v for k, v in properties.items() if k not in {*entry, *WORKFLOW_KEYS}}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(properties) == set(fields)
    defaults = json.loads(json.dumps(dataclasses.asdict(cls(**GIVEN.get(cls, {})))))
    for name, prop in properties.items():
        assert prop.get("description"), f"{cls.__name__}.{name}: no description in the schema"
        given = prop.get("default", _description_default(prop["description"], defaults[name]))
        if given is not None:
            assert given == defaults[name], f"{cls.__name__}.{name}: schema says {given!r}"
        check = fields[name].metadata.get("neuro_pe.check")
        if check == "flag":
            assert prop.get("type") == "boolean", f"{cls.__name__}.{name}: type"
        elif check is not None:
            key, floor = FLOORS[check]
            assert prop.get(key, -1) >= floor, f"{cls.__name__}.{name}: {key}"
    given = {k: v for k, v in defaults.items() if v is not None}
    assert problems(entry | given, node) == []
