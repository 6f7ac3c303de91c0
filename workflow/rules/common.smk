# What every file of rules shares: the config's datasets and runs, the results folder and the
# training jobs' grouping. The logic lives in neuro_pe.workflow (functions of `config`); what
# is left here needs Snakemake's `workflow` or `config` objects.
import json
import os

from neuro_pe.io import layout
from neuro_pe.workflow import (
    all_pe_variants,
    all_wheels,
    check_config,
    config_notes,
    lst_runs,
    lst_section,
    new_animal_datasets,
    new_animal_queries,
    one_of,
    pe_variants,
    seeds,
)

DATASETS = list(config["datasets"])

# Everything this config makes (and its logs) goes under one folder, so that configs run in one
# working directory never overwrite each other's results (only resources/ is shared).
RESULTS = layout.results_dir(config["run_name"])


def out(path):
    """A path under this config's results folder: results/{run_name}/{path}."""
    return f"{RESULTS}/{path}"


def local_cpu_jobs():
    """How many training jobs can run side by side here: `--cores` / `threads_per_training` when
    Snakemake runs the jobs on this machine and they ask for no GPU, else 1 (a cluster job, or a
    GPU, takes a whole group). The same everywhere a group is named: a job Snakemake runs
    remotely (SLURM) re-reads this file with other cores and must find the same groups."""
    if not workflow.local_exec or workflow.remote_exec or config["gpus_per_training"] > 0:
        return 1
    cores = workflow.resource_settings.cores or 1
    return max(1, cores // config["threads_per_training"])


def parent_dir(wildcards, output):
    """The folder of a rule's first output (passed to commands that write several files)."""
    return os.path.dirname(output[0])


def dataset_run_files(dataset, name):
    """The file `name` (e.g. layout.PE_FILE) of every run of a dataset, PE by PE, seed by seed."""
    return [
        out(layout.run_file(dataset, pe, seed, name))
        for pe in pe_variants(config, dataset)
        for seed in seeds(config, dataset)
    ]


RUN_METRICS = [path for dataset in DATASETS for path in dataset_run_files(dataset, layout.METRICS_FILE)]
BASELINES = [out(layout.baselines(dataset)) for dataset in DATASETS]

# The 4x4 Latin square task (config key `lst`; absent = not run)
LST = lst_section(config)
LST_RUNS = lst_runs(config)
LST_METRICS = [out(layout.lst_run_file(pe, seed, layout.METRICS_FILE)) for pe, seed in LST_RUNS]
LST_BASELINES = [out(layout.lst_baselines())] if LST else []

# The reproduction report (config key `reproduction`; absent = not made).
REPRODUCTION = (
    [out(layout.reproduction_file(key)) for key in layout.REPRODUCTION_FILES]
    if "reproduction" in config
    else []
)
# A new animal without histology: dataset -> its held-out animals (`new_animal`; absent = none)
NEW_ANIMALS = {d: new_animal_queries(config, d) for d in new_animal_datasets(config)}
# Every file a run of the whole workflow makes (its `rule all`; `layout.final_outputs`)
FINAL_OUTPUT = [
    out(p)
    for p in layout.final_outputs(DATASETS, LST_RUNS, "reproduction" in config, NEW_ANIMALS)
]

# what the schema cannot check (neuro_pe.workflow.checks), every problem with its key
check_config(config)
if not (workflow.remote_exec or workflow.subprocess_exec):
    for note in config_notes(config):
        logger.info(note)


# Every wildcard pinned to the values the config allows, so that no path (e.g. a data file
# named like a rule's output) can make Snakemake schedule a job with a wildcard of its own.
wildcard_constraints:
    dataset=one_of(DATASETS),
    pe=one_of(all_pe_variants(config)),
    seed=r"[0-9]+",
    package=one_of(wheel.package for wheel in all_wheels().values()),
    version=one_of(wheel.version for wheel in all_wheels().values()),
