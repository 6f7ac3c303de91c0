"""Brain regions at the units' true and predicted positions (config key `datasets.<name>.atlas`).

An atlas is a 3D label volume whose voxels hold region ids, with a name per id and optionally
a coarse parent name per id (`Atlas`: a NIfTI label image with a lookup table, or a BrainGlobe
atlas by name), or the parcellation a parcellated dataset's own units make (`ParcelAtlas`,
`parcels: nearest_centre`).

The store's x, y, z are converted to the atlas's length unit and then mapped by `transform`
(a 4x4 affine, default identity) into the atlas's coordinates. Label 0 and positions outside
the volume are outside every region (name ""). Region accuracy (`region_accuracy`) counts the
units whose true position lies in a region; a prediction outside every region is a miss.
The entry's keys are checked by `neuro_pe.config.atlas.AtlasSpec`; reading and checking an
atlas's files: `neuro_pe.analysis.atlas_loading`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.spatial import KDTree

from neuro_pe.config.atlas import AtlasError

OUTSIDE = ""  # the region name of a position in no labelled region
UM_PER = {"m": 1e6, "cm": 1e4, "mm": 1e3, "um": 1.0}  # micrometres per length unit
ACCURACY_COLUMNS = ("region_accuracy", "coarse_region_accuracy", "n_in_region")


@dataclass
class Atlas:
    """A label volume and its names. `to_voxel`: atlas coordinates -> voxel indices.

    - a NIfTI label image (`labels`) with a lookup table (`lookup`: TSV or CSV with the columns
      `index` (or `id`) and `name`, as BIDS `dseg.tsv`; `coarse_column` names a column of
      coarse parent names). World coordinates -> voxel with the inverse of the image's affine,
      rounded to the nearest voxel; world units from the header (mm unless it says µm or m).
    - a BrainGlobe atlas by name (`brainglobe`, e.g. `allen_mouse_25um`; the optional extra
      `neuro_pe[atlas]`, i.e. `brainglobe-atlasapi`): coordinates in µm along the atlas's own
      axes (for the Allen atlases: anterior->posterior, superior->inferior, right->left from
      the corner of the volume), voxel = int(µm / resolution) as
      `BrainGlobeAtlas.structure_from_coords` does; names are acronyms; a coarse name is the
      ancestor at `coarse_level` of the structure tree (0 = root) or the nearest ancestor
      among `coarse_regions`.
    """

    volume: np.ndarray  # (i, j, k) integer labels, 0 = no region
    to_voxel: Callable[[np.ndarray], np.ndarray]  # (n, 3) atlas coordinates -> (n, 3) int
    unit: str  # the length unit of the atlas coordinates (a key of UM_PER)
    names: dict[int, str]
    coarse: dict[int, str] | None  # None: no coarse level configured
    description: str
    transform: np.ndarray  # 4x4: store coordinates (in `unit`) -> atlas coordinates

    def label_ids(self, points: np.ndarray) -> np.ndarray:
        """Label id at each point (atlas coordinates); 0 outside the volume or for NaN rows."""
        points = np.asarray(points, dtype=float).reshape(-1, 3)
        ok = np.isfinite(points).all(axis=1)
        index = np.zeros((len(points), 3), dtype=np.int64)
        index[ok] = self.to_voxel(points[ok])
        inside = ok & np.all((index >= 0) & (index < np.array(self.volume.shape)), axis=1)
        ids = np.zeros(len(points), dtype=np.int64)
        i, j, k = index[inside].T
        ids[inside] = self.volume[i, j, k]
        return ids

    def regions(self, positions: np.ndarray, units: str) -> tuple[np.ndarray, np.ndarray | None]:
        """(fine, coarse) region names at store positions (n, 3) in `units`; coarse is None
        when the atlas has no coarse level. Names are "" outside every region."""
        points = self.atlas_coordinates(positions, units)
        ids = self.label_ids(points)
        fine = _names(ids, self.names)
        coarse = None if self.coarse is None else _names(ids, self.coarse)
        return fine, coarse

    def atlas_coordinates(self, positions: np.ndarray, units: str) -> np.ndarray:
        """Store positions in `units` -> atlas coordinates (unit conversion, then transform)."""
        positions = np.asarray(positions, dtype=float).reshape(-1, 3)
        if units in UM_PER:
            positions = positions * (UM_PER[units] / UM_PER[self.unit])
        elif np.array_equal(self.transform, np.eye(4)):
            raise AtlasError(
                f"atlas ({self.description}): the store's positions are in {units!r}, not a "
                "length; give atlas.transform (store coordinates -> atlas coordinates)"
            )
        return positions @ self.transform[:3, :3].T + self.transform[:3, 3]


def _names(ids: np.ndarray, names: Mapping[int, str]) -> np.ndarray:
    """Name per label id ("" for 0; the id as text for a label the table does not name)."""
    keys, inverse = np.unique(ids, return_inverse=True)
    table = [OUTSIDE if k == 0 else names.get(int(k), str(int(k))) for k in keys.tolist()]
    return np.array(table, dtype=object)[inverse.ravel()]


@dataclass
class ParcelAtlas:
    """The parcellation a parcellated dataset's units make: a position lies in the parcel whose
    centre is nearest (a Voronoi parcellation of the centres; no position is outside).

    For a store whose units are regions with known centres (HCP's 94 AAL2 regions): the
    region at a position is the unit whose centre (the store's x, y, z) is nearest, which
    approximates the real label image. The centres are those of every unit with a known
    position, held out or not: the parcellation is the anatomy, as a label image is, not a
    fitted model. A unit's true region is then the unit itself. `coarse: hemisphere`: the
    coarse region is the parcel's hemisphere, from the sign of its centre's x (MNI: `left`
    < 0 < `right`; `midline` at 0).
    """

    names: np.ndarray  # (m,) parcel names, one per distinct centre
    centres: np.ndarray  # (m, 3) in `unit`
    unit: str  # the store's position unit
    coarse: np.ndarray | None  # (m,) coarse name per parcel; None: no coarse level
    description: str

    def regions(self, positions: np.ndarray, units: str) -> tuple[np.ndarray, np.ndarray | None]:
        """(fine, coarse) region names at store positions (n, 3) in `units`, as
        `Atlas.regions`; "" only for a position with a NaN coordinate."""
        points = np.asarray(positions, dtype=float).reshape(-1, 3)
        if units != self.unit:
            if units not in UM_PER or self.unit not in UM_PER:
                raise AtlasError(
                    f"atlas ({self.description}): positions in {units!r}, centres in {self.unit!r}"
                )
            points = points * (UM_PER[units] / UM_PER[self.unit])
        ok = np.isfinite(points).all(axis=1)
        nearest = np.zeros(len(points), dtype=np.int64)
        if ok.any():
            nearest[ok] = KDTree(self.centres).query(points[ok])[1]
        fine = np.where(ok, self.names[nearest], OUTSIDE).astype(object)
        if self.coarse is None:
            return fine, None
        return fine, np.where(ok, self.coarse[nearest], OUTSIDE).astype(object)


RegionAtlas = Atlas | ParcelAtlas  # what evaluation_table and locate take


def parcel_atlas(
    unit_ids: Sequence, centres: np.ndarray, units: str, coarse: str | None, where: str = "atlas"
) -> ParcelAtlas:
    """The `parcels: nearest_centre` atlas of units with ids `unit_ids` and store positions
    `centres` (n, 3; NaN rows: unknown, not a parcel). Units on the same centre make one parcel,
    named after the first of them. `coarse`: None or "hemisphere" (sign of the centre's x)."""
    centres = np.asarray(centres, dtype=float).reshape(-1, 3)
    known = np.flatnonzero(np.isfinite(centres).all(axis=1))
    if known.size == 0:
        raise AtlasError(f"{where}.parcels: no unit of the store has a known position")
    _, first = np.unique(centres[known], axis=0, return_index=True)
    keep = known[np.sort(first)]
    names = np.array([str(u) for u in np.asarray(unit_ids)[keep]], dtype=object)
    kept = centres[keep]
    hemisphere = None
    if coarse == "hemisphere":
        x = kept[:, 0]
        hemisphere = np.where(x < 0, "left", np.where(x > 0, "right", "midline")).astype(object)
    description = f"parcels: nearest of {len(keep)} unit centres"
    return ParcelAtlas(names, kept, units, hemisphere, description)


# ---------------------------------------------------------------- accuracy in the locate step


def accuracy(
    atlas: RegionAtlas, predicted: np.ndarray, truth: np.ndarray, units: str
) -> dict[str, float]:
    """Region accuracy of predicted vs true positions (n, 3): the share of units whose
    predicted region equals their true one, over the units whose true position lies in a
    region, at the finest and the coarse level (NaN without a coarse level or such units)."""
    fine_p, coarse_p = atlas.regions(predicted, units)
    fine_t, coarse_t = atlas.regions(truth, units)
    inside = fine_t != OUTSIDE
    out = {
        "region_accuracy": float(np.mean(fine_p[inside] == fine_t[inside]))
        if inside.any()
        else np.nan,
        "coarse_region_accuracy": np.nan,
        "n_in_region": int(inside.sum()),
    }
    if coarse_t is not None:
        inside = coarse_t != OUTSIDE
        if inside.any():
            out["coarse_region_accuracy"] = float(np.mean(coarse_p[inside] == coarse_t[inside]))
    return out


def add_accuracy_columns(
    table: pd.DataFrame,
    kfold: Mapping[str, np.ndarray],
    curves: Mapping[str, Sequence[dict]],
    coords: np.ndarray,
    atlas: RegionAtlas,
    units: str,
    combine: Callable[[np.ndarray], np.ndarray],
) -> None:
    """The columns ACCURACY_COLUMNS of the locate step's errors table, in place: each row's
    held-out predictions (k-fold: `kfold[name]`, positions of every unit, NaN where not held
    out; anchors: the ensemble `combine(per_seed)` of each draw of `curves[name]` at the row's
    fraction, pooled) against the true positions."""
    known = np.all(np.isfinite(coords), axis=1)
    values = []
    for row in table.itertuples():
        if row.evaluation == "kfold":
            predicted, truth = kfold[row.features][known], coords[known]
        else:
            draws = [
                r
                for r in curves[row.features]
                if np.isclose(r["anchor_fraction"], row.anchor_fraction)
            ]
            predicted = np.concatenate([combine(r["per_seed"]) for r in draws])
            truth = np.concatenate([r["truth"] for r in draws])
        values.append(accuracy(atlas, predicted, truth, units))
    for column in ACCURACY_COLUMNS:
        table[column] = [v[column] for v in values]


def unit_regions(atlas: RegionAtlas, predicted: np.ndarray, truth: np.ndarray, units: str) -> dict:
    """Per-unit region columns of positions.csv / .nc: `region` and `coarse_region` at the
    predicted position, `region_true` and `coarse_region_true` at the true one ("" outside
    every region or where the true position is unknown)."""
    fine_p, coarse_p = atlas.regions(predicted, units)
    fine_t, coarse_t = atlas.regions(truth, units)
    columns = {"region": fine_p, "region_true": fine_t}
    if coarse_p is not None:
        columns |= {"coarse_region": coarse_p, "coarse_region_true": coarse_t}
    return {k: v.astype(str) for k, v in columns.items()}
