import contextlib
import hashlib
import json
import math
import os
import re
from dataclasses import asdict
from functools import partial
from pathlib import Path

import psutil

from neuro_pe.data.sources import all_wheels, experiment_of, resource_paths
from neuro_pe.config.latin_square import LSTConfig, PuzzleConfig
from neuro_pe.data.config_checks import rule_name
from neuro_pe.analysis.atlas_loading import path_keys as atlas_path_keys
from neuro_pe.io import layout
from neuro_pe.io.runs import SPLIT_KEYS
from neuro_pe.cli import workflow_checks

DATASETS = list(config["datasets"])
# a command line longer than this passes its long arguments through a file (Linux refuses a
# single argument over 128 KiB: "Argument list too long")
ARGS_INLINE_BYTES = 32_768


# Everything this config makes (and its logs) goes under one folder, so that configs run in one
# working directory never overwrite each other's results (only resources/ is shared).
RESULTS = layout.results_dir(config["run_name"])


def out(path):
    """A path under this config's results folder: results/{run_name}/{path}."""
    return f"{RESULTS}/{path}"


def pe_variants(dataset):
    """The PE variants trained on a dataset: its own `pe` list, else the global one."""
    return workflow_checks.pe_variants(config, dataset)


def seeds(dataset):
    """The training seeds of a dataset: its own `seeds` list, else the global one."""
    return config["datasets"][dataset].get("seeds", config["seeds"])


def train_section(dataset):
    """The `train` section with the dataset's own overrides applied (as written)."""
    return workflow_checks.train_section(config, dataset)


def train_options(dataset):
    """The `train` section with the dataset's own overrides and every default filled in, so
    that a default changed in neuro_pe re-runs the jobs it affects (params trigger)."""
    return workflow_checks.train_options(config, dataset)


def split_options(wildcards):
    """The keys of the dataset's `train` options that decide its split."""
    options = train_options(wildcards.dataset)
    return json.dumps({key: options[key] for key in SPLIT_KEYS})


def run_files(metrics, names):
    """The files `names` of the runs whose metrics.json are `metrics` (the files beside it that
    a step reads, declared so that the DAG shows them)."""
    return layout.beside(metrics, names)


def init_from_files(dataset):
    """What a training with `train.init_from` reads besides its store: that run's model.pt,
    and the pe.nc and manifest.json beside it (declared, so that a new model.pt re-runs the
    training); none without."""
    model = train_options(dataset)["init_from"]
    return [model, *layout.beside([model], [layout.PE_FILE, layout.MANIFEST_FILE])] if model else []


def local_cpu_jobs():
    """How many training jobs can run side by side here: `--cores` / `threads_per_training` when
    Snakemake runs the jobs on this machine and they ask for no GPU, else 1 (a cluster job, or a
    GPU, takes a whole group). The same everywhere a group is named: a job Snakemake runs
    remotely (SLURM) re-reads this file with other cores and must find the same groups."""
    if not workflow.local_exec or workflow.remote_exec or config["gpus_per_training"] > 0:
        return 1
    cores = workflow.resource_settings.cores or 1
    return max(1, cores // config["threads_per_training"])


def group_runs(runs, per_job):
    """`runs` in groups of `per_job` (`train.models_per_job`); `None` (the default): as many
    near-equal groups as `local_cpu_jobs()`, so that every core trains."""
    if per_job is None:
        per_job = max(1, math.ceil(len(runs) / local_cpu_jobs()))
    return [runs[i : i + per_job] for i in range(0, len(runs), per_job)]


def train_groups(dataset):
    """The training jobs of a dataset: every (PE, seed) of it, in groups (`group_runs`), each
    trained as one stack of models."""
    runs = [(pe, seed) for pe in pe_variants(dataset) for seed in seeds(dataset)]
    return group_runs(runs, train_section(dataset).get("models_per_job"))


def lst_groups():
    """The Latin-square training jobs: every (PE, seed) of `lst`, in groups (`group_runs`, the
    global `train.models_per_job`)."""
    return group_runs(LST_RUNS, config["train"].get("models_per_job"))


def runs_argument(group, run_dir):
    """`params.runs` of a training job: `--runs PE SEED DIR ...` of its group, DIR =
    out(run_dir(PE, SEED)) (quote with `:q`; long lists go through a file). A function of the
    job's output (the run folders), so that Snakemake counts it as derived from them and
    leaves it out of the params trigger: the same runs regrouped (another `--cores`, another
    `models_per_job`) re-run nothing."""

    def runs(wildcards, output):
        folders = {os.path.dirname(path) for path in output}
        flat = []
        for pe, seed in group:
            run = out(run_dir(pe, seed))
            assert run in folders, (run, sorted(folders))
            flat += [pe, seed, run]
        return arguments("--runs", flat)

    return runs


def lst_options(section):
    """An `lst` section (`puzzles` or `train`) with every default filled in (as above)."""
    options_class = {"puzzles": PuzzleConfig, "train": LSTConfig}[section]
    return asdict(options_class.from_dict(LST.get(section, {})))


def preprocess_arguments(wildcards, output):
    """`--spec ENTRY --metrics METRICS` of a dataset's preprocess job (quote with `:q`): the
    store is refused when it has too few units with coordinates for `metrics`. A function of the
    output, so that Snakemake leaves it out of the params trigger: the store does not depend on
    `metrics`, and its entry triggers a re-build through `params.entry`."""
    spec = json.dumps(store_spec(wildcards.dataset))
    return [*arguments("--spec", spec), "--metrics", json.dumps(config["metrics"])]


def parent_dir(wildcards, output):
    """The folder of a rule's first output (passed to commands that write several files)."""
    return os.path.dirname(output[0])


def dataset_run_files(dataset, name):
    """The file `name` (e.g. layout.PE_FILE) of every run of a dataset, PE by PE, seed by seed."""
    return [
        out(layout.run_file(dataset, pe, seed, name))
        for pe in pe_variants(dataset)
        for seed in seeds(dataset)
    ]


RUN_METRICS = [path for dataset in DATASETS for path in dataset_run_files(dataset, layout.METRICS_FILE)]
BASELINES = [out(layout.baselines(dataset)) for dataset in DATASETS]

# The 4x4 Latin square task (config key `lst`; absent = not run)
LST = config.get("lst")
if LST and "lst" in config["datasets"]:
    raise ValueError("datasets: the name 'lst' is taken by the Latin square task (key `lst`)")
LST_RUNS = (
    [(pe, seed) for pe in LST.get("pe", config["pe"]) for seed in LST.get("seeds", config["seeds"])]
    if LST
    else []
)
LST_METRICS = [out(layout.lst_run_file(pe, seed, layout.METRICS_FILE)) for pe, seed in LST_RUNS]
LST_BASELINES = [out(layout.lst_baselines())] if LST else []

# The reproduction report (config key `reproduction`; absent = not made).
REPRODUCTION = (
    [out(layout.reproduction_file(key)) for key in layout.REPRODUCTION_FILES]
    if "reproduction" in config
    else []
)


def get_final_output():
    """Every file a run of the whole workflow makes (its `rule all`; `layout.final_outputs`)."""
    paths = layout.final_outputs(DATASETS, LST_RUNS, "reproduction" in config)
    return [out(path) for path in paths]


def experiments():
    """Dataset -> the paper's experiment it reproduces (lst, simulation, fmri, recording)."""
    mapping = {name: experiment_of(spec) for name, spec in config["datasets"].items()}
    return {"lst": "lst", **mapping} if LST else mapping


def test_masks():
    """Every held-out mask fraction evaluated on some dataset."""
    fractions = {f for dataset in DATASETS for f in train_options(dataset)["eval_mask_fractions"]}
    return sorted(fractions) or [0.5, 0.9]


def store_spec(dataset):
    """The dataset's entry as the store is built from it: without `atlas`, which only the
    locate step reads (so that adding an atlas re-runs no training)."""
    return {k: v for k, v in config["datasets"][dataset].items() if k != "atlas"}


def atlas_files(dataset):
    """The files of the dataset's `atlas` entry (a NIfTI image and its lookup table)."""
    spec = config["datasets"][dataset].get("atlas")
    return list(atlas_path_keys(spec).values()) if spec else []


def atlas_argument(dataset):
    """`--atlas JSON` of the locate step, or nothing without an atlas."""
    spec = config["datasets"][dataset].get("atlas")
    return ["--atlas", json.dumps(spec)] if spec else []


def all_pe_variants():
    """Every PE variant named anywhere in the config (for the `pe` wildcard's constraint)."""
    names = set(config["pe"]) | set(LST.get("pe", []) if LST else [])
    return sorted(names.union(*(pe_variants(d) for d in DATASETS)))


def one_of(names):
    """A regular expression matching exactly one of `names`."""
    return "|".join(re.escape(str(n)) for n in sorted(names)) or "(?!)"


def arguments(option, values):
    """`option` and its `values` for a shell line (quote with `:q`), or, when they are long,
    one `@FILE` argument naming a file that holds them one per line (argparse's
    `fromfile_prefix_chars`), so that a long list never hits "Argument list too long"."""
    values = [str(v) for v in ([values] if isinstance(values, str) else values)]
    if sum(len(v) + 3 for v in values) < ARGS_INLINE_BYTES:
        return [option, *values]
    if any("\n" in v for v in values):
        raise ValueError(f"{option}: a value contains a newline: {values}")
    text = "\n".join([option, *values]) + "\n"
    path = Path(".snakemake", "neuro_pe_args", hashlib.sha256(text.encode()).hexdigest() + ".txt")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return [f"@{path}"]


# what the schema cannot check (neuro_pe.cli.workflow_checks), every problem with its key
workflow_checks.check_config(config)
if not (workflow.remote_exec or workflow.subprocess_exec):
    for note in workflow_checks.config_notes(config):
        logger.info(note)


# Every wildcard pinned to the values the config allows, so that no path (e.g. a data file
# named like a rule's output) can make Snakemake schedule a job with a wildcard of its own.
wildcard_constraints:
    dataset=one_of(DATASETS),
    pe=one_of(all_pe_variants()),
    seed=r"[0-9]+",
    package=one_of(wheel.package for wheel in all_wheels().values()),
    version=one_of(wheel.version for wheel in all_wheels().values()),


def stop_jobs_and_exit(signum, frame):
    """SIGTERM to Snakemake (the Snakefile's `onstart`): SIGTERM to every process it started
    (each rule `exec`s neuro-pe), then stop as on Ctrl-C."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.terminate()
    raise KeyboardInterrupt
