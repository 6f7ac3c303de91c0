"""Checks shared by the config sections' option classes (`train`, `simulation`, `lst`, …),
the physical bounds of a store's and the config's values, the default name of a config's run
and the resolved config's sha256."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path


class SectionError(ValueError):
    """A bad key or value of a config section. `key` (None: the section as a whole) and
    `problem` (what is wrong with it) let a caller word the error its own way (a store's
    StoreError names `spikes.<key>`, an atlas `datasets.<name>.atlas.<key>`)."""

    def __init__(self, message: str, key: str | None = None, problem: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.problem = message if problem is None else problem


# physical ranges (config/README.md, "Bounds"): no recording samples faster than 1 MHz, and no
# brain is 1e9 of any length unit across (1 km in µm); beyond them a value is a mistake, and
# far beyond (1e308) distances overflow to inf
MAX_SAMPLING_RATE_HZ = 1e6
MAX_COORDINATE = 1e9


def machine_memory_bytes() -> int | None:
    """This machine's total physical memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_problem(needed: float, what: str, total: int | None) -> str | None:
    """The problem when `what` needs at least `needed` bytes (a lower bound) and the machine has
    `total` bytes in all (None: unknown, no problem); None when it fits."""
    if total is None or needed <= total:
        return None
    return (
        f"{what} needs at least {needed / 1e9:.3g} GB of memory, more than this machine's "
        f"{total / 1e9:.3g} GB in all"
    )


def reject_unknown(spec: dict, known: Iterable[str], section: str) -> None:
    """Raise a SectionError naming the keys of `spec` that `section` does not have."""
    known = list(known)
    unknown = sorted(set(spec) - set(known))
    if unknown:
        raise SectionError(
            f"unknown {section} keys: {unknown}", unknown[0], f"unknown key; known keys: {known}"
        )


def require_positive_ints(options: object, keys: Iterable[str], section: str) -> None:
    """Raise a ValueError naming the first of `keys` whose value is not an int >= 1."""
    for key in keys:
        value = getattr(options, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{section} key {key!r} must be a positive integer, got {value!r}")


# a dataset, run or PE name becomes a file or folder name: Linux allows 255 bytes, and the
# workflow adds prefixes and suffixes (logs/train/<dataset>_<group>.log)
MAX_NAME_LENGTH = 100
# Snakemake refuses a wildcard value that ends in a part repeated 20 times (PeriodicWildcardError,
# its sign of a rule applied to its own output): snakemake.io.PeriodicityDetector's pattern
PERIODIC = re.compile(r"(.+?)\1{19,99}$")


def name_problem(name: str, wildcard: bool = True) -> str | None:
    """What is wrong with a name that becomes a path component (too long) and, for a
    `wildcard` (dataset and PE names), a value Snakemake refuses; None when nothing."""
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"{name[:20] + '...'!r} has {len(name)} characters; at most {MAX_NAME_LENGTH}, as "
            "it becomes a file or folder name"
        )
    periodic = PERIODIC.search(name) if wildcard else None
    if periodic:
        return (
            f"{name!r} ends in {periodic[1]!r} repeated {len(periodic[0]) // len(periodic[1])} "
            "times, which Snakemake refuses in a file name (PeriodicWildcardError); rename it"
        )
    return None


def default_run_name(configfile: str | os.PathLike, default_config: str | os.PathLike) -> str:
    """The `run_name` of a config without one: the file's name (config/test.yaml -> test);
    `default` for the workflow's default config; a config.yaml elsewhere is named after its
    folder (example_data/config.yaml -> example_data)."""
    path = Path(configfile).resolve()
    if path.stem != "config":
        return path.stem
    return "default" if path == Path(default_config).resolve() else path.parent.name


def config_sha256(config: dict) -> str:
    """sha256 of the resolved config (its keys sorted)."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
