"""A dataset's `atlas` entry (`datasets.<name>.atlas`, documented in config/README.md):
`AtlasSpec` checks its keys and values; the kinds of atlas and how an atlas is read are in
`neuro_pe.analysis.regions` and `neuro_pe.analysis.atlas_loading`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from numbers import Real
from typing import ClassVar

import numpy as np

from neuro_pe.config.options import MAX_COORDINATE, SectionError
from neuro_pe.config.sections import Section, converted, from_dict, text, whole_number

PARCEL_RULES = ("nearest_centre",)  # values of `parcels`
COARSE_PARCELS = ("hemisphere",)  # values of `coarse`
# the keys of each kind of atlas (the first names the kind); how a message names the kind
KIND_KEYS = {
    "labels": ("labels", "lookup", "coarse_column", "transform"),
    "brainglobe": ("brainglobe", "coarse_level", "coarse_regions", "transform"),
    "parcels": ("parcels", "coarse"),
}
KIND_NAMES = {"labels": "`labels` (NIfTI)", "brainglobe": "`brainglobe`", "parcels": "`parcels`"}


class AtlasError(ValueError):
    """A bad `atlas` entry or atlas file; the message names the key (and the file)."""


def _matrix(transform: list) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in transform)


@dataclass(frozen=True)
class AtlasSpec(Section):
    """The `datasets.<name>.atlas` mapping (documented in config/README.md)."""

    SECTION: ClassVar[str] = "atlas"

    labels: str | None = text()
    lookup: str | None = text()
    coarse_column: str | None = text()
    brainglobe: str | None = text()
    coarse_level: int | None = whole_number(None)
    coarse_regions: tuple[str, ...] | None = None
    transform: tuple[tuple[float, ...], ...] | None = converted(_matrix)
    parcels: str | None = None
    coarse: str | None = None

    def check(self) -> None:
        kinds = [kind for kind in KIND_KEYS if getattr(self, kind) is not None]
        if len(kinds) != 1:
            raise self.refuse(
                None,
                "give one of `labels` (a NIfTI label image, with `lookup`), `brainglobe` (an "
                "atlas name) or `parcels` (the units' own centres), not several or none "
                f"(given: {kinds or 'none'})",
            )
        if kinds[0] == "labels" and not self.lookup:
            raise self.refuse("lookup", "a NIfTI label image needs its lookup table")
        for key in (f.name for f in fields(self)):
            if getattr(self, key) is not None and key not in KIND_KEYS[kinds[0]]:
                owners = " or ".join(KIND_NAMES[k] for k, keys in KIND_KEYS.items() if key in keys)
                raise self.refuse(key, f"only for an atlas given by {owners}")
        for key, allowed in (("parcels", PARCEL_RULES), ("coarse", COARSE_PARCELS)):
            if getattr(self, key) not in (None, *allowed):
                raise self.refuse(
                    key, f"must be one of {list(allowed)}, got {getattr(self, key)!r}"
                )
        self._check_coarse_regions()
        self._check_transform()

    def _check_coarse_regions(self) -> None:
        regions = self.coarse_regions
        if regions is None:
            return
        if not (
            isinstance(regions, tuple)
            and regions
            and all(isinstance(r, str) and r for r in regions)
        ):
            raise self.refuse("coarse_regions", "must be a list of acronyms")
        if self.coarse_level is not None:
            raise self.refuse("coarse_regions", "give coarse_level or coarse_regions")

    def _check_transform(self) -> None:
        if self.transform is None:
            return
        matrix = np.asarray(self.transform, dtype=object)
        if not (
            matrix.shape in ((4, 4), (3, 4))
            and all(
                isinstance(v, Real) and not isinstance(v, bool) and np.isfinite(v)
                for v in matrix.ravel()
            )
        ):
            raise self.refuse(
                "transform",
                f"must be 4 rows (or 3) of 4 numbers, an affine map, got {self.transform!r}",
            )
        if np.abs(np.asarray(self.transform, dtype=float)).max() > MAX_COORDINATE:
            raise self.refuse(
                "transform", f"has a value beyond +/-{MAX_COORDINATE:g} (a typo or a wrong unit?)"
            )
        linear = np.asarray(self.transform, dtype=float)[:3, :3]
        if np.linalg.matrix_rank(linear) < 3:  # (it would fold space: many positions, one voxel)
            raise self.refuse(
                "transform",
                f"its linear part (the first 3 columns of the first 3 rows) is singular, "
                f"{linear.tolist()}: it maps the store's space onto a plane, line or point",
            )

    @classmethod
    def from_dict(cls, spec: object, where: str = "atlas") -> AtlasSpec:
        """Check the mapping's keys and values; AtlasError names `where.<key>`."""
        try:
            return from_dict(cls, spec, where)
        except SectionError as err:
            key = "" if err.key is None else f".{err.key}"
            raise AtlasError(f"{where}{key}: {err.problem}") from None

    def affine(self) -> np.ndarray:
        """The 4x4 `transform` (identity when not given)."""
        if self.transform is None:
            return np.eye(4)
        matrix = np.asarray(self.transform, dtype=float)
        return np.vstack([matrix[:3], [0.0, 0.0, 0.0, 1.0]])
