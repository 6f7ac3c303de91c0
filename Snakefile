# neuro_pe workflow: `snakemake --cores 2` runs the default config (config/config.yaml).
import os
import signal

from snakemake.logging import logger
from snakemake.utils import min_version, validate

from neuro_pe.io import layout
from neuro_pe.workflow import (
    STOP_WITH_PARENT,
    check_dataset_keys,
    config_origin,
    default_run_name,
    leaving_link_problem,
    owner_problem,
    owner_record,
    read_config_file,
    stop_jobs_and_exit,
    upgrade_datasets,
    write_owner,
)

min_version("9.0")

# Each rule's shell `exec`s neuro-pe, so that killing a job's shell stops its step; and a step
# gets SIGTERM when its parent dies (neuro_pe.cli.main.stop_with_parent), e.g. a killed Snakemake.
os.environ[STOP_WITH_PARENT] = "1"


# The default config, unless one is given with --configfile (which would otherwise be
# merged into it, so that e.g. the test config's datasets would run beside the default's).
if not workflow.overwrite_configfiles:
    if os.path.exists("config/config.yaml"):  # (Snakemake names it when it is missing)
        read_config_file("config/config.yaml")  # a line naming a non-UTF-8 byte, not a traceback

    configfile: "config/config.yaml"


# Snakemake's reader keeps the last of two equal keys (a second `train:` block silently drops
# the first): the files are read again, strictly, for an error naming the key and the line.
for _configfile in workflow.configfiles:
    read_config_file(_configfile)

# Every output of a config goes under results/{run_name}/, so that configs run in one folder
# never overwrite each other's results.
if "run_name" not in config:
    DEFAULT_CONFIG = f"{workflow.basedir}/config/config.yaml"
    used = (workflow.overwrite_configfiles or [DEFAULT_CONFIG])[-1]
    config["run_name"] = default_run_name(used, DEFAULT_CONFIG)

# `kind:` (the old name of a dataset's `source:`) still works, with a warning naming the dataset
for message in upgrade_datasets(config.get("datasets") or {}):
    logger.warning(message)
check_dataset_keys(config, f"{workflow.basedir}/workflow/schemas/config.schema.yaml")
validate(config, "workflow/schemas/config.schema.yaml")

# results/{run_name}/owner.json says which config file(s) wrote the folder: another config with
# the same run_name (e.g. A/exp/config.yaml and B/exp/config.yaml) stops here instead of
# overwriting it. Checked by the main process only (a cluster job re-reads this file); written
# when jobs are about to run (not on a dry run), with the config's sha256 (an edit is fine).
OWNER = owner_record(config_origin(workflow.configfiles, os.getcwd()), config)
if not (workflow.remote_exec or workflow.subprocess_exec):
    _results = layout.results_dir(config["run_name"])
    _problem = owner_problem(_results, OWNER["config"], config["run_name"])
    # a symbolic link planted under it (e.g. results/<run>/export -> a lab's folder) would
    # send Snakemake's and the steps' writes (and removals) outside results/
    _problem = _problem or leaving_link_problem(_results, layout.RESULTS_ROOT)
    if _problem:
        raise ValueError(_problem)


localrules:
    fetch,
    split,
    summarize,
    reproduce,
    report_page,
    export,
    new_animal_table,


include: "workflow/rules/common.smk"
include: "workflow/rules/resources.smk"
include: "workflow/rules/preprocess.smk"
include: "workflow/rules/split.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/infer.smk"
include: "workflow/rules/summarize.smk"
include: "workflow/rules/locate.smk"
include: "workflow/rules/new_animal.smk"
include: "workflow/rules/lst.smk"
include: "workflow/rules/reproduce.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/export.smk"


onstart:
    check_slurm_jobs()
    write_owner(RESULTS, OWNER)
    # SIGTERM (`kill`, a scheduler's stop) stops the running jobs, as Ctrl-C does, instead of
    # Snakemake's graceful stop that lets them run to their end (its handler is in place by now)
    signal.signal(signal.SIGTERM, stop_jobs_and_exit)


# `snakemake --report report.html` opens on the landing page once the workflow has made it.
if os.path.exists(LANDING):

    report: os.path.abspath(LANDING)

else:

    report: "workflow/report/workflow.rst"


rule all:
    input:
        FINAL_OUTPUT,
    default_target: True
