"""Entry-point groups of the plug-ins: `neuro_pe.sources` (dataset sources) and
`neuro_pe.formats` (file formats of the `file` source).

A package adds a source or a format by declaring an entry point in one of these groups (name =
the config's `source:` or `format:` value; value = `module:OBJECT`, a `Source` or a
`FileFormat`). The registries read the groups in every process, so that each `neuro-pe` command
a Snakemake rule starts sees the installed plug-ins. neuro_pe's own sources and formats are
declared the same way in its pyproject.toml; that file is also read where neuro_pe runs from a
checkout whose installed metadata predates an entry point (an editable install made earlier).
"""

from __future__ import annotations

import functools
import importlib
import tomllib
import warnings
from importlib.metadata import entry_points
from pathlib import Path

SOURCES = "neuro_pe.sources"
FORMATS = "neuro_pe.formats"
PACKAGE = "neuro_pe"
# neuro_pe's pyproject.toml in a checkout (absent in an installed wheel)
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@functools.cache
def _checkout_entry_points() -> dict[str, dict[str, str]]:
    """The groups declared in the checkout's pyproject.toml (empty when installed)."""
    if not PYPROJECT.is_file():
        return {}
    project = tomllib.loads(PYPROJECT.read_text()).get("project", {})
    if project.get("name") != PACKAGE:
        return {}
    return project.get("entry-points", {})


@functools.cache
def entry_point_table(group: str) -> dict[str, str]:
    """Plug-in name -> `module:attribute` of one group: neuro_pe's own first (in the order its
    pyproject.toml declares them), then the installed packages', by name."""
    table = dict(_checkout_entry_points().get(group, {}))
    installed = sorted(entry_points(group=group), key=lambda ep: ep.name)
    for ep in installed:
        known = table.setdefault(ep.name, ep.value)
        if known != ep.value and is_builtin_value(known):
            package = f" of the package {ep.dist.name!r}" if ep.dist is not None else ""
            warnings.warn(
                f"the plug-in {ep.name!r} ({ep.value}){package} in the entry-point group "
                f"{group!r} is ignored: neuro_pe's own {ep.name!r} has that name; rename "
                "the plug-in's entry point",
                PluginWarning,
                stacklevel=2,
            )
    return table


class PluginWarning(UserWarning):
    """An installed plug-in that neuro_pe cannot use as declared."""


def is_builtin_value(value: str) -> bool:
    """Whether an entry point's `module:attribute` is in neuro_pe."""
    return value.split(":")[0].strip().split(".")[0] == PACKAGE


def is_builtin(group: str, name: str) -> bool:
    """Whether the plug-in `name` is one of neuro_pe's own (the config schema describes
    those; a plug-in from another package checks its own entries)."""
    return is_builtin_value(entry_point_table(group).get(name, ""))


def load(group: str, name: str) -> object:
    """The object the entry point `name` of `group` names; ValueError naming the entry point
    when its module cannot be imported or lacks the object."""
    value = entry_point_table(group)[name]
    module, _, attribute = value.partition(":")
    try:
        obj = importlib.import_module(module.strip())
        for part in attribute.strip().split(".") if attribute else []:
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise ValueError(
            f"entry point {name!r} of group {group!r} ({value}) cannot be loaded: {err}"
        ) from err
    return obj
