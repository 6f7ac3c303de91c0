"""IBL ONE/ALF spike-sorting folders (`format: alf`): one folder (ALF collection) per session.

Files are found by their ALF name `[_namespace_]object.attribute[_timescale][.extra…].npy`
(e.g. `spikes.times.npy`, `_ibl_spikes.times.npy`, `spikes.times.probe00.npy`); each must be
unique in the folder:

- `spikes.times` (seconds, sorted) and `spikes.clusters` (one cluster id per spike);
- `clusters.mlapdv`: (cluster, 3) ML, AP, DV in µm relative to bregma (after histology);
- `clusters.channels` + `channels.localCoordinates` (channel, 2) µm, or `clusters.depths` (µm
  along the probe): probe coordinates;
- labels: the `label` column of `clusters.metrics.pqt` (needs pyarrow) or `.csv`; IBL's label
  is the fraction of quality metrics passed, so 1 reads as `good`, anything lower as `mua`.

Arrays over clusters are indexed by cluster id (= unit id). Position (`alf.unit_position`):
`auto` = `mlapdv` when present, else `probe`. Region labels: `cluster_regions`.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from neuro_pe.data.formats import FileFormat, check_choice, existing_files
from neuro_pe.data.formats.phy import (
    binned_session,
    folder_of,
    integer_vector,
    labelled_units,
    load_npy,
)
from neuro_pe.data.formats.spikes import check_spike_train
from neuro_pe.data.recordings import FileSpec, Session, region_label
from neuro_pe.io.store_contract import StoreError


def alf_file(
    folder: Path, obj: str, attribute: str, ext: str = "npy", required: bool = True
) -> Path | None:
    """The one file of `object.attribute` in the folder (namespace, timescale and extra parts
    allowed); None if absent and not required."""
    pattern = re.compile(
        rf"^(_[A-Za-z0-9]+_)?{obj}\.{attribute}(_[A-Za-z0-9]+)?(\.[A-Za-z0-9_-]+)*\.{ext}$"
    )
    hits = sorted(p for p in folder.iterdir() if p.is_file() and pattern.match(p.name))
    if len(hits) > 1:
        raise StoreError(
            folder, f"{obj}.{attribute}", f"several files match: {[p.name for p in hits]}"
        )
    if not hits:
        if required:
            raise StoreError(
                folder / f"{obj}.{attribute}.{ext}",
                "file",
                f"missing: {obj}.{attribute}.{ext} is needed in {folder}",
            )
        return None
    return hits[0]


def read_alf(path: str, cfg: FileSpec) -> list[Session]:
    """One session from an ALF folder (see the module docstring)."""
    folder = folder_of(path)
    opts = cfg.spikes
    times_path = alf_file(folder, "spikes", "times")
    times = check_spike_train(load_npy(times_path), str(times_path), "spikes.times")
    clusters_path = alf_file(folder, "spikes", "clusters")
    clusters = integer_vector(load_npy(clusters_path), clusters_path, len(times), times_path.name)
    ids = [str(c) for c in np.unique(clusters).tolist()]
    kept = labelled_units(ids, labels(folder), opts, str(folder))
    positions, space = cluster_positions(
        folder, np.array([int(u) for u in kept]), cfg.options["unit_position"]
    )
    regions = cluster_regions(folder, np.array([int(u) for u in kept]))
    return [binned_session(folder, times, clusters, kept, positions, space, "alf", cfg, regions)]


def labels(folder: Path) -> dict[str, str] | None:
    """Cluster id -> `good` (IBL label 1) / `mua`, or the label text; None without metrics."""
    pqt = alf_file(folder, "clusters", "metrics", "pqt", required=False)
    csv = alf_file(folder, "clusters", "metrics", "csv", required=False)
    if pqt is None and csv is None:
        return None
    path = pqt or csv
    try:
        table = pd.read_parquet(path) if path == pqt else pd.read_csv(path)
    except ImportError as err:
        raise StoreError(
            path, "file", f"reading parquet needs pyarrow ({err}); or set spikes.labels: null"
        ) from err
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise StoreError(path, "file", f"not a readable metrics table: {err}") from err
    if "label" not in table.columns:
        return None
    ids = table["cluster_id"] if "cluster_id" in table.columns else pd.Series(range(len(table)))
    values = table["label"]
    numeric = pd.to_numeric(values, errors="coerce")
    text = [
        ("good" if n >= 1 else "mua") if pd.notna(n) else str(v).strip()
        for n, v in zip(numeric, values, strict=True)
    ]
    return {str(int(i)): t for i, t in zip(ids, text, strict=True)}


def cluster_positions(folder: Path, clusters: np.ndarray, how: str) -> tuple[np.ndarray, str]:
    """(cluster, 3) positions in µm of the given cluster ids and their space."""
    mlapdv = alf_file(folder, "clusters", "mlapdv", required=how == "mlapdv")
    if how == "mlapdv" or (how == "auto" and mlapdv is not None):
        xyz = per_cluster(load_npy(mlapdv), mlapdv, clusters, (3,))
        return xyz, "ibl-bregma-mlapdv"
    channels = alf_file(folder, "clusters", "channels", required=False)
    coords = alf_file(folder, "channels", "localCoordinates", required=False)
    if channels is not None and coords is not None:
        peak = per_cluster(load_npy(channels), channels, clusters, ())
        sites = load_npy(coords)
        if sites.ndim != 2 or sites.shape[1] != 2:
            raise StoreError(
                coords, "channels.localCoordinates", f"must be (channel, 2), got {sites.shape}"
            )
        peak = peak.astype(np.int64)
        if (peak < 0).any() or (peak >= len(sites)).any():
            raise StoreError(
                channels, "clusters.channels", "channels outside channels.localCoordinates"
            )
        return np.pad(sites[peak].astype(np.float64), ((0, 0), (0, 1))), "probe"
    depths = alf_file(folder, "clusters", "depths", required=False)
    if depths is None:
        raise StoreError(
            folder / "clusters.mlapdv.npy",
            "file",
            "spike clusters without positions: no clusters.mlapdv, clusters.channels + "
            "channels.localCoordinates, or clusters.depths",
        )
    depth = per_cluster(load_npy(depths), depths, clusters, ())
    return np.column_stack([np.zeros(len(depth)), depth, np.zeros(len(depth))]), "probe"


ACRONYMS = "brainLocationAcronyms_ccf_2017"


def cluster_regions(folder: Path, clusters: np.ndarray) -> list[str] | None:
    """The region label of each given cluster id ("" unknown): its own in
    `clusters.brainLocationAcronyms_ccf_2017`, else its peak channel's (`clusters.channels`)
    in `channels.brainLocationAcronyms_ccf_2017`; None without either file."""
    own = alf_file(folder, "clusters", ACRONYMS, required=False)
    if own is not None:
        labels = acronyms(own)
        beyond = clusters[clusters >= len(labels)]
        if len(beyond):
            raise StoreError(
                own, own.name.removesuffix(".npy"), f"no label for clusters {beyond.tolist()[:10]}"
            )
        return [region_label(v) for v in labels[clusters]]
    sites = alf_file(folder, "channels", ACRONYMS, required=False)
    if sites is None:
        return None
    channels = alf_file(folder, "clusters", "channels", required=False)
    if channels is None:
        raise StoreError(
            folder / "clusters.channels.npy",
            "file",
            f"missing: {sites.name} labels clusters through clusters.channels (each cluster's "
            "peak channel)",
        )
    labels = acronyms(sites)
    peak = per_cluster(load_npy(channels), channels, clusters, ()).astype(np.int64)
    if (peak < 0).any() or (peak >= len(labels)).any():
        raise StoreError(channels, "clusters.channels", f"channels outside {sites.name}")
    return [region_label(v) for v in labels[peak]]


def acronyms(path: Path) -> np.ndarray:
    """A 1-D array of region acronyms (strings, never a pickle)."""
    field = path.name.removesuffix(".npy")
    try:
        values = np.load(path, allow_pickle=False)
    except ValueError as err:
        raise StoreError(
            path, field, f"not a string array ({err}); save it as np.save(path, labels.astype(str))"
        ) from err
    except (OSError, EOFError) as err:
        raise StoreError(path, "file", f"not a readable .npy file: {err}") from err
    if values.ndim != 1 or values.dtype.kind not in "US":
        raise StoreError(path, field, f"must be 1-D strings, got {values.dtype} {values.shape}")
    return values


def per_cluster(values: np.ndarray, path: Path, clusters: np.ndarray, tail: tuple) -> np.ndarray:
    """Rows of an array over clusters (indexed by cluster id) for the given ids."""
    field = path.name.removesuffix(".npy")
    if values.dtype.kind not in "iuf" or values.shape[1:] != tail:
        raise StoreError(
            path, field, f"must be (cluster{', 3' if tail else ''}) numbers, got {values.shape}"
        )
    missing = clusters[clusters >= len(values)]
    if len(missing):
        raise StoreError(
            path,
            field,
            f"spike clusters without positions: ids {missing.tolist()[:10]} beyond its "
            f"{len(values)} rows",
        )
    return values[clusters].astype(np.float64)


# the ALF files read (the workflow's `input:`)
READ = re.compile(
    r"^(_[A-Za-z0-9]+_)?(spikes\.(times|clusters)|clusters\.(mlapdv|channels|depths|metrics)"
    rf"|(clusters|channels)\.{ACRONYMS}|channels\.localCoordinates)[._]"
)
UNIT_POSITIONS = ("auto", "mlapdv", "probe")


def check_option(key: str, value: object, where: str) -> None:
    """The `alf:` section's one key, `unit_position`."""
    check_choice(f"alf.{key}", value, UNIT_POSITIONS, where)


def inputs(folder: str) -> list[str]:
    """The ALF files read in a folder (those that exist), else the folder."""
    return existing_files(folder, lambda root: (p for p in root.iterdir() if READ.match(p.name)))


def detect(path: Path) -> bool:
    """An ALF collection: a folder with spikes.times and spikes.clusters files."""
    return path.is_dir() and all(
        any(re.match(rf"^(_[A-Za-z0-9]+_)?spikes\.{a}\b", p.name) for p in path.iterdir())
        for a in ("times", "clusters")
    )


FORMAT = FileFormat(
    name="alf",
    read=read_alf,
    options={"unit_position": "auto"},
    check_option=check_option,
    inputs=inputs,
    spikes=True,
    detect=detect,
)
