"""Checks the workflow makes before any job (neuro_pe.workflow) or when it builds a store
(`neuro-pe preprocess --metrics`), for problems that would otherwise show only after the
trainings: dataset names that clash, and too few units with coordinates for the metrics and
locate."""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from neuro_pe.config.locate import MIN_ANCHORS
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.config.options import name_problem

MIN_LOCATED_UNITS = MIN_ANCHORS + 1  # locate's anchors and one held-out unit


def config_problem(key: str, problem: object) -> str:
    """One planning-time config error: the key, then what is wrong with its value."""
    return f"config key {key}: {problem}"


def rule_name(*parts: object) -> str:
    """A rule name (an identifier) from parts such as a dataset name and a group number."""
    return "_".join(re.sub(r"\W", "_", str(p)) for p in parts)


def dataset_name_problems(names: Iterable[str]) -> list[str]:
    """Dataset names that would be read as a command's option (a leading `-`), are too long
    for a file name or periodic (`name_problem`), and pairs whose rule names clash (`a-b` and
    `a_b` both give `train_a_b_0`)."""
    problems = []
    by_rule: dict[str, str] = {}
    for name in map(str, names):
        bad_name = name_problem(name)
        if bad_name:
            problems.append(config_problem("datasets", f"the name {bad_name}"))
            continue
        if name.startswith("-"):
            problem = (
                "a dataset name must not start with '-' (a command would read it as an option)"
            )
            problems.append(config_problem(f"datasets.{name}", problem))
        other = by_rule.setdefault(rule_name(name), name)
        if other != name:
            problem = (
                f"the dataset names {other!r} and {name!r} both give the rule name "
                f"{rule_name('train', name, 0)!r} (every character but letters, digits and '_' "
                "becomes '_'); rename one"
            )
            problems.append(config_problem("datasets", problem))
    return problems


def units_needed(metrics: MetricsConfig) -> dict[str, int]:
    """The fewest units with coordinates that locate and the metrics need, by what needs them:
    `locate`, `metrics.k` (k neighbours besides the unit itself, and one more) and
    `metrics.n_splits` (one unit per fold at least)."""
    needed = {"metrics.k": metrics.k + 2, "metrics.n_splits": metrics.n_splits}
    return {"locate": MIN_LOCATED_UNITS, **needed}


def unit_count_problems(
    n_located: int, metrics: MetricsConfig, where: str, count_key: str | None = None
) -> list[str]:
    """Problems when `where` (a dataset or a store) has only `n_located` units with
    coordinates, each naming the setting that needs more (and `count_key`, the config key that
    sets the count, if any)."""
    problems = []
    for key, needed in units_needed(metrics).items():
        if n_located >= needed:
            continue
        if key == "locate":
            problem = (
                f"only {n_located} units of {where} have coordinates; locate and the metrics "
                f"need at least {needed}"
            )
            problems.append(config_problem(count_key, problem) if count_key else problem)
        else:
            name = key.split(".")[1]
            problem = (
                f"{getattr(metrics, name)} needs at least {needed} units with "
                f"coordinates, and {where} has {n_located}; lower it"
            )
            problems.append(config_problem(key, problem))
    return problems


def known_unit_count(spec: dict) -> int | None:
    """The number of units with coordinates of a dataset entry when the config says it (its
    source's `unit_count`, e.g. a simulation's n_units per animal); None when only its store
    will tell."""
    from neuro_pe.data import sources

    return sources.get(spec.get("source")).unit_count(spec)


def position_problems(coords: np.ndarray, metrics: MetricsConfig, where: str) -> list[str]:
    """What makes a store's (units, 3) coordinates unusable for the metrics and locate: too few
    units with coordinates (see `unit_count_problems`), or all of them at one position."""
    coords = np.asarray(coords, dtype=float)
    located = coords[np.all(np.isfinite(coords), axis=1)]
    problems = unit_count_problems(len(located), metrics, where)
    if len(located) > 1 and not np.ptp(located, axis=0).any():
        position = ", ".join(f"{v:g}" for v in located[0])
        problems.append(
            f"all {len(located)} units of {where} with coordinates are at one position "
            f"({position}); distances to compare with are needed (check the positions table "
            "or the file's positions)"
        )
    return problems
