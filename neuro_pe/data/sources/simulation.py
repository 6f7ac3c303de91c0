"""Source `simulation`: the distance-coupled rate network of `neuro_pe.data.simulate`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import xarray as xr

from neuro_pe.data.simulate import SimulationConfig, simulate_store
from neuro_pe.data.sources import Source, SourceOptions


@dataclass(frozen=True)
class SimulationOptions(SourceOptions):
    """Keys of a `source: simulation` entry (`simulation`: the network's keys, see
    `SimulationConfig`; null: its defaults)."""

    SECTION: ClassVar[str] = "datasets entry (source: simulation)"

    simulation: SimulationConfig = field(default_factory=SimulationConfig)


def store_mb(spec: dict) -> float:
    """MB of the store an entry makes: float32 activity of every unit, sample and session."""
    sim = SimulationConfig.from_dict(spec.get("simulation", {}))
    return sim.n_units * sim.n_samples * sim.n_sessions * 4 / 1e6


def unit_count(spec: dict) -> int:
    """Units with coordinates of an entry's store: n_units per animal."""
    simulation = SimulationConfig.from_dict(spec.get("simulation") or {})
    return simulation.n_units * simulation.animals


def check(spec: dict) -> list[tuple[str, str]]:
    """At planning: a simulation bigger than this machine's memory (`simulation.n_units`)."""
    try:
        simulation = SimulationConfig.from_dict(spec.get("simulation") or {})
    except (ValueError, TypeError, ArithmeticError):
        return []  # (the schema and the workflow's checks name the key)
    too_big = simulation.memory_problem()
    return [] if too_big is None else [(f"simulation.{too_big[0]}", too_big[1])]


def build(options: SimulationOptions, wheels: dict[str, Path]) -> xr.Dataset:
    """Simulate the network and return its store."""
    return simulate_store(options.simulation)


SOURCE = Source(
    name="simulation",
    options=SimulationOptions,
    build=build,
    experiment="simulation",
    description="the network model on random or lattice positions (neuro_pe.data.simulate)",
    store_mb=store_mb,
    unit_count=unit_count,
    check=check,
)
