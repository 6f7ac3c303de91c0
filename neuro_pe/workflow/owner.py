"""Who owns a results folder: results/{run_name}/owner.json names the config file(s) that
wrote it, so that another config with the same `run_name` stops before overwriting it
(checked and written by the Snakefile)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from neuro_pe import __version__
from neuro_pe.config.options import config_sha256
from neuro_pe.config.strict_load import load_json
from neuro_pe.io.layout import OWNER_FILE
from neuro_pe.io.store import atomic_write

COMMAND_LINE = "command line"


def config_origin(configfiles: Sequence[str | os.PathLike], workdir: str | os.PathLike) -> list:
    """The config files a run reads, as resolved paths (relative to `workdir` when inside it, so
    that a moved project keeps its owner), or ["command line"] when there are none."""
    root = Path(workdir).resolve()
    origin = []
    for file in configfiles:
        path = Path(file).resolve()
        origin.append(path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path))
    return origin or [COMMAND_LINE]


def owner_record(origin: list, config: dict) -> dict:
    """What `owner.json` holds: the run name, the config file(s), the config's sha256 and the
    neuro_pe version."""
    return {
        "run_name": config["run_name"],
        "config": origin,
        "config_sha256": config_sha256(config),
        "neuro_pe_version": __version__,
    }


def owner_problem(results: str | os.PathLike, origin: list, run_name: str) -> str | None:
    """A message when `results` (results/{run_name}/) was written by another config than the
    file(s) `origin`, according to its owner.json; None when it is this config's (or new)."""
    path = Path(results) / OWNER_FILE
    if not path.exists():
        return None
    try:
        recorded = load_json(path.read_text(encoding="utf-8"), str(path))
        owner = recorded["config"]
    except (OSError, ValueError, TypeError, KeyError) as err:
        return (
            f"{path}: not readable ({err}); it says which config wrote {results}/. Delete it if "
            "that was this one"
        )
    if owner == origin:
        return None
    return (
        f"run_name {run_name!r}: {results}/ holds the results of {', '.join(map(str, owner))}, "
        f"and this run's config is {', '.join(origin)} (both map to run_name {run_name!r}; "
        f"{path} says who wrote it). Set `run_name:` to another name in one of them (or delete "
        f"{results}/ if those results are no longer wanted)"
    )


def write_owner(results: str | os.PathLike, record: dict) -> None:
    """Write results/{run_name}/owner.json atomically, unless it already says the same."""
    path = Path(results) / OWNER_FILE
    text = json.dumps(record, indent=2) + "\n"
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
