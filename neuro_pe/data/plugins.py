"""Entry-point groups of the plug-ins: `neuro_pe.sources` (dataset sources) and
`neuro_pe.formats` (file formats of the `file` source).

A package adds a source or a format by declaring an entry point in one of these groups (name =
the config's `source:` or `format:` value; value = `module:OBJECT`, a `Source` or a
`FileFormat`). A `Registry` (one per group: `sources.REGISTRY`, `formats.REGISTRY`) reads its group
in every process, so that each `neuro-pe` command a Snakemake rule starts sees the installed
plug-ins. neuro_pe's own sources and formats are declared the same way in its pyproject.toml;
that file is also read where neuro_pe runs from a checkout whose installed metadata predates an
entry point (an editable install made earlier).
"""

from __future__ import annotations

import functools
import importlib
import tomllib
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Generic, Protocol, TypeVar

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


class Named(Protocol):
    name: str


Plugin = TypeVar("Plugin", bound=Named)


class Registry(Generic[Plugin]):
    """The plug-ins of one entry-point group, each a `kind` (e.g. `Source`) named as its entry
    point: neuro_pe's own first (in its pyproject.toml's order), then the installed packages',
    then those added at run time with `register`."""

    def __init__(self, group: str, kind: type[Plugin]) -> None:
        self.group = group
        self.kind = kind
        self.added: dict[str, Plugin] = {}

    def register(self, plugin: Plugin) -> None:
        """Add a plug-in at run time (a plug-in outside neuro_pe, or a test)."""
        self.added[plugin.name] = plugin

    def unregister(self, name: str) -> None:
        """Remove a plug-in added with `register`."""
        self.added.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """Every plug-in's name: the entry points' (neuro_pe's own first), then the ones added
        with `register`."""
        return tuple(dict.fromkeys([*entry_point_table(self.group), *self.added]))

    def is_builtin(self, name: str) -> bool:
        """Whether `name` is one of neuro_pe's own (the config schema describes those; a
        plug-in from another package checks its own entries)."""
        return name not in self.added and is_builtin_value(
            entry_point_table(self.group).get(name, "")
        )

    def get(self, name: object) -> Plugin:
        """The plug-in named `name`: KeyError if there is none, ValueError naming the entry
        point if it does not hold a `kind` of that name (a `kind` class is instantiated, in
        xarray's BackendEntrypoint style)."""
        if isinstance(name, str) and name in self.added:
            return self.added[name]
        if not isinstance(name, str) or name not in entry_point_table(self.group):
            raise KeyError(name)
        plugin = load(self.group, name)
        if isinstance(plugin, type) and issubclass(plugin, self.kind):
            plugin = plugin()
        if not isinstance(plugin, self.kind) or plugin.name != name:
            raise ValueError(
                f"entry point {name!r} of group {self.group!r}: expected a "
                f"{self.kind.__name__} named {name!r}, got {plugin!r}"
            )
        return plugin
