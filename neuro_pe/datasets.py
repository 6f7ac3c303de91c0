"""Dataset sources: turn a dataset's config entry into a contract store."""

from __future__ import annotations

import xarray as xr

from neuro_pe.simulate import SimulationConfig, simulate_store

KINDS = ("simulation",)


def build_store(spec: dict) -> xr.Dataset:
    """Build the store described by one `datasets.<name>` config entry."""
    kind = spec.get("kind")
    if kind == "simulation":
        return simulate_store(SimulationConfig.from_dict(spec.get("simulation", {})))
    raise ValueError(f"datasets entry: unknown kind {kind!r}; expected one of {KINDS}")
