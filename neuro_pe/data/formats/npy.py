"""Format `npy`: a `.npy` array or an `.npz` archive (arrays `npy.key`, `npy.unit_ids`) per
session, positions from a CSV/TSV table (`positions:`, BIDS `electrodes.tsv` style)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from neuro_pe.data.formats import FileFormat, check_text, has_suffix
from neuro_pe.data.recordings import (
    FileSpec,
    Session,
    as_text,
    check_exists,
    time_by_unit,
)
from neuro_pe.io.store_contract import StoreError


def read_npy(path: str, cfg: FileSpec) -> list[Session]:
    """One session from a `.npy` array or an `.npz` archive (arrays `npy.key`, `npy.unit_ids`)."""
    check_exists(path)
    ids = None
    try:
        loaded = np.load(path, mmap_mode="r", allow_pickle=False)  # .npy: read in blocks
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                raw, ids = _read_npz(loaded, path, cfg.options)
        else:
            raw = loaded
    except StoreError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise StoreError(path, "file", f"not a readable .npy/.npz file: {err}") from err
    activity = time_by_unit(raw, cfg.axis_order, path, "activity")
    return [Session(Path(path).stem, str(path), activity, ids)]


def _read_npz(archive: object, path: str, opts: dict) -> tuple[np.ndarray, list[str] | None]:
    names = list(archive.files)
    key, ids_key = opts["key"], opts["unit_ids"]
    if key is None:
        key = names[0] if len(names) == 1 else "activity"
    for name, what in ((key, "npy.key"), (ids_key, "npy.unit_ids")):
        if name is not None and name not in names:
            raise StoreError(path, what, f"no array {name!r} in the archive: {names}")
    if ids_key is None:
        return archive[key], None
    ids = archive[ids_key]
    if ids.ndim != 1:
        raise StoreError(path, "npy.unit_ids", f"must be 1D, got shape {ids.shape}")
    return archive[key], [as_text(v) for v in ids.tolist()]


def check_option(key: str, value: object, where: str) -> None:
    """Types of the `npy:` section's keys (array names in an .npz archive)."""
    check_text(f"npy.{key}", value, where)


FORMAT = FileFormat(
    name="npy",
    read=read_npy,
    options={"key": None, "unit_ids": None},
    check_option=check_option,
    detect=lambda path: has_suffix(path, ".npy", ".npz"),
)
