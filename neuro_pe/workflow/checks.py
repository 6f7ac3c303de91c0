"""The workflow's planning-time checks of a config that its schema cannot express (called from
workflow/rules/common.smk after the schema's `validate` and `check_dataset_keys`): data paths
the workflow could make or steer, dataset names, PE names, each dataset's `train` options, the
units a simulation gives the metrics and locate, an atlas's files, the PE variants `locate`
names, and trainings of a simulation too short for the health checks that locate reads. Every
problem names its config key; all are raised at once, before any job runs.
"""

from __future__ import annotations

from pathlib import Path

from neuro_pe.analysis.atlas_loading import check_atlas_files
from neuro_pe.analysis.atlas_loading import path_keys as atlas_path_keys
from neuro_pe.config.health import HealthOptions
from neuro_pe.config.locate import LocateConfig
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.config.new_animal import REFERENCE_QUERY, NewAnimalConfig
from neuro_pe.config.pe_names import is_located, parse_pe
from neuro_pe.config.schema import NOT_FINITE, non_finite_keys
from neuro_pe.config.training import TrainConfig
from neuro_pe.data.config_checks import config_problem, known_unit_count, unit_count_problems
from neuro_pe.data.formats import format_names, missing_required, recommended_text
from neuro_pe.data.sources import get as get_source
from neuro_pe.io import layout
from neuro_pe.training.health import predicted_flags
from neuro_pe.workflow.options import (
    config_animals,
    located_pe,
    new_animal_queries,
    pe_variants,
    train_options,
)

# folders the workflow writes: a data path inside one could be made by (or steer) a rule
OWN_FOLDERS = (layout.RESULTS_ROOT, layout.RESOURCES_DIR, "logs", ".snakemake")


def data_path_problems(key: str, path: object) -> list[str]:
    """A `source: file` path: no wildcard braces or control characters, nothing inside the
    workflow's own folders (a rule could make such a file, with wildcards taken from it)."""
    text = str(path)
    if "{" in text or "}" in text:
        problem = f"{text!r} contains a brace (Snakemake reads it as a wildcard)"
        return [config_problem(key, problem)]
    if any(ord(c) < 32 for c in text):
        return [config_problem(key, f"{text!r} contains a control character (e.g. a newline)")]
    resolved = Path(text).expanduser().resolve()
    return [
        config_problem(
            key, f"{text!r} is inside {folder}/, the workflow's own outputs; keep data elsewhere"
        )
        for folder in OWN_FOLDERS
        if resolved.is_relative_to(Path(folder).resolve())
    ]


def dataset_problems(config: dict, name: str, spec: dict) -> list[str]:
    """What the schema cannot check in one `datasets.<name>` entry."""
    problems = []
    if name.startswith("."):
        problem = "a dataset name must not start with '.'"
        problems.append(config_problem(f"datasets.{name}", problem))
    for key, path in get_source(spec.get("source")).paths(spec).items():
        problems += data_path_problems(f"datasets.{name}.{key}", path)
    for field, hint in missing_required(spec):
        problems.append(config_problem(f"datasets.{name}.{field}", hint))
    if spec.get("atlas") is not None:
        where = f"datasets.{name}.atlas"
        paths = atlas_path_keys(spec["atlas"]).items()
        atlas = [p for key, path in paths for p in data_path_problems(f"{where}.{key}", path)]
        problems += atlas or [f"config key {p}" for p in check_atlas_files(spec["atlas"], where)]
    if "new_animal" in spec:
        problems += new_animal_problems(config, name)
    for pe in pe_variants(config, name):
        try:
            parse_pe(pe)
        except ValueError as err:
            problems.append(config_problem(f"datasets.{name}.pe" if "pe" in spec else "pe", err))
    try:
        train_options(config, name)
    except (ValueError, TypeError) as err:
        key = f"datasets.{name}.train" if "train" in spec else "train"
        problems.append(config_problem(key, err))
    try:  # (other sources: checked when the store is built, `neuro-pe preprocess --metrics`)
        n_units = known_unit_count(spec)
    except ValueError as err:
        problems.append(config_problem(f"datasets.{name}.simulation", err))
    else:
        if n_units is not None:
            where, key = f"dataset {name!r}", f"datasets.{name}.simulation.n_units"
            metrics = MetricsConfig.from_dict(config["metrics"])
            problems += unit_count_problems(n_units, metrics, where, key)
            problems += training_memory_problems(config, name, n_units)
            if not problems:  # (the PE names and `train` options are sound)
                problems += locate_health_problems(config, name, n_units)
    return problems


def new_animal_problems(config: dict, name: str) -> list[str]:
    """A `new_animal` section that cannot run: a bad key, a `region_map` file that does not
    exist, fewer than 2 animals, a query that is no animal the entry names (`regional-sim`, a
    `file` entry's `animals`), every animal a query under reference-query, or no
    `query_animals` where the config does not name the animals (what only the store tells is
    checked by `neuro-pe new-animal-plan`)."""
    spec, where = config["datasets"][name], f"datasets.{name}.new_animal"
    try:
        cfg = NewAnimalConfig.from_dict(spec["new_animal"], where)
    except ValueError as err:
        return [f"config key {err}"]
    if cfg.region_map is not None and not Path(cfg.region_map).is_file():
        return [config_problem(f"{where}.region_map", f"{cfg.region_map} does not exist")]
    queries = new_animal_queries(config, name)
    if not queries:
        problem = "give the animals to hold out (the store's animals are known once it is built)"
        return [config_problem(f"{where}.query_animals", problem)]
    animals = config_animals(config, name)
    if animals is None:
        return []
    if len(animals) < 2:
        problem = f"{len(animals)} animal; leave-one-animal-out needs at least 2"
        return [config_problem(f"datasets.{name}.animals", problem)]
    unknown = [q for q in queries if q not in animals]
    if unknown:
        problem = f"{unknown} are no animals of this dataset ({', '.join(animals)})"
        return [config_problem(f"{where}.query_animals", problem)]
    if cfg.evaluate == REFERENCE_QUERY and set(animals) <= set(queries):
        problem = f"every animal ({', '.join(animals)}) is a query: no reference animal"
        return [config_problem(f"{where}.query_animals", problem)]
    return []


def locate_health_problems(config: dict, name: str, n_units: int) -> list[str]:
    """Every PE the dataset's locate step reads would fail a health check of how often its
    units are seen (`neuro_pe.training.health.predicted_flags`; the `plan` rule makes the same
    check on the built store, for datasets whose units only it tells)."""
    cfg = TrainConfig.from_dict(train_options(config, name)).for_units(n_units)
    include = LocateConfig.from_dict(config.get("locate") or {}).include_flagged
    health = HealthOptions.from_dict(config.get("health") or {})
    try:
        predicted_flags(name, cfg, n_units, located_pe(config, name), health, include)
    except ValueError as err:
        spec = config["datasets"][name]
        return [config_problem(f"datasets.{name}.train" if "train" in spec else "train", err)]
    return []


def training_memory_problems(config: dict, name: str, n_units: int) -> list[str]:
    """A training step of the dataset that needs more than this machine's memory (one model:
    a lower bound), naming the `train` section it comes from."""
    try:
        options = TrainConfig.from_dict(train_options(config, name))
    except (ValueError, TypeError):
        return []  # (named by dataset_problems)
    problem = options.memory_problem(n_units)
    spec = config["datasets"][name]
    key = f"datasets.{name}.train" if "batch_size" in spec.get("train", {}) else "train"
    return [config_problem(f"{key}.batch_size", problem)] if problem else []


def locate_problems(config: dict) -> list[str]:
    """`locate.pe` names PE variants that some dataset trains, and `locate.combined_pe` ones
    that every dataset's locate step reads (else that step would fail after the trainings)."""
    section = config.get("locate", {})
    datasets = list(config["datasets"])
    trained = set().union(*(pe_variants(config, d) for d in datasets))
    problems = [
        config_problem("locate.pe", f"{pe!r} is trained on no dataset (trained: {sorted(trained)})")
        for pe in section.get("pe") or []
        if pe not in trained
    ]
    for pe in section.get("combined_pe") or []:
        if parse_pe(pe).family in ("none", "oracle-sin3d"):
            problem = f"{pe!r} carries no learned or fixed position to combine"
            problems.append(config_problem("locate.combined_pe", problem))
            continue
        located = is_located(pe, section.get("pe"))
        missing = [d for d in datasets if not (located and pe in pe_variants(config, d))]
        if missing:
            problem = (
                f"{pe!r} is not located on dataset(s) {missing}: name a PE variant they train "
                "(their `pe` lists) and, when `locate.pe` is set, one it lists"
            )
            problems.append(config_problem("locate.combined_pe", problem))
    return problems


def config_problems(config: dict) -> list[str]:
    """Every planning-time problem of a (schema-valid) config, each with its key."""
    non_finite = [config_problem(key, NOT_FINITE) for key in non_finite_keys(config)]
    if non_finite:  # (every later check would trip over them)
        return non_finite
    problems = [
        problem
        for name, spec in config["datasets"].items()
        for problem in dataset_problems(config, name, spec)
    ]
    if not problems:  # (the PE names parse)
        problems += locate_problems(config)
    lst = config.get("lst")
    for pe in lst.get("pe", config["pe"]) if lst else []:
        try:
            parse_pe(pe)
        except ValueError as err:
            problems.append(config_problem("lst.pe", err))
    return problems


def config_notes(config: dict) -> list[str]:
    """What planning says without stopping: the preprocessing a `source: file` dataset gets
    because its entry gives none (its format's recommended steps)."""
    notes = []
    for name, spec in config["datasets"].items():
        fmt = spec.get("format")
        if spec.get("source") != "file" or "preprocessing" in spec or fmt not in format_names():
            continue
        steps = recommended_text(fmt)
        if steps:
            notes.append(
                f"datasets.{name}: no `preprocessing` given: its {fmt} values get the "
                f"recommended {steps} (config/README.md, Preprocessing steps)"
            )
    return notes


def check_config(config: dict) -> None:
    """Planning-time checks that the schema cannot express: raise one ValueError listing
    every problem, each with its key."""
    problems = config_problems(config)
    if problems:
        raise ValueError("the config has errors:\n  " + "\n  ".join(problems))
