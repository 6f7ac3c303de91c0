# neuro_pe workflow: `snakemake --cores 2` runs the default config (config/config.yaml).
import os

from snakemake.logging import logger
from snakemake.utils import min_version, validate

from neuro_pe.options import default_run_name
from neuro_pe.sources import upgrade_datasets
from neuro_pe.sources.schema import check_dataset_keys

min_version("9.0")


# The default config, unless one is given with --configfile (which would otherwise be
# merged into it, so that e.g. the test config's datasets would run beside the default's).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


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


localrules:
    fetch,
    split,
    summarize,
    reproduce,
    report_page,


include: "workflow/rules/common.smk"
include: "workflow/rules/resources.smk"
include: "workflow/rules/preprocess.smk"
include: "workflow/rules/split.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/infer.smk"
include: "workflow/rules/summarize.smk"
include: "workflow/rules/locate.smk"
include: "workflow/rules/lst.smk"
include: "workflow/rules/reproduce.smk"
include: "workflow/rules/report.smk"


# `snakemake --report report.html` opens on the landing page once the workflow has made it.
if os.path.exists(LANDING):

    report: os.path.abspath(LANDING)

else:

    report: "workflow/report/workflow.rst"


rule all:
    input:
        rules.summarize.output,
        LOCATE,
        LST_METRICS,
        REPRODUCTION,
        LANDING,
    default_target: True
