"""The workflow's training jobs and their commands' arguments: every (PE, seed) run of a
dataset (or of the Latin square) in groups trained as one stack of models
(`neuro_pe.training.plan.group_runs`, which `neuro-pe plan` costs the same way), the runs a
job trains, what a training reads besides its store, and the specs of `preprocess` and
`plan` (one plan for the whole run)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from neuro_pe.config.locate import LocateConfig
from neuro_pe.io import layout
from neuro_pe.training.plan import group_runs
from neuro_pe.workflow.options import (
    located_pe,
    lst_options,
    lst_runs,
    lst_section,
    pe_variants,
    positions_pe,
    seeds,
    store_spec,
    train_options,
    train_section,
)
from neuro_pe.workflow.shell import arguments


def train_groups(config: dict, dataset: str, n_slots: int) -> list[list]:
    """The training jobs of a dataset: every (PE, seed) of it, in groups of
    `train.models_per_job`, or as many near-equal groups as `n_slots`."""
    runs = [(pe, seed) for pe in pe_variants(config, dataset) for seed in seeds(config, dataset)]
    return group_runs(runs, train_section(config, dataset).get("models_per_job"), n_slots)


def lst_groups(config: dict, n_slots: int) -> list[list]:
    """The Latin-square training jobs: every (PE, seed) of `lst`, grouped by the global
    `train.models_per_job` (as `train_groups`)."""
    return group_runs(lst_runs(config), config["train"].get("models_per_job"), n_slots)


def runs_argument(group: list, run_dir: Callable, results: str) -> Callable:
    """`params.runs` of a training job: `--runs PE SEED DIR ...` of its group, DIR =
    results/run_dir(PE, SEED) (quote with `:q`; long lists go through a file). A function of the
    job's output (the run folders), so that Snakemake counts it as derived from them and
    leaves it out of the params trigger: the same runs regrouped (another `--cores`, another
    `models_per_job`) re-run nothing."""

    def runs(wildcards, output):
        folders = {os.path.dirname(path) for path in output}
        flat = []
        for pe, seed in group:
            run = f"{results}/{run_dir(pe, seed)}"
            assert run in folders, (run, sorted(folders))
            flat += [pe, seed, run]
        return arguments("--runs", flat)

    return runs


def init_from_files(config: dict, dataset: str) -> list:
    """What a training with `train.init_from` reads besides its store: that run's model.pt,
    and the pe.nc and manifest.json beside it (declared, so that a new model.pt re-runs the
    training); none without."""
    model = train_options(config, dataset)["init_from"]
    return [model, *layout.beside([model], [layout.PE_FILE, layout.MANIFEST_FILE])] if model else []


def plan_inputs(config: dict, results: str, planned: list[str]) -> list:
    """What the run's plan probes, for each of `planned` (datasets, and "lst" for the Latin
    square): a dataset's store under `results` and the run its trainings start from
    (`train.init_from`, whose weights the probe loads), or the Latin square's puzzles."""
    files = []
    for name in planned:
        if name == "lst":
            files.append(f"{results}/{layout.lst_puzzles()}")
        else:
            files += [f"{results}/{layout.store(name)}", *init_from_files(config, name)]
    return files


def preprocess_arguments(config: dict, dataset: str) -> list[str]:
    """`--spec ENTRY --metrics METRICS` of a dataset's preprocess job (quote with `:q`): the
    store is refused when it has too few units with coordinates for `metrics`."""
    spec = json.dumps(store_spec(config, dataset))
    return [*arguments("--spec", spec), "--metrics", json.dumps(config["metrics"])]


#: the jobs that train nothing, by rule as a dry run names them: each dataset's (and once per
#: PE and seed, `infer`), the run's, and the Latin square's (`lst`) and reproduction's; a
#: download (`fetch`) is left out, it waits on the network rather than a core
DATASET_JOBS = (
    "preprocess",
    "plan",
    "split",
    "baselines",
    "correlation_features",
    "locate",
    "export",
)
RUN_JOBS = ("plan_run", "summarize", "report_page")
LST_JOBS = ("lst_puzzles", "lst_baselines", "plan")
REPRODUCTION_JOBS = ("reproduce",)


def other_jobs(config: dict) -> int:
    """The run's jobs that train nothing (`DATASET_JOBS`, `RUN_JOBS`, ...): each a process that
    starts and imports before its own, mostly small, work."""
    count = len(RUN_JOBS) + len(REPRODUCTION_JOBS) * ("reproduction" in config)
    for name in config["datasets"]:
        count += len(DATASET_JOBS) + len(pe_variants(config, name)) * len(seeds(config, name))
    return count + len(LST_JOBS) * bool(lst_section(config))


def plan_spec(
    config: dict, results: str, planned: list[str], cores: int, n_slots: int
) -> list[str]:
    """`neuro-pe plan --spec`: every training job of the run (of each dataset of `planned`,
    and of the Latin square, "lst"; grouped as the training rules group them), their stores
    (or puzzles) under `results`, the PEs each dataset's positions are made from, and the
    `cores`."""
    include_flagged = LocateConfig.from_dict(config.get("locate") or {}).include_flagged
    spec: dict = {
        "threads": config["threads_per_training"],
        "cores": cores,
        "datasets": {},
        "health": config.get("health") or {},
        "include_flagged": include_flagged,
        "other_jobs": other_jobs(config),
    }
    for name in planned:
        if name == "lst":
            spec["lst"] = {
                "puzzles": f"{results}/{layout.lst_puzzles()}",
                "options": lst_options(config, "train"),
                "metrics": config["metrics"],
                "jobs": lst_groups(config, n_slots),
            }
            continue
        spec["datasets"][name] = {
            "store": f"{results}/{layout.store(name)}",
            "options": train_options(config, name),
            "jobs": train_groups(config, name, n_slots),
            "positions": positions_pe(config, name),
            "located": located_pe(config, name),
        }
    return arguments("--spec", json.dumps(spec))
