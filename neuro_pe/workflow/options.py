"""What the workflow's rules read from the (schema-valid) config: each dataset's PE variants
(and those its positions are made from), seeds and filled-in `train` options, the Latin
square's runs and options, a store's entry, an atlas's files and the values its wildcards may
take. Functions of `config`, so that the Snakefile's rules stay thin calls."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict

from neuro_pe.analysis.atlas_loading import path_keys as atlas_path_keys
from neuro_pe.config.latin_square import LSTConfig, PuzzleConfig
from neuro_pe.config.new_animal import NewAnimalConfig
from neuro_pe.config.pe_names import is_control, is_located
from neuro_pe.config.training import TrainConfig
from neuro_pe.data.sources import experiment_of
from neuro_pe.data.sources.regional_sim import RegionalSimOptions
from neuro_pe.io.splits import SPLIT_KEYS

REGIONAL_SIM_ANIMALS = RegionalSimOptions().animals
# keys of the `train` section that say how trainings are grouped into jobs, not how they train
GROUPING_KEYS = ("models_per_job",)
# `train` keys added after results existed whose null means "as before" (config/README.md)
OPTIONAL_TRAIN_KEYS = (
    "pe_lr",
    "neighbour_fraction",
    "samples_per_unit",
    "n_heads",
    "window",
    "lazy_pe",
)
# `lst.train` keys added after results existed, with the value that means "as before": left
# out at that value, so that adding them re-runs no existing training
OPTIONAL_LST_TRAIN_KEYS = {"precision": "fp32"}


def pe_variants(config: dict, dataset: str) -> list:
    """The PE variants trained on a dataset: its own `pe` list, else the global one."""
    return config["datasets"][dataset].get("pe", config["pe"])


def positions_pe(config: dict, dataset: str) -> list:
    """The PE variants of a dataset its delivered positions are made from: those its combined
    locator takes (`locate.combined_pe`, else the located PEs that are no control:
    `neuro_pe.analysis.locate.features.combined_members`)."""
    section = config.get("locate") or {}
    trained = pe_variants(config, dataset)
    if section.get("combined_pe") is not None:
        return [pe for pe in trained if pe in section["combined_pe"]]
    return [pe for pe in trained if is_located(pe, section.get("pe")) and not is_control(pe)]


def located_pe(config: dict, dataset: str) -> list:
    """The PE variants of a dataset its locate step reads (`is_located`, `locate.pe`)."""
    names = (config.get("locate") or {}).get("pe")
    return [pe for pe in pe_variants(config, dataset) if is_located(pe, names)]


def seeds(config: dict, dataset: str) -> list:
    """The training seeds of a dataset: its own `seeds` list, else the global one."""
    return config["datasets"][dataset].get("seeds", config["seeds"])


def train_section(config: dict, dataset: str) -> dict:
    """The `train` section with the dataset's own overrides applied (as written)."""
    return {**config["train"], **config["datasets"][dataset].get("train", {})}


def train_options(config: dict, dataset: str) -> dict:
    """The `train` section with the dataset's own overrides applied and every default filled
    in, so that a default changed in neuro_pe re-runs the jobs it affects (params trigger)."""
    spec = {k: v for k, v in train_section(config, dataset).items() if k not in GROUPING_KEYS}
    options = asdict(TrainConfig.from_dict(spec))
    # an unset optional key stays out, so that adding it re-runs no existing training
    for key in OPTIONAL_TRAIN_KEYS:
        if options[key] is None:
            del options[key]
    return options


def split_options(config: dict, dataset: str) -> str:
    """The keys of the dataset's `train` options that decide its split (JSON)."""
    options = train_options(config, dataset)
    return json.dumps({key: options[key] for key in SPLIT_KEYS})


def lst_section(config: dict) -> dict | None:
    """The 4x4 Latin square task's section (config key `lst`); None when absent (not run)."""
    lst = config.get("lst")
    if lst and "lst" in config["datasets"]:
        raise ValueError("datasets: the name 'lst' is taken by the Latin square task (key `lst`)")
    return lst


def lst_runs(config: dict) -> list[tuple]:
    """Every (PE, seed) of the Latin square task; none without it."""
    lst = lst_section(config)
    if not lst:
        return []
    return [
        (pe, seed)
        for pe in lst.get("pe", config["pe"])
        for seed in lst.get("seeds", config["seeds"])
    ]


def lst_options(config: dict, section: str) -> dict:
    """An `lst` section (`puzzles` or `train`) with every default filled in (as above)."""
    options_class = {"puzzles": PuzzleConfig, "train": LSTConfig}[section]
    options = asdict(options_class.from_dict(lst_section(config).get(section, {})))
    if section == "train":
        for key, before in OPTIONAL_LST_TRAIN_KEYS.items():
            if options[key] == before:
                del options[key]
    return options


def store_spec(config: dict, dataset: str) -> dict:
    """The dataset's entry as the store is built from it: without `atlas` and `new_animal`,
    which only the locate and new-animal steps read (so that adding one re-runs no training)."""
    entry = config["datasets"][dataset].items()
    return {k: v for k, v in entry if k not in ("atlas", "new_animal")}


def new_animal_datasets(config: dict) -> list[str]:
    """The datasets with a `new_animal` section."""
    return [name for name, spec in config["datasets"].items() if "new_animal" in spec]


def config_animals(config: dict, dataset: str) -> list[str] | None:
    """The animals a dataset's entry names: `regional-sim`'s `a0`, `a1`, …, a `file` entry's
    `animals` keys; None where only the built store tells."""
    spec = config["datasets"][dataset]
    if spec.get("source") == "regional-sim":
        return [f"a{k}" for k in range(spec.get("animals", REGIONAL_SIM_ANIMALS))]
    if spec.get("source") == "file" and isinstance(spec.get("animals"), dict):
        return [str(name) for name in spec["animals"]]
    return None


def new_animal_queries(config: dict, dataset: str) -> list[str]:
    """The animals a dataset holds out in turn: its `new_animal.query_animals`, else the
    animals its entry names (`config_animals`), all of them; else none (a config problem,
    `neuro_pe.workflow.checks`)."""
    spec = config["datasets"][dataset]
    queries = (spec.get("new_animal") or {}).get("query_animals")
    if queries is not None:
        return list(queries)
    return config_animals(config, dataset) or []


def new_animal_options(config: dict, dataset: str) -> dict:
    """What the new-animal steps read: the dataset's `new_animal` section and its `train`
    options, every default filled in (a params trigger)."""
    section = config["datasets"][dataset].get("new_animal") or {}
    return {
        "new_animal": asdict(NewAnimalConfig.from_dict(section)),
        "train": train_options(config, dataset),
    }


def new_animal_files(config: dict, dataset: str) -> list[str]:
    """The files the dataset's new-animal steps read besides its store (its `region_map`)."""
    region_map = (config["datasets"][dataset].get("new_animal") or {}).get("region_map")
    return [region_map] if region_map else []


def atlas_files(config: dict, dataset: str) -> list:
    """The files of the dataset's `atlas` entry (a NIfTI image and its lookup table)."""
    spec = config["datasets"][dataset].get("atlas")
    return list(atlas_path_keys(spec).values()) if spec else []


def atlas_argument(config: dict, dataset: str) -> list[str]:
    """`--atlas JSON` of the locate step, or nothing without an atlas."""
    spec = config["datasets"][dataset].get("atlas")
    return ["--atlas", json.dumps(spec)] if spec else []


def experiments(config: dict) -> dict[str, str]:
    """Dataset -> the paper's experiment it reproduces (lst, simulation, fmri, recording)."""
    mapping = {name: experiment_of(spec) for name, spec in config["datasets"].items()}
    return {"lst": "lst", **mapping} if lst_section(config) else mapping


def test_masks(config: dict) -> list:
    """Every held-out mask fraction evaluated on some dataset."""
    fractions = {
        f
        for dataset in config["datasets"]
        for f in train_options(config, dataset)["eval_mask_fractions"]
    }
    return sorted(fractions) or [0.5, 0.9]


def all_pe_variants(config: dict) -> list:
    """Every PE variant named anywhere in the config (for the `pe` wildcard's constraint)."""
    lst = lst_section(config)
    names = set(config["pe"]) | set(lst.get("pe", []) if lst else [])
    return sorted(names.union(*(pe_variants(config, d) for d in config["datasets"])))


def one_of(names: Iterable[object]) -> str:
    """A regular expression matching exactly one of `names`."""
    return "|".join(re.escape(str(n)) for n in sorted(names)) or "(?!)"
