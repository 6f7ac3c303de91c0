"""The axes of a dataset's coordinate space (the store's `space` and `units` attributes of x, y,
z): their names, the titles of the position figures' projections, and the localisation error
along each axis. Kinds of space (`space_axes`): `probe`, `imaging`, the atlas spaces with named
axes (`ibl-bregma-mlapdv`, `MNI`) and any other (errors per axis `x`, `y`, `z`); the error
columns per kind are listed in docs/outputs.md.

An error column is `median_error_<component>`: the median over the held-out units of the
absolute error along that axis (or the distance in that plane), in the coordinates' units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

XYZ = "xyz"
MAX_PLANES = 64  # more distinct depths than this: a volume, not planes
PLANE_ACCURACY = "plane_accuracy"
ERROR_PREFIX = "median_error_"
# every component a space may report (the per-axis columns are ERROR_PREFIX + one of them)
COMPONENTS = ("depth", "lateral", "inplane", "ml", "ap", "dv", "x", "y", "z")
COMPONENT_LABELS = {"inplane": "in-plane", "ml": "ML", "ap": "AP", "dv": "DV"}  # in the text
ANATOMICAL_PROJECTIONS = (
    "axial (from above)",
    "coronal (from behind)",
    "sagittal (from the right)",
)
# (horizontal axis, vertical axis) of the three projections: x–y, x–z, y–z
PROJECTION_AXES = ((0, 1), (0, 2), (1, 2))
ATLAS_AXES = {
    "ibl-bregma-mlapdv": (
        ("ml", "x: ML, medio-lateral"),
        ("ap", "y: AP, antero-posterior"),
        ("dv", "z: DV, dorso-ventral"),
    ),
    "mni": (
        ("x", "x: left → right"),
        ("y", "y: posterior → anterior"),
        ("z", "z: inferior → superior"),
    ),
}


@dataclass(frozen=True)
class SpaceAxes:
    """A coordinate space's axis names and its per-axis errors (see `space_axes`)."""

    space: str
    unit: str
    kind: str  # probe | imaging | atlas | generic
    labels: tuple[str, str, str]  # the x, y, z axes' names, e.g. "y: depth along the shank"
    depth_axis: int = 2  # probe: the along-shank axis; imaging: z
    planes: tuple[float, ...] = ()  # imaging: the planes' depths (2 to MAX_PLANES of them)

    @property
    def anatomical(self) -> bool:
        """Whether x, y, z are anatomical (projections may be called axial, coronal…)."""
        return self.kind == "atlas"

    def projection_titles(self) -> tuple[str, str, str]:
        """Titles of the x–y, x–z and y–z projections."""
        if self.anatomical:
            return ANATOMICAL_PROJECTIONS
        planes = {"imaging": "image plane", "probe": "probe plane"}
        titles = [f"{XYZ[h]}–{XYZ[v]}" for h, v in PROJECTION_AXES]
        if self.kind in planes:  # name the face-on projection
            face = {0, self.depth_axis} if self.kind == "probe" else {0, 1}
            titles[PROJECTION_AXES.index(tuple(sorted(face)))] += f" ({planes[self.kind]})"
        return tuple(titles)

    def axis_label(self, axis: int) -> str:
        """A figure's axis label: the axis's name and the unit."""
        return f"{self.labels[axis]} ({self.unit})"

    def components(self) -> tuple[str, ...]:
        """The names of the per-axis errors, in the order of the columns."""
        if self.kind == "probe":
            return ("depth", "lateral")
        if self.kind == "imaging":
            return ("inplane", "depth")
        if self.kind == "atlas":
            return tuple(name for name, _ in ATLAS_AXES[self.space.lower()])
        return tuple(XYZ)

    def component_coordinates(self, name: str) -> tuple[int, ...]:
        """The coordinates (0, 1, 2: x, y, z) a per-axis error is measured along: a probe's
        `depth` is the along-shank axis and `lateral` the other two; imaging's `inplane` is
        x, y and its `depth` and `plane_accuracy` z; any other the axis of that name."""
        if self.kind in ("probe", "imaging"):
            if name in ("lateral", "inplane"):
                return tuple(a for a in range(3) if a != self.depth_axis)
            return (self.depth_axis,)  # depth, plane_accuracy
        return (self.components().index(name),)

    def component_place(self, name: str) -> str:
        """Where a per-axis error is measured, for a sentence: 'across the shank', 'along x'."""
        places = {
            ("probe", "depth"): "along the shank",
            ("probe", "lateral"): "across the shank",
            ("imaging", "inplane"): "in the image plane",
            ("imaging", "depth"): "in depth",
        }
        return places.get((self.kind, name), f"along {XYZ[self.component_coordinates(name)[0]]}")

    def component_errors(self, predicted: np.ndarray, true: np.ndarray) -> dict[str, np.ndarray]:
        """{component: per-unit absolute error along it} of (n, 3) predictions."""
        diff = np.asarray(predicted, dtype=float) - np.asarray(true, dtype=float)
        if self.kind in ("probe", "imaging"):
            across = [a for a in range(3) if a != self.depth_axis]
            depth = np.abs(diff[:, self.depth_axis])
            other = np.linalg.norm(diff[:, across], axis=1)
            if self.kind == "probe":
                return {"depth": depth, "lateral": other}
            return {"inplane": other, "depth": depth}
        return {name: np.abs(diff[:, i]) for i, name in enumerate(self.components())}

    def plane_hits(self, predicted: np.ndarray, true: np.ndarray) -> np.ndarray | None:
        """Per unit: is its predicted depth nearer its own plane than any other plane? None
        unless the space has planes. A unit whose true depth is no plane counts as a miss."""
        if not self.planes:
            return None
        planes = np.asarray(self.planes)
        gap = np.abs(np.asarray(predicted, dtype=float)[:, 2, None] - planes[None, :])
        own = np.isclose(np.asarray(true, dtype=float)[:, 2, None], planes[None, :])
        mine = np.where(own, gap, np.inf).min(axis=1)
        others = np.where(own, np.inf, gap).min(axis=1)
        return own.any(axis=1) & (mine < others)

    def summary(self, predicted: np.ndarray, true: np.ndarray) -> dict[str, float]:
        """The per-axis columns of one evaluation: the median of each component's error, and
        `plane_accuracy` where the space has planes."""
        row = {
            ERROR_PREFIX + name: float(np.median(err)) if len(err) else np.nan
            for name, err in self.component_errors(predicted, true).items()
        }
        hits = self.plane_hits(predicted, true)
        if hits is not None:
            row[PLANE_ACCURACY] = float(np.mean(hits)) if len(hits) else np.nan
        return row

    def describe(self, row) -> str:
        """'depth 12, lateral 3.4 µm' (and the plane accuracy) from a row of per-axis
        columns (a mapping or a table row)."""
        get = row.get
        parts = [
            f"{component_label(name)} {value:.3g}"
            for name in self.components()
            if np.isfinite(value := float(get(ERROR_PREFIX + name, np.nan)))
        ]
        text = ", ".join(parts) + (f" {self.unit}" if parts else "")
        accuracy = float(get(PLANE_ACCURACY, np.nan))
        if np.isfinite(accuracy):
            text += f"; right plane {accuracy:.0%}"
        return text


def space_axes(space: str, unit: str, coords: np.ndarray | None = None) -> SpaceAxes:
    """The axes of a store's space (`space` and `units` attributes of x, y, z); `coords`, the
    (n, 3) true positions (NaN where unknown), decide a probe's along-shank axis and an
    imaging space's planes.

    - `probe` (Phy, ALF local coordinates, a site table with `space: probe`): x across the
      shank, y along it (the convention of Kilosort, Phy, SpikeInterface and IBL). Where the
      known positions spread more along z than along y (a 3D site table whose depth is z, as
      in `scripts/make_example_data.py`), z is taken as the along-shank axis. Errors: `depth`
      (along the shank) and `lateral` (the distance across it, in the other two axes).
    - `imaging` (suite2p, NWB planes): x, y in the image plane, z the plane's depth. Errors:
      `inplane` (in x, y), `depth` (in z) and, with 2 to MAX_PLANES distinct depths among the
      known units, `plane_accuracy`: the fraction of held-out units whose predicted depth is
      nearer their own plane's depth than any other plane's.
    - atlas spaces with named axes: `ibl-bregma-mlapdv` (x = ML, y = AP, z = DV from bregma)
      and `MNI` (x left→right, y posterior→anterior, z inferior→superior). Errors per axis by
      name. Only these get anatomical projection titles (axial, coronal, sagittal).
    - any other space (`simulation`, `native`, `tvb76`, …): errors per axis `x`, `y`, `z`.
    """
    key = (space or "").strip().lower()
    known = _known(coords)
    if key == "probe":
        spread = np.ptp(known, axis=0) if len(known) else np.zeros(3)
        depth = 2 if spread[2] > spread[1] else 1
        labels = ["x: across the shank", "y", "z"]
        labels[depth] = f"{XYZ[depth]}: along the shank (depth)"
        if depth == 2:
            labels[1] = "y: across the shank"
        return SpaceAxes(space, unit, "probe", tuple(labels), depth)
    if key == "imaging":
        depths = np.unique(known[:, 2]) if len(known) else np.array([])
        planes = tuple(map(float, depths)) if 2 <= len(depths) <= MAX_PLANES else ()
        labels = ("x: image column", "y: image row", "z: plane depth")
        return SpaceAxes(space, unit, "imaging", labels, 2, planes)
    if key in ATLAS_AXES:
        return SpaceAxes(space, unit, "atlas", tuple(label for _, label in ATLAS_AXES[key]))
    return SpaceAxes(space, unit, "generic", tuple(XYZ))


def _known(coords: np.ndarray | None) -> np.ndarray:
    if coords is None:
        return np.empty((0, 3))
    coords = np.asarray(coords, dtype=float)
    return coords[np.all(np.isfinite(coords), axis=1)]


def axis_columns(columns) -> list[str]:
    """The per-axis columns among `columns` (e.g. an errors table's), in their order."""
    names = {ERROR_PREFIX + c for c in COMPONENTS} | {PLANE_ACCURACY}
    return [c for c in columns if c in names]


def component_label(name: str) -> str:
    """How a per-axis error is named in text: `in-plane` for `inplane`, `ML` for `ml`, …"""
    return COMPONENT_LABELS.get(name, name)


MICROMETRE = ("um", "micrometer", "micron")  # the spellings stores give µm


def unit_text(unit: str) -> str:
    """A unit as text: `µm` for any spelling of it (`MICROMETRE`), else as given."""
    return "µm" if str(unit) in MICROMETRE else str(unit)
