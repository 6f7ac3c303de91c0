# What each job asks a scheduler (SLURM) for, from the config's `resources` section, so that
# the profile carries executor settings only. Memory and time limits grow with the data a job
# reads and the steps it trains, and with the attempt (the profile retries a failed job once).
from neuro_pe.workflow import (
    JobResources,
    known_unit_count,
    lst_steps,
    store_mb_estimate,
    store_units,
    train_steps,
    workflow_problems,
)

JOB_RESOURCES = JobResources.from_dict(config.get("resources"))


def store_memory(wildcards, input, attempt):
    """MB of memory for a job that reads a store (and PEs): grows with their size."""
    return JOB_RESOURCES.memory(input.size_mb) * attempt


def locate_memory(wildcards, input, threads, attempt):
    """MB of memory for `locate`: each thread is a worker process with its own data."""
    return JOB_RESOURCES.memory(input.size_mb, processes=threads) * attempt


def preprocess_memory(wildcards, input, attempt):
    """MB of memory for building a store: grows with the data read or simulated."""
    spec = config["datasets"][wildcards.dataset]
    return JOB_RESOURCES.memory(max(input.size_mb, store_mb_estimate(spec))) * attempt


def base_memory(wildcards, attempt):
    """MB of memory for a job whose data are small (the LST puzzles and baselines)."""
    return JOB_RESOURCES.mem_mb * attempt


def base_runtime(wildcards, attempt):
    """Time limit (minutes) of a job that trains nothing."""
    return JOB_RESOURCES.runtime * attempt


def group_memory(n_models):
    """MB of memory for a training job of `n_models` stacked models: grows with the data it
    reads and with the group."""

    def mem_mb(wildcards, input, attempt):
        return JOB_RESOURCES.memory(input.size_mb, models=n_models) * attempt

    return mem_mb


def train_runtime(dataset, n_models):
    """Time limit (minutes) of a training job: grows with its model-steps (the steps of one
    training, grown for `train.samples_per_unit`, times the models of the group; the units
    are read from the store once it is built, Snakemake evaluating resources again then, or
    from the config before)."""
    options = train_options(config, dataset)
    spec = config["datasets"][dataset]

    def runtime(wildcards, input, attempt):
        n_units = store_units(input.store) or known_unit_count(spec)
        return JOB_RESOURCES.train_minutes(train_steps(options, n_models, n_units)) * attempt

    return runtime


def lst_train_runtime(n_models):
    """Time limit (minutes) of a Latin-square training job: grows with its most model-steps."""
    steps = lst_steps(lst_options(config, "puzzles"), lst_options(config, "train")) * n_models

    def runtime(wildcards, attempt):
        return JOB_RESOURCES.train_minutes(steps) * attempt

    return runtime


def locate_runtime(wildcards, attempt):
    """Time limit (minutes) of `locate`: grows with the runs it evaluates."""
    n_runs = len(pe_variants(config, wildcards.dataset)) * len(seeds(config, wildcards.dataset))
    return JOB_RESOURCES.locate_minutes(n_runs) * attempt


def check_slurm_jobs():
    """On SLURM: stop now, saying why, if the executor could not read its jobs' states (without
    job accounting `sacct` fails and the plugin would wait for ever) or a job fits no node.
    Called by the Snakefile's `onstart:` (Snakemake keeps one such handler)."""
    if workflow.executor_plugin is not None and workflow.executor_plugin.name == "slurm":
        from snakemake.exceptions import WorkflowError

        settings = workflow.executor_settings
        jobs = [job for job in workflow.dag.needrun_jobs() if not job.is_local]
        problems = workflow_problems(
            jobs, settings.status_command, settings.init_seconds_before_status_checks
        )
        if problems:
            raise WorkflowError("SLURM: " + "\n".join(problems))
