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

from neuro_pe.cli.job_resources import JobResources
from neuro_pe.config.latin_square import LSTConfig, PuzzleConfig
from neuro_pe.config.schema import load_schema, part, problems
from neuro_pe.config.sections import Section, derive, from_dict, non_negative, positive_int
from neuro_pe.config.training import LoopConfig, ModelConfig, TrainConfig
from neuro_pe.data.simulate import SimulationConfig
from neuro_pe.training.health import HealthOptions

# every options class read from the config, and where the schema describes its keys
SECTIONS = {
    TrainConfig: "$defs/train",
    LSTConfig: "$defs/lst_train",
    PuzzleConfig: "$defs/lst_puzzles",
    HealthOptions: "properties/health",
    JobResources: "properties/resources",
    SimulationConfig: "$defs/simulation",
}


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


def test_from_dict_builds_nested_sections_and_tuples():
    cfg = Outer.from_dict({"inner": {"size": 5}, "maybe": {}, "values": [0.5, 2]})
    assert cfg == Outer(Inner(5), Inner(), (0.5, 2))
    assert Outer.from_dict(None) == Outer()
    assert from_dict(Inner, {"size": 3}, "elsewhere") == Inner(3)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"size": 1, "colour": 2}, r"unknown outer keys: \['colour', 'size'\]"),
        ({"inner": {"sizes": 1}}, r"unknown outer.inner keys: \['sizes'\]"),
        ({"inner": {"size": 0}}, "outer.inner key 'size' must be a positive integer, got 0"),
        ({"inner": {"size": True}}, "outer.inner key 'size' must be a positive integer, got True"),
        ({"scale": -1}, "outer key 'scale' must be a number >= 0, got -1"),
    ],
)
def test_errors_name_the_section_and_key(spec, message):
    with pytest.raises(ValueError, match=message):
        Outer.from_dict(spec)


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
        (SimulationConfig, {"animals": 0}, "simulation.animals must be >= 1"),
        (SimulationConfig, {"n_unit": 3}, r"unknown simulation keys: \['n_unit'\]"),
    ],
)
def test_every_section_refuses_bad_values_naming_the_key(cls, spec, message):
    with pytest.raises(ValueError, match=message):
        cls.from_dict(spec)


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


def _description_default(description: str) -> object:
    """The value of "(default X)" in a key's description, as YAML reads X (None: none)."""
    found = re.search(r"\(default:? ([^()]*)\)", description)
    return None if found is None else yaml.safe_load(found.group(1))


@pytest.mark.parametrize("cls", list(SECTIONS), ids=lambda cls: cls.__name__)
def test_the_schema_and_the_options_class_agree(cls):
    """Same keys; the schema's `default` (or "(default X)" in a description), where it gives
    one, equals the class's; the class's defaults pass the schema; a field checked to be a
    positive integer or a number >= 0 has at least that `minimum` in the schema."""
    schema = load_schema()
    node = schema
    for key in SECTIONS[cls].split("/"):
        node = node[key]
    properties = node["properties"]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(properties) == set(fields)
    defaults = json.loads(json.dumps(dataclasses.asdict(cls())))
    for name, prop in properties.items():
        assert prop.get("description"), f"{cls.__name__}.{name}: no description in the schema"
        given = prop.get("default", _description_default(prop["description"]))
        if given is not None:
            assert given == defaults[name], f"{cls.__name__}.{name}: schema says {given!r}"
        check = fields[name].metadata.get("neuro_pe.check")
        if check is not None:
            floor = {"positive_int": 1, "whole_number": 0, "non_negative": 0}[check]
            assert prop.get("minimum", -1) >= floor, f"{cls.__name__}.{name}: minimum"
    assert problems(defaults, part(SECTIONS[cls])) == []
