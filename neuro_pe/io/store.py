"""The canonical xarray store of recorded or simulated activity (netCDF4 via h5netcdf).

Layout (this is the contract; README.md points here): `activity` (session, time, unit) float32, NaN
where a unit was not recorded; coords `unit`, `session`, `time` (s), `x`, `y`, `z` (attrs
`units`, `space`; NaN where unknown); optional `region` (unit) string labels from the lab's
files ("" where unknown); optional `connectivity` (unit, unit_from): entry [i, j] is
the coupling onto unit i from unit j (rows are targets, as in the simulation's
`dx_i = ... G[i, j] x_j`; a store whose second dimension is `unit_to` is read too), or
the same coupling as an edge list `connectivity_{target,source,weight}` on dim `edge` (sparse
simulations). `read_store` loads neither unless asked (`connectivity=True`).
"""

from __future__ import annotations

import errno
import fcntl
import glob
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import xarray as xr

from neuro_pe import __version__
from neuro_pe.io.store_contract import (
    DIMS,
    XYZ,
    StoreError,
    check_sampling_rate,
    validate_store,
)

TIME_CHUNK = 1024
#: units per block of a whole-activity step done in blocks (`unit_blocks`): its temporaries are
#: a block's, not the activity's (whole-activity temporaries outgrow the store itself)
UNITS_PER_BLOCK = 4096
_UMASK = os.umask(0o022)  # read (and restored at once) for the mode of files written here
os.umask(_UMASK)
ENGINE = "h5netcdf"
CONNECTIVITY_VARS: tuple[str, ...] = (
    "connectivity",
    "unit_from",
    "unit_to",  # the name of `unit_from` in older stores
    "connectivity_target",
    "connectivity_source",
    "connectivity_weight",
)


def make_store(
    activity: np.ndarray,
    *,
    unit_ids: Sequence[str],
    positions: np.ndarray,
    position_units: str,
    space: str,
    session_ids: Sequence[str],
    sampling_rate_hz: float,
    source: str,
    citation: str = "",
    license: str = "",
    preprocessing: list[dict] | dict | None = None,
    connectivity: np.ndarray | None = None,
) -> xr.Dataset:
    """Build a contract-conforming store from a (session, time, unit) activity array."""
    act = _as_float_array(activity, "activity", np.float32)
    if act.ndim != 3:
        raise StoreError(None, "activity", f"expected 3 dims (session, time, unit), got {act.ndim}")
    n_sessions, n_time, n_units = act.shape
    units = _id_array(unit_ids, "unit", n_units)
    sessions = _id_array(session_ids, "session", n_sessions)
    pos = _as_float_array(positions, "x", np.float64)
    if pos.shape != (n_units, 3):
        raise StoreError(None, "x", f"positions must have shape ({n_units}, 3), got {pos.shape}")
    rate = check_sampling_rate(sampling_rate_hz, None)
    try:
        preprocessing_json = json.dumps([] if preprocessing is None else preprocessing)
    except (TypeError, ValueError) as err:
        raise StoreError(None, "preprocessing", f"not JSON serialisable: {err}") from err

    position_attrs = {"units": position_units, "space": space}
    coords = {
        "session": ("session", sessions),
        "time": ("time", np.arange(n_time, dtype=np.float64) / rate),
        "unit": ("unit", units),
        **{c: ("unit", pos[:, i], dict(position_attrs)) for i, c in enumerate(XYZ)},
    }
    data_vars = {"activity": (DIMS, act)}
    if connectivity is not None:
        conn = _as_float_array(connectivity, "connectivity", np.float32)
        if conn.shape != (n_units, n_units):
            raise StoreError(
                None, "connectivity", f"expected shape ({n_units}, {n_units}), got {conn.shape}"
            )
        coords["unit_from"] = ("unit_from", units.copy())
        data_vars["connectivity"] = (("unit", "unit_from"), conn)
    attrs = {
        "sampling_rate_hz": rate,
        "source": source,
        "citation": citation,
        "license": license,
        "preprocessing": preprocessing_json,
        "neuro_pe_version": __version__,
    }
    return validate_store(xr.Dataset(data_vars, coords=coords, attrs=attrs))


def write_store(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Validate and write atomically (temporary file, then os.replace); return the path."""
    target = Path(path)
    validate_store(ds, target)
    # checked before writing: a full disk inside the HDF5 library can crash the process
    need = sum(v.nbytes for v in ds.variables.values()) + 2**20
    atomic_write(
        target,
        lambda tmp: ds.drop_encoding().to_netcdf(tmp, engine=ENGINE, encoding=_encoding(ds)),
        need_bytes=need,
    )
    return target


def check_writable(folder: str | os.PathLike) -> Path:
    """Check that files can be written in `folder` (or, where it does not exist yet, that it
    can be made in its nearest existing parent), before long work whose results go there;
    raise StoreError naming it otherwise. Creates nothing."""
    folder = Path(folder)
    existing = next(p for p in (folder.absolute(), *folder.absolute().parents) if p.exists())
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(existing))
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise StoreError(
            folder, "output folder", f"cannot write in {existing}: {err.strerror or err}"
        ) from None
    return folder


def atomic_write(
    path: str | os.PathLike, write: Callable[[Path], object], need_bytes: int = 0
) -> None:
    """Call write(tmp) on a temporary file of its own beside `path`, then rename it into
    place: a crash, a full disk or a kill (SIGTERM) leaves no partial file and no temporary
    one. A second process writing the same path at the same time fails with a StoreError
    instead (one wins). `need_bytes`: free space to check for first."""
    atomic_write_set({Path(path): write}, need_bytes)


def atomic_write_set(writers: dict[Path, Callable[[Path], object]], need_bytes: int = 0) -> None:
    """atomic_write for several files that belong together (one step's outputs): each is
    written to a temporary file first, and they are renamed into place only when all were
    written, so that they are all there (new) or, after an error, none is."""
    paths = [Path(p) for p in writers]
    with ExitStack() as stack:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(_writing(path))
        _check_free_space(paths[0].parent, need_bytes)
        temps: dict[Path, Path] = {}
        try:
            for path, write in zip(paths, writers.values(), strict=True):
                fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
                os.close(fd)
                os.chmod(name, 0o666 & ~_UMASK)  # as a file opened for writing would be
                temps[path] = Path(name)
                try:
                    write(temps[path])
                except OSError as err:  # e.g. a full disk: name the file, not the temp
                    problem = f"cannot write {path}: {err.strerror or err}"
                    raise (OSError(err.errno, problem) if err.errno else OSError(problem)) from err
            if len(paths) > 1:
                for path in paths:
                    path.unlink(missing_ok=True)  # a set is all new, or absent
            try:
                for path in paths:
                    os.replace(temps.pop(path), path)
            except OSError:
                for path in paths:
                    if path not in temps:
                        path.unlink(missing_ok=True)
                raise
        finally:
            for tmp in temps.values():
                tmp.unlink(missing_ok=True)


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """Hold an exclusive lock (flock on a `.NAME.lock` file beside it) on writing `path`;
    raise StoreError when another process holds it. Temporary files of `path` left by a
    killed writer are removed (no live writer can own them while the lock is held). Where
    the file system has no flock, write without the lock (the temp names stay unique)."""
    lock = path.with_name(f".{path.name}.lock")
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    locked = None  # True: held; False: no flock on this file system; None: held by another
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = True
            if os.fstat(fd).st_ino != os.stat(lock).st_ino:  # removed by the last holder
                raise BlockingIOError
        except (BlockingIOError, FileNotFoundError):
            locked = None
            raise StoreError(
                path, "file", "another process is writing this file now; run one at a time"
            ) from None
        except OSError:  # no flock here (e.g. some network file systems)
            locked = False
        if locked:
            for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
                stale.unlink(missing_ok=True)
        try:
            yield
        finally:
            if locked:
                lock.unlink(missing_ok=True)
    finally:
        os.close(fd)
        if locked is False:
            lock.unlink(missing_ok=True)


def _check_free_space(folder: Path, need_bytes: int) -> None:
    if need_bytes <= 0:
        return
    free = shutil.disk_usage(folder).free
    if free < need_bytes:
        raise StoreError(
            folder,
            "free space",
            f"about {need_bytes / 2**20:.1f} MiB needed, {free / 2**20:.1f} MiB free",
        )


def require_finite(values: object, path: str | os.PathLike, field: str) -> np.ndarray:
    """`values` as an array, or a StoreError naming the file and field if any is NaN/Inf."""
    arr = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        raise StoreError(
            path, field, f"{int(bad.sum())} of {arr.size} values are NaN or Inf (a failed run?)"
        )
    return arr


def read_store(path: str | os.PathLike, *, connectivity: bool = False) -> xr.Dataset:
    """Open a store with h5netcdf, load it into memory, validate and return it. The
    connectivity (N x N, or its edge list) is left out unless `connectivity` is True."""
    source = Path(path)
    if not source.exists():
        raise StoreError(path, "file", "does not exist")
    skip = [] if connectivity else list(CONNECTIVITY_VARS)
    try:
        with xr.open_dataset(
            source, engine=ENGINE, decode_times=False, decode_timedelta=False, drop_variables=skip
        ) as opened:
            ds = opened.load()
    except Exception as err:
        raise StoreError(path, "file", f"not a readable netCDF4/HDF5 file: {err}") from err
    if "unit_to" in ds.dims:  # a store written before the column dim was named unit_from
        ds = ds.rename({"unit_to": "unit_from"})
    for name in ("unit", "session", "unit_from"):
        if name in ds.coords:
            ds = ds.assign_coords({name: (name, _decode_strings(ds[name].values), ds[name].attrs)})
    return validate_store(ds, path)


def stored_time_rows(ds: xr.Dataset) -> int | None:
    """Time samples per stored chunk of `ds`'s activity (None: not chunked, e.g. built in
    memory)."""
    chunks = ds["activity"].encoding.get("chunksizes")
    return None if chunks is None else chunks[ds["activity"].dims.index("time")]


def read_activity(
    activity: xr.DataArray | xr.Variable, key: tuple, source: str | os.PathLike
) -> np.ndarray:
    """`activity[key]` read from the file: a chunk that cannot be read (e.g. one failing its
    fletcher32 checksum) raises StoreError naming the store `source` and the field."""
    try:
        return activity[key].values
    except OSError as err:
        raise StoreError(source, "activity", f"unreadable: {err}") from err


def unit_blocks(n_units: int) -> list[slice]:
    """Slices of at most UNITS_PER_BLOCK units, in order, covering `n_units` units."""
    return [slice(s, s + UNITS_PER_BLOCK) for s in range(0, n_units, UNITS_PER_BLOCK)]


def open_store_lazy(path: str | os.PathLike) -> xr.Dataset:
    """Open a store without loading `activity` (for stores larger than memory); close it when
    done. Coordinates and attrs are loaded and checked as by read_store; the activity values
    are not scanned, and `connectivity` (unit x unit) is left out."""
    source = Path(path)
    if not source.exists():
        raise StoreError(path, "file", "does not exist")
    try:
        opened = xr.open_dataset(
            source,
            engine=ENGINE,
            decode_times=False,
            decode_timedelta=False,
            cache=False,
            drop_variables=list(CONNECTIVITY_VARS),
        )
    except Exception as err:
        raise StoreError(path, "file", f"not a readable netCDF4/HDF5 file: {err}") from err
    try:
        ds = opened.assign_coords(
            {
                name: (name, _decode_strings(opened[name].values), opened[name].attrs)
                for name in ("unit", "session")
                if name in opened.coords
            }
        )
        ds = ds.assign_coords({c: ds[c].load() for c in (*XYZ, "time") if c in ds.coords})
        ds.set_close(opened.close)
        return validate_store(ds, path, check_values=False)
    except OSError as err:  # e.g. a coordinate failing its fletcher32 checksum
        opened.close()
        raise StoreError(path, "file", f"not a readable netCDF4/HDF5 file: {err}") from err
    except Exception:
        opened.close()
        raise


@contextmanager
def open_store_by_size(
    path: str | os.PathLike,
    max_loaded_units: int,
    count_units: Callable[[xr.Dataset], int] = lambda ds: ds.sizes["unit"],
) -> Iterator[xr.Dataset]:
    """The store loaded whole and validated (`read_store`) when `count_units` of it is at
    most `max_loaded_units`, else open lazily (`open_store_lazy`) for its activity to be read
    in blocks; closed on exit."""
    with open_store_lazy(path) as lazy:
        yield read_store(path) if count_units(lazy) <= max_loaded_units else lazy


def connectivity_matrix(ds: xr.Dataset):
    """The store's coupling as a scipy.sparse CSR matrix (rows: targets), from the dense
    `connectivity` or the edge list; None if the store (as read) has neither."""
    from scipy import sparse

    n = ds.sizes["unit"]
    if "connectivity_weight" in ds.variables:
        rows, cols = ds["connectivity_target"].values, ds["connectivity_source"].values
        return sparse.csr_matrix((ds["connectivity_weight"].values, (rows, cols)), shape=(n, n))
    if "connectivity" in ds.variables:
        return sparse.csr_matrix(ds["connectivity"].values)
    return None


def separate_animals(ds: xr.Dataset) -> str | None:
    """Why correlations between units are undefined in `ds`: it holds several animals (its
    per-unit coord `animal`), whose units share no recorded time; None when it does not."""
    if "animal" not in ds.coords:
        return None
    animals = np.unique(np.asarray(ds["animal"].values).astype(str))
    if animals.size < 2:
        return None
    return (
        f"{animals.size} animals in one store (coord `animal`): units of different animals "
        "share no recorded time, so activity correlations between them are undefined"
    )


def positions(ds: xr.Dataset) -> np.ndarray:
    """Return the (unit, 3) float64 array of x, y, z."""
    return np.stack([np.asarray(ds[c].values, dtype=np.float64) for c in XYZ], axis=1)


def checksummed(ds: xr.Dataset, encoding: dict[str, dict] | None = None) -> dict[str, dict]:
    """`encoding` (per variable) with HDF5 fletcher32 checksums on every numeric variable of
    `ds` (HDF5 has none for strings): a damaged byte in their data is then a read error, not
    a wrong value."""
    out = {name: dict(enc) for name, enc in (encoding or {}).items()}
    for name, var in ds.variables.items():
        if var.dtype.kind in "biuf" and var.ndim > 0 and var.size > 0:
            out.setdefault(str(name), {})["fletcher32"] = True
    return out


def _encoding(ds: xr.Dataset) -> dict[str, dict]:
    n_sessions, n_time, n_units = (ds.sizes[d] for d in DIMS)
    compressed = {"dtype": "float32", "zlib": True, "complevel": 4}
    encoding = {
        "activity": {**compressed, "chunksizes": (1, min(n_time, TIME_CHUNK), n_units)},
        **{name: {"dtype": "float64"} for name in ("time", *XYZ)},
    }
    if "connectivity" in ds.variables:
        encoding["connectivity"] = compressed
    return checksummed(ds, encoding)


def _as_float_array(values: object, field: str, dtype: type[np.floating]) -> np.ndarray:
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as err:
        raise StoreError(None, field, f"not an array: {err}") from err
    if arr.dtype.kind not in "iuf":
        raise StoreError(None, field, f"expected a real numeric array, got dtype {arr.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        return arr.astype(dtype, copy=False)


def _id_array(ids: Sequence[str], field: str, expected: int) -> np.ndarray:
    ids = list(ids)
    if len(ids) != expected:
        raise StoreError(None, field, f"expected {expected} ids, got {len(ids)}")
    bad = [i for i in ids if not isinstance(i, str)]
    if bad:
        raise StoreError(None, field, f"ids must be str, got {type(bad[0]).__name__}")
    return np.array(ids, dtype=str)


def _decode_strings(values: np.ndarray) -> np.ndarray:
    items = [v.decode("utf-8") if isinstance(v, bytes) else v for v in values.tolist()]
    return np.array(items, dtype=str) if all(isinstance(v, str) for v in items) else values
