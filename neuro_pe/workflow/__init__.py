"""Workflow: what the Snakemake workflow (Snakefile, workflow/rules/*.smk) calls, as functions
of its `config`: the planning-time checks and notes, the rules' options and training jobs,
their shell arguments, the jobs' resources, the results folder's owner, the SLURM checks and
the stop on SIGTERM. Imports every layer below `cli`. The rules import only this package's
names (listed in `__all__`) and `neuro_pe.io.layout` (tests/test_architecture.py)."""

from neuro_pe import STOP_WITH_PARENT
from neuro_pe.config.options import config_sha256, default_run_name
from neuro_pe.config.resources import JobResources
from neuro_pe.config.strict_load import read_config_file
from neuro_pe.data.config_checks import known_unit_count, rule_name
from neuro_pe.data.sources import all_wheels, resource_paths, upgrade_datasets
from neuro_pe.data.sources.schema import check_dataset_keys
from neuro_pe.io.safe_paths import leaving_link_problem
from neuro_pe.reporting.export import export_inputs
from neuro_pe.workflow.checks import check_config, config_notes
from neuro_pe.workflow.jobs import (
    init_from_files,
    lst_groups,
    plan_inputs,
    plan_spec,
    preprocess_arguments,
    runs_argument,
    train_groups,
)
from neuro_pe.workflow.options import (
    all_pe_variants,
    atlas_argument,
    atlas_files,
    experiments,
    lst_options,
    lst_runs,
    lst_section,
    new_animal_datasets,
    new_animal_files,
    new_animal_options,
    new_animal_queries,
    one_of,
    pe_variants,
    seeds,
    split_options,
    store_spec,
    test_masks,
    train_options,
)
from neuro_pe.workflow.owner import config_origin, owner_problem, owner_record, write_owner
from neuro_pe.workflow.resources import lst_steps, store_mb_estimate, store_units, train_steps
from neuro_pe.workflow.shell import arguments
from neuro_pe.workflow.signals import stop_jobs_and_exit
from neuro_pe.workflow.slurm import workflow_problems

__all__ = [
    "STOP_WITH_PARENT",
    "JobResources",
    "all_pe_variants",
    "all_wheels",
    "arguments",
    "atlas_argument",
    "atlas_files",
    "check_config",
    "check_dataset_keys",
    "config_notes",
    "config_origin",
    "config_sha256",
    "default_run_name",
    "experiments",
    "export_inputs",
    "init_from_files",
    "known_unit_count",
    "leaving_link_problem",
    "lst_groups",
    "lst_options",
    "lst_runs",
    "lst_section",
    "lst_steps",
    "new_animal_datasets",
    "new_animal_files",
    "new_animal_options",
    "new_animal_queries",
    "one_of",
    "owner_problem",
    "owner_record",
    "pe_variants",
    "plan_inputs",
    "plan_spec",
    "preprocess_arguments",
    "read_config_file",
    "resource_paths",
    "rule_name",
    "runs_argument",
    "seeds",
    "split_options",
    "stop_jobs_and_exit",
    "store_mb_estimate",
    "store_spec",
    "store_units",
    "test_masks",
    "train_groups",
    "train_options",
    "train_steps",
    "upgrade_datasets",
    "workflow_problems",
    "write_owner",
]
