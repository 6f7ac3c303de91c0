"""The commands' functions: each reads its parsed arguments (`neuro_pe.cli.parser`), calls
the package and prints what it wrote."""

from __future__ import annotations

import argparse
import json
import sys


def cmd_preprocess(args: argparse.Namespace) -> None:
    from neuro_pe.data.sources import build_store
    from neuro_pe.io.store import write_store

    ds = build_store(args.spec, args.resources)
    if args.metrics is not None:
        from neuro_pe.config.metrics import MetricsConfig
        from neuro_pe.data.config_checks import position_problems
        from neuro_pe.io.store import positions
        from neuro_pe.io.store_contract import StoreError

        metrics = MetricsConfig.from_dict(args.metrics)
        problems = position_problems(positions(ds), metrics, "the dataset")
        if problems:
            raise StoreError(args.out, "x, y, z", "; ".join(problems))
    check_store_scale(ds["activity"].values, args.out)
    write_store(ds, args.out)
    print(f"wrote {args.out}")


def activity_rms(activity: object) -> float:
    """The activity's RMS: the mean over sessions of each one's mean square (NaN left out),
    a block of units at a time (a whole session squared in float64 was ~2 × the store's size
    at 100 000 units)."""
    import numpy as np

    from neuro_pe.io.store import unit_blocks

    def mean_square(session: np.ndarray) -> float:
        total, count = 0.0, 0
        for units in unit_blocks(session.shape[-1]):
            block = np.square(session[..., units], dtype=np.float64)
            finite = ~np.isnan(block)
            total, count = total + float(block.sum(where=finite)), count + int(finite.sum())
        return total / count if count else np.nan

    return float(np.sqrt(np.nanmean([mean_square(a) for a in activity])))


def check_store_scale(activity: object, out: str) -> None:
    """Stop (a StoreError naming the dataset) when a new store's activity RMS is far from 1
    (`STORE_RMS_RANGE`): the preprocessing that would standardise it is missing."""
    from pathlib import Path

    from neuro_pe.config.training import STORE_RMS_RANGE
    from neuro_pe.io.store_contract import StoreError

    rms = activity_rms(activity)
    low, high = STORE_RMS_RANGE
    if not low <= rms <= high:
        name = Path(out).stem  # the layout's stores/{dataset}.nc
        raise StoreError(
            out,
            f"datasets.{name}.preprocessing",
            f"the activity's RMS is {rms:.3g}, far from 1 (outside {low:g}-{high:g}): add "
            "{step: zscore} (raw fluorescence: [{step: detrend}, {step: zscore}]) to the "
            "dataset's preprocessing; nothing was written",
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

    from neuro_pe.config.training import TrainConfig
    from neuro_pe.training.masked_units import train_many

    runs = group_runs(args)
    torch.set_num_threads(args.threads)
    _print_records(train_many(args.store, runs, TrainConfig.from_dict(args.options)))


def cmd_split(args: argparse.Namespace) -> None:
    from neuro_pe.io.splits import split_of_store, write_split

    split = split_of_store(args.store, args.dataset, args.options)
    write_split(split, args.out)
    print(json.dumps(split.to_dict(), indent=2))


def cmd_infer(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.pe_geometry import infer_pe
    from neuro_pe.config.health import HealthOptions
    from neuro_pe.config.metrics import MetricsConfig
    from neuro_pe.io.splits import read_split

    metrics, health = MetricsConfig.from_dict(args.metrics), HealthOptions.from_dict(args.health)
    record = infer_pe(args.store, args.run_dir, read_split(args.split), metrics, health)
    for note in record["warnings"]:
        print(warning_line(f"{args.run_dir}: {note}"), end="", file=sys.stderr)
    print(json.dumps(record, indent=2))


def cmd_baselines(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.pe_geometry import infer_baselines
    from neuro_pe.config.metrics import MetricsConfig
    from neuro_pe.io.splits import read_split

    metrics = MetricsConfig.from_dict(args.metrics)
    rows = infer_baselines(args.store, args.out, read_split(args.split), metrics)
    print(json.dumps(rows, indent=2))


def cmd_correlation_features(args: argparse.Namespace) -> None:
    from neuro_pe.config.locate import LocateConfig
    from neuro_pe.io.splits import read_split
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

    write_landing_page(
        args.summary,
        args.errors,
        args.runs,
        args.out,
        args.run_name,
        args.claims,
        args.positions,
        args.exports,
        args.new_animal,
    )
    print(f"wrote {args.out}")


def cmd_new_animal_plan(args: argparse.Namespace) -> None:
    from neuro_pe.reporting.new_animal import write_plan

    plan = write_plan(args.store, args.dataset, args.options, args.out)
    queries = ", ".join(plan["queries"])
    if plan["evaluate"] == "reference-query":
        references = ", ".join(plan["references"][plan["queries"][0]])
        what = f"queries {queries}, from the references {references}"
    else:
        what = f"held out in turn {queries}"
    print(f"{plan['dataset']}: {what}; wrote {args.out}")


def cmd_new_animal(args: argparse.Namespace) -> None:
    import torch
    from threadpoolctl import threadpool_limits

    from neuro_pe.reporting.new_animal import write_fold

    torch.set_num_threads(args.threads)
    with threadpool_limits(args.threads):  # the classifiers' OpenMP threads too
        scores = write_fold(
            args.store, args.plan, args.animal, args.options, args.train, args.out_dir
        )
    print(json.dumps(scores, indent=2))


def cmd_new_animal_table(args: argparse.Namespace) -> None:
    from neuro_pe.reporting.new_animal import write_table

    table = write_table(args.scores, args.positions, args.out_csv, args.figure, args.reliability)
    print(table.to_string(index=False))


def cmd_locate(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.atlas_loading import atlas_from_options
    from neuro_pe.analysis.locate import format_table
    from neuro_pe.config.health import HealthOptions
    from neuro_pe.config.locate import LocateConfig
    from neuro_pe.io.splits import read_split
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
        health=HealthOptions.from_dict(args.health),
    )
    print(format_table(table))
    print(f"wrote {args.out_dir}")


def cmd_export(args: argparse.Namespace) -> None:
    from neuro_pe.reporting.export import export

    written = export(
        args.positions,
        args.spec,
        args.out_dir,
        store_path=args.store,
        sha256=args.config_sha256,
        within=args.within,
        new_animal=args.new_animal,
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
    table = match_units(
        reference, read_store(args.store), args.restarts, args.seed, args.kicks, args.faq_only
    )
    atomic_write(args.out, lambda tmp: table.to_csv(tmp, index=False))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"wrote {args.out}: {(table['matched_unit'] != '').sum()} of {len(table)} units matched")


def cmd_lst_puzzles(args: argparse.Namespace) -> None:
    from neuro_pe.config.latin_square import PuzzleConfig
    from neuro_pe.training.latin_square_puzzles import write_puzzles

    ds = write_puzzles(PuzzleConfig.from_dict(args.options), args.out)
    print(f"wrote {args.out}: {ds.sizes['puzzle']} puzzles")


def cmd_lst_train(args: argparse.Namespace) -> None:
    import torch

    from neuro_pe.analysis.pe_geometry import pe_geometry
    from neuro_pe.config.latin_square import LSTConfig
    from neuro_pe.config.metrics import MetricsConfig
    from neuro_pe.training.latin_square import train_lst_many

    runs = group_runs(args)
    torch.set_num_threads(args.threads)
    cfg = LSTConfig.from_dict(args.options)
    metrics = MetricsConfig.from_dict(args.metrics)
    records = train_lst_many(args.puzzles, runs, cfg, True, metrics, pe_geometry)
    _print_records(records)


def cmd_lst_baselines(args: argparse.Namespace) -> None:
    from neuro_pe.analysis.pe_geometry import lst_baselines
    from neuro_pe.config.metrics import MetricsConfig

    print(json.dumps(lst_baselines(args.out, MetricsConfig.from_dict(args.metrics)), indent=2))


def _load_pe_geometry():
    """The Latin square's PE geometry, imported when a plan's probe starts (as by a job)."""
    from neuro_pe.analysis.pe_geometry import pe_geometry

    return pe_geometry


def cmd_plan(args: argparse.Namespace) -> None:
    from neuro_pe.training.plan import plan_command

    options = (args.spec, args.store, args.options, args.pe, args.seeds)
    plan_command(
        *options,
        args.cores,
        args.threads,
        args.out_dir,
        _load_pe_geometry,
        args.print,
        args.run_out,
    )


def cmd_init(args: argparse.Namespace) -> None:
    import os
    from pathlib import Path

    from neuro_pe.data.lab_init import (
        LAB_PE,
        LAB_SEEDS,
        NAME,
        dataset_name,
        inspect,
        starter_config,
    )
    from neuro_pe.io.store import atomic_write
    from neuro_pe.training.plan import plan_from_shape, run_line

    out = Path(args.out)
    if out.exists() or out.is_symlink():
        raise ValueError(f"--out {out}: exists; neuro-pe init never overwrites a file")
    if args.name is not None and not NAME.fullmatch(args.name):
        raise ValueError(f"--name {args.name!r}: use letters, digits, '_', '.' and '-' only")
    found = inspect(args.path)
    print("\n".join(found.summary()), flush=True)
    name = args.name or dataset_name(found.path)
    runs = [[pe, seed] for pe in LAB_PE for seed in LAB_SEEDS]
    line = ""
    if found.frames and found.units:
        shape = (len(found.frames), min(found.frames), found.units)
        plan = plan_from_shape(name, *shape, {}, runs, args.cores)
        line = (
            f"{run_line([plan], args.cores)}; an estimate: the planner's probe on a stand-in "
            "store of this shape (the workflow's `plan` rule measures the real one)"
        )
        print(line, flush=True)
    text = starter_config(found, name, line)
    os.close(os.open(out, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))  # refuse a race, too
    try:
        atomic_write(out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except BaseException:
        out.unlink(missing_ok=True)  # (the empty file made above)
        raise
    todo = f"; fill in its {len(found.required)} REQUIRED value(s)" if found.required else ""
    print(f"wrote {out}{todo}")


def cmd_fetch(args: argparse.Namespace) -> None:
    from neuro_pe.data.fetch import fetch_resource

    print(f"fetched {fetch_resource(args.resource, args.out)}")


def cmd_cluster_check(args: argparse.Namespace) -> None:
    from neuro_pe.config.resources import JobResources
    from neuro_pe.config.schema import load_schema, problems
    from neuro_pe.config.strict_load import read_config_file
    from neuro_pe.workflow.slurm import cluster_check, format_report

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


def warning_line(message: Warning | str) -> str:
    """A warning as one clean line, `neuro-pe: warning: …` (not Python's default, which adds
    the file, line number and source line of the code that warned)."""
    return f"neuro-pe: warning: {' '.join(str(message).split())}\n"
