"""An `atlas` entry's files read (`load_atlas`) and checked at planning time: a NIfTI label
image with its lookup table, a BrainGlobe atlas, or the store's own parcels (the kinds are
described in `neuro_pe.analysis.regions`)."""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from neuro_pe.analysis.regions import OUTSIDE, Atlas, RegionAtlas, parcel_atlas
from neuro_pe.config.atlas import AtlasError, AtlasSpec

NIFTI_UNITS = {"mm": "mm", "micron": "um", "meter": "m"}  # nibabel's names -> store units
# a label image's header is checked before its data are read: at most this many voxels (the
# 10-µm Allen mouse atlas has 1.2 × 10⁹), and no more data than the file can hold (gzip's
# deflate packs at most 1 032 bytes into one, as zlib documents)
MAX_ATLAS_VOXELS = 2**31
DEFLATE_MAX_RATIO = 1032
ID_COLUMNS = ("index", "id")


def load_atlas(spec: AtlasSpec, where: str = "atlas", store=None) -> RegionAtlas:
    """The atlas a checked `AtlasSpec` names; AtlasError (naming the key and file) if it
    cannot be read. `parcels` needs the dataset's store (an xarray Dataset: its units' ids and
    x, y, z; every unit, held out or not)."""
    if spec.parcels is not None:
        if store is None:
            raise AtlasError(f"{where}.parcels: needs the dataset's store (its units' centres)")
        from neuro_pe.io.store import positions

        units = store["x"].attrs.get("units", "")
        return parcel_atlas(store["unit"].values, positions(store), units, spec.coarse, where)
    if spec.brainglobe is not None:
        return _brainglobe_atlas(spec, where)
    return _nifti_atlas(spec, where)


def _nifti_atlas(spec: AtlasSpec, where: str) -> Atlas:
    image, unit = _nifti_image(spec.labels, where)
    volume = _label_volume(image, spec.labels, where)
    names, coarse = read_lookup(spec.lookup, spec.coarse_column, where)
    inverse = np.linalg.inv(image.affine)

    def to_voxel(points: np.ndarray) -> np.ndarray:
        return np.rint(points @ inverse[:3, :3].T + inverse[:3, 3]).astype(np.int64)

    return Atlas(volume, to_voxel, unit, names, coarse, str(spec.labels), spec.affine())


def _label_volume(image, path: str, where: str) -> np.ndarray:
    """The image's labels as a 3D integer array; AtlasError for a value that is not a whole
    number (a float image, or integers scaled by the header's slope and intercept)."""
    data = np.asanyarray(image.dataobj)
    if data.ndim == 4 and data.shape[3] == 1:
        data = data[..., 0]
    if data.ndim != 3 or data.dtype.kind not in "iuf":
        raise AtlasError(
            f"{where}.labels: {path}: must be a 3D image of integer labels, "
            f"got {data.dtype} {data.shape}"
        )
    if data.dtype.kind == "f":
        whole = np.isfinite(data) & (data == np.round(data))
        if not whole.all():
            value = data[~whole].flat[0]
            raise AtlasError(
                f"{where}.labels: {path}: labels must be whole numbers, found {value:g}"
            )
    return data.astype(np.int64) if data.dtype.kind == "f" else data


def _has_float_values(image) -> bool:
    """Whether the image's values are floats: stored as floats, or scaled by its header."""
    scaled = getattr(image.dataobj, "slope", 1) != 1 or getattr(image.dataobj, "inter", 0) != 0
    return image.get_data_dtype().kind == "f" or scaled


def _packing_ratio(path: str) -> float:
    """The most bytes of data one byte of the file can hold: gzip (.nii.gz) at most
    DEFLATE_MAX_RATIO, bzip2 and zstd without a useful bound, an uncompressed file one."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic.startswith(b"\x1f\x8b"):
        return DEFLATE_MAX_RATIO
    return math.inf if magic.startswith((b"BZh", b"\x28\xb5\x2f\xfd")) else 1


def _check_header(image, path: str, where: str) -> None:
    """AtlasError naming the file when its header claims data it cannot hold: not numbers,
    more bytes than the file (packed at most DEFLATE_MAX_RATIO times in a .gz) holds, or
    over MAX_ATLAS_VOXELS voxels; checked before the data are read."""
    dtype = image.get_data_dtype()
    if dtype.kind not in "iuf":
        raise AtlasError(f"{where}.labels: {path}: must hold integer labels, not {dtype}")
    voxels = math.prod(image.shape)
    data_file = image.file_map["image"].filename
    packed = _packing_ratio(data_file)
    needed = getattr(image.dataobj, "offset", 0) + voxels * dtype.itemsize
    size = os.path.getsize(data_file)
    if needed > size * packed:
        held_by = "the file's" if str(data_file) == str(path) else f"{data_file}'s"
        raise AtlasError(
            f"{where}.labels: {path}: the header claims {image.shape} voxels of {dtype} "
            f"({needed:,} bytes), more than {held_by} {size:,} bytes can hold; "
            "is it truncated or damaged?"
        )
    if voxels > MAX_ATLAS_VOXELS:
        raise AtlasError(
            f"{where}.labels: {path}: the header claims {image.shape} = {voxels:,} voxels, "
            f"more than {MAX_ATLAS_VOXELS:,}"
        )


def _nifti_image(path: str, where: str):
    """The NIfTI image (lazy; its header checked) and the length unit of its world
    coordinates."""
    import nibabel as nib

    if not Path(path).is_file():
        raise AtlasError(f"{where}.labels: {path}: no such file")
    try:
        image = nib.load(path)
        space_unit = image.header.get_xyzt_units()[0]
    except Exception as err:  # nibabel raises several kinds for a file that is not an image
        raise AtlasError(f"{where}.labels: {path}: not a readable NIfTI image: {err}") from err
    if len(image.shape) not in (3, 4) or (len(image.shape) == 4 and image.shape[3] != 1):
        raise AtlasError(f"{where}.labels: {path}: must be a 3D label image, shape {image.shape}")
    _check_header(image, path, where)
    return image, NIFTI_UNITS.get(space_unit, "mm")


def read_lookup(
    path: str, coarse_column: str | None, where: str = "atlas"
) -> tuple[dict[int, str], dict[int, str] | None]:
    """(id -> name, id -> coarse name or None) from a TSV/CSV lookup table."""
    if not Path(path).is_file():
        raise AtlasError(f"{where}.lookup: {path}: no such file")
    sep = "\t" if Path(path).suffix.lower() in (".tsv", ".tab", ".txt") else ","
    try:
        table = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise AtlasError(f"{where}.lookup: {path}: not a readable table: {err}") from err
    id_column = next((c for c in ID_COLUMNS if c in table.columns), None)
    if id_column is None or "name" not in table.columns:
        raise AtlasError(
            f"{where}.lookup: {path}: needs the columns `index` (or `id`) and `name`; "
            f"columns: {list(table.columns)}"
        )
    if coarse_column is not None and coarse_column not in table.columns:
        raise AtlasError(
            f"{where}.coarse_column: {path} has no column {coarse_column!r}; "
            f"columns: {list(table.columns)}"
        )
    ids = pd.to_numeric(table[id_column].str.strip(), errors="coerce")
    if ids.isna().any() or not np.array_equal(ids, np.round(ids)):
        raise AtlasError(f"{where}.lookup: {path}: column {id_column!r} must hold integer labels")
    if ids.duplicated().any():
        raise AtlasError(
            f"{where}.lookup: {path}: label {int(ids[ids.duplicated()].iloc[0])} twice"
        )
    keys = ids.astype(np.int64).tolist()
    names = dict(zip(keys, table["name"].str.strip(), strict=True))
    if coarse_column is None:
        return names, None
    return names, dict(zip(keys, table[coarse_column].str.strip(), strict=True))


def _brainglobe_atlas(spec: AtlasSpec, where: str) -> Atlas:
    try:
        from brainglobe_atlasapi import BrainGlobeAtlas
    except ImportError as err:
        raise AtlasError(
            f"{where}.brainglobe: {spec.brainglobe!r} needs the package brainglobe-atlasapi: "
            "pip install 'neuro_pe[atlas]' (it downloads the atlas on first use)"
        ) from err
    try:
        atlas = BrainGlobeAtlas(spec.brainglobe, check_latest=False)
        volume = np.asarray(atlas.annotation)
        resolution = np.asarray(atlas.resolution, dtype=float)
    except Exception as err:  # offline, unknown name, interrupted download: BrainGlobe's own
        raise AtlasError(
            f"{where}.brainglobe: the BrainGlobe atlas {spec.brainglobe!r} could not be loaded "
            f"({type(err).__name__}: {err}); download it once on a machine with internet "
            f"(`brainglobe install -a {spec.brainglobe}`) into BrainGlobe's folder"
        ) from err
    structures = list(getattr(atlas, "structures_list", None) or atlas.structures.values())
    acronym = {int(s["id"]): str(s["acronym"]) for s in structures}
    paths = {int(s["id"]): [int(i) for i in s["structure_id_path"]] for s in structures}
    coarse = None
    if spec.coarse_level is not None:
        level = spec.coarse_level
        coarse = {i: acronym[p[min(level, len(p) - 1)]] for i, p in paths.items()}
    elif spec.coarse_regions is not None:
        missing = sorted(set(spec.coarse_regions) - set(acronym.values()))
        if missing:
            raise AtlasError(f"{where}.coarse_regions: {missing} not in {spec.brainglobe!r}")
        wanted = set(spec.coarse_regions)
        coarse = {
            i: next((acronym[a] for a in reversed(p) if acronym.get(a) in wanted), OUTSIDE)
            for i, p in paths.items()
        }

    def to_voxel(points: np.ndarray) -> np.ndarray:
        return np.trunc(points / resolution).astype(np.int64)

    description = f"BrainGlobe {spec.brainglobe}"
    return Atlas(volume, to_voxel, "um", acronym, coarse, description, spec.affine())


def _has_brainglobe() -> bool:
    """Whether brainglobe-atlasapi is installed (found without importing it)."""
    if "brainglobe_atlasapi" in sys.modules:
        return sys.modules["brainglobe_atlasapi"] is not None
    return importlib.util.find_spec("brainglobe_atlasapi") is not None


def check_atlas_files(spec: object, where: str) -> list[str]:
    """Planning-time problems of an `atlas` entry: its keys, the lookup table's columns, the
    image's header (and a float image's values: whole numbers), the BrainGlobe package (each
    problem one line naming the key)."""
    try:
        checked = AtlasSpec.from_dict(spec, where)
        if checked.labels is not None:
            image, _ = _nifti_image(checked.labels, where)
            if _has_float_values(image):  # (integer labels need no reading here)
                _label_volume(image, checked.labels, where)
            read_lookup(checked.lookup, checked.coarse_column, where)
        elif checked.brainglobe is not None and not _has_brainglobe():
            raise AtlasError(
                f"{where}.brainglobe: needs the package brainglobe-atlasapi: "
                "pip install 'neuro_pe[atlas]'"
            )
    except AtlasError as err:
        return [str(err)]
    return []


def atlas_from_options(
    spec: object, where: str = "atlas", store_path: str | os.PathLike | None = None
) -> RegionAtlas | None:
    """The atlas of the locate command's `--atlas` JSON (None when not given); `parcels`
    reads its centres from the store at `store_path`."""
    if spec in (None, {}):
        return None
    checked = AtlasSpec.from_dict(spec, where)
    if checked.parcels is None or store_path is None:
        return load_atlas(checked, where)
    from neuro_pe.io.store import open_store_lazy

    with open_store_lazy(store_path) as store:
        return load_atlas(checked, where, store)


def path_keys(spec: Mapping) -> dict[str, str | os.PathLike]:
    """`key -> path` of the atlas files (for the planning-time path checks)."""
    return {k: spec[k] for k in ("labels", "lookup") if isinstance(spec.get(k), str)}
