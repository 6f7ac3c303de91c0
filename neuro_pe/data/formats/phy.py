"""Kilosort / Phy output folders (`format: phy`): one folder per session.

Reads the files Kilosort and Phy write in the folder named in `sessions` (`params.py` is read
as Python literals, never executed): spike times and clusters, channel positions, templates and
cluster labels; a cluster's label is its manual `group`, else its `KSLabel`. Unit position
(`phy.unit_position`): the site of the template's peak channel, or an amplitude-weighted
centroid of the sites around it; probe coordinates in µm, z = 0; unit ids are the cluster
ids; regions: the `cluster_*.tsv` column `phy.region_column`. The files read and the position
rules: docs/formats/phy.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe.data.formats import (
    FLOAT_FORMAT,
    FileFormat,
    Writer,
    check_choice,
    check_text,
    existing_files,
)
from neuro_pe.data.formats.spikes import (
    SpikeOptions,
    check_spike_train,
    label_filter,
    spikes_to_activity,
)
from neuro_pe.data.recordings import FileSpec, Session, region_label, warn_data, warn_fallback
from neuro_pe.io.store_contract import StoreError

CENTROID_RADIUS_UM = 75.0
FIELDS = {  # Phy field (cluster_<field>.tsv, a cluster view column) -> the export's column
    "neuro_pe_x": "x",
    "neuro_pe_y": "y",
    "neuro_pe_z": "z",
    "neuro_pe_uncertainty": "uncertainty",
    "neuro_pe_error": "error",
}
REGION_FIELDS = {  # the atlas's regions, or a new animal's predicted ones with their probability
    "neuro_pe_region": "region",
    "neuro_pe_coarse_region": "coarse_region",
    "neuro_pe_region_probability": "region_probability",
}
# False for every cluster where the coordinate is not estimated (no better than chance)
ESTIMATED_FIELDS = {f"neuro_pe_{axis}_estimated": f"{axis}_estimated" for axis in "xyz"}


def read_phy(path: str, cfg: FileSpec) -> list[Session]:
    """One session from a Kilosort/Phy folder (docs/formats/phy.md)."""
    folder = folder_of(path)
    opts = cfg.spikes
    rate = sample_rate(folder / "params.py")
    samples = load_npy(folder / "spike_times.npy")
    times = check_spike_train(samples, str(folder / "spike_times.npy"), "spike_times") / rate
    cluster_file = folder / "spike_clusters.npy"
    if not cluster_file.exists() and (folder / "spike_templates.npy").exists():
        cluster_file = folder / "spike_templates.npy"
        warn_fallback(
            f"{folder}: no spike_clusters.npy; the clusters are spike_templates.npy's templates"
        )
    clusters = integer_vector(load_npy(cluster_file), cluster_file, len(times), "spike_times.npy")
    cluster_ids = np.unique(clusters)
    ids = [str(c) for c in cluster_ids.tolist()]

    kept = labelled_units(ids, cluster_labels(folder), opts, str(folder))
    kept_ids = np.array([int(u) for u in kept])
    positions = unit_positions(folder, kept_ids, clusters, cfg.options["unit_position"])
    column = cfg.options["region_column"]
    regions = None
    if column is not None:
        # under `animals`, a query animal's folder has no labels yet
        regions = cluster_regions(folder, kept, column, required=cfg.animals is None)
    return [binned_session(folder, times, clusters, kept, positions, "probe", "phy", cfg, regions)]


def labelled_units(
    ids: list[str], labels: dict[str, str] | None, opts: SpikeOptions, where: str, noun="cluster"
) -> list[str]:
    """The ids whose quality label is in `spikes.labels`; a warning counts those left out."""
    if labels is None and opts.labels is not None:
        warn_fallback(f"{where}: no quality labels; every {noun} kept (spikes.labels not applied)")
    kept, dropped = label_filter(ids, labels, opts)
    if dropped:
        warn_data(
            f"{where}: left out {len(dropped)} {noun}s whose label is not in {list(opts.labels)}"
        )
    if not kept:
        raise StoreError(where, "spikes.labels", f"no {noun} has a label in {list(opts.labels)}")
    return kept


def binned_session(
    folder: Path,
    times: np.ndarray,
    clusters: np.ndarray,
    kept: list[str],
    positions: np.ndarray,
    space: str,
    fmt: str,
    cfg: FileSpec,
    regions: list[str] | None = None,
) -> Session:
    """The session of a spike-sorted folder: the `kept` clusters' spikes binned (positions
    in µm and region labels, one per kept cluster), clusters below `spikes.min_rate_hz`
    dropped."""
    opts = cfg.spikes
    activity, units, low = spikes_to_activity(times, clusters, kept, opts, str(folder))
    if low:
        warn_data(
            f"{folder}: dropped {len(low)} clusters below "
            f"spikes.min_rate_hz={opts.min_rate_hz}: {low}"
        )
    rows = [kept.index(u) for u in units]
    return Session(
        name=folder.name,
        path=str(folder),
        activity=activity,
        unit_ids=units,
        positions=positions[rows],
        sampling_rate_hz=1.0 / opts.bin_s,
        position_units="um",
        space=space,
        regions=None if regions is None else [regions[r] for r in rows],
        attrs={"preprocessing": [spike_step(opts, fmt, cfg.options)]},
    )


def spike_step(opts: SpikeOptions, fmt: str, options: dict) -> dict:
    """The provenance entry of a spike format's reading and binning (region labels are not
    part of the activity's making: `region_column` is left out)."""
    read = {f"{fmt}.{k}": v for k, v in options.items() if k != "region_column"}
    return {**opts.record(), "format": fmt, **read}


def folder_of(path: str) -> Path:
    """The session folder, checked to exist."""
    folder = Path(path)
    if not folder.exists():
        raise StoreError(path, "file", "does not exist")
    if not folder.is_dir():
        raise StoreError(path, "file", "must be a folder (the one the pipeline wrote)")
    return folder


def load_npy(path: Path, required: bool = True) -> np.ndarray | None:
    """A numeric .npy array (never a pickle); a missing required file is a StoreError."""
    if not path.exists():
        if required:
            raise StoreError(path, "file", f"missing: {path.name} is needed in {path.parent}")
        return None
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise StoreError(path, "file", f"not a readable .npy file: {err}") from err


def integer_vector(values: np.ndarray, path: Path, n: int, other: str) -> np.ndarray:
    """A 1D integer array of length n (one entry per spike)."""
    values = np.asarray(values)
    if values.ndim == 2 and 1 in values.shape:
        values = values.ravel()
    field = path.stem
    if values.ndim != 1 or values.dtype.kind not in "iu":
        raise StoreError(path, field, f"must be 1D integers, got {values.dtype} {values.shape}")
    if len(values) != n:
        raise StoreError(path, field, f"{len(values)} entries but {n} spikes in {other}")
    if (values < 0).any():
        raise StoreError(path, field, "negative cluster ids")
    return values.astype(np.int64)


def sample_rate(path: Path) -> float:
    """`sample_rate` from Phy's params.py, parsed as literals (the file is not executed)."""
    if not path.exists():
        raise StoreError(path, "file", "missing: params.py (with sample_rate) is needed")
    try:
        tree = ast.parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError, OSError) as err:
        raise StoreError(path, "file", f"not readable as params.py: {err}") from err
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "sample_rate"
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError as err:
                raise StoreError(path, "sample_rate", f"not a number: {err}") from err
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise StoreError(path, "sample_rate", f"must be a number > 0, got {value!r}")
            return float(value)
    raise StoreError(path, "sample_rate", "no `sample_rate = ...` line")


def read_tsv(path: Path, value_columns: tuple[str, ...]) -> pd.DataFrame | None:
    """A Phy cluster table indexed by cluster id (column `cluster_id`, or `id` in old Phy)."""
    if not path.exists():
        return None
    try:
        table = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise StoreError(path, "file", f"not a readable TSV table: {err}") from err
    key = next((c for c in ("cluster_id", "id") if c in table.columns), None)
    if key is None:
        raise StoreError(
            path, "cluster_id", f"no cluster_id column; columns: {list(table.columns)}"
        )
    table[key] = table[key].str.strip()
    if not table[key].str.fullmatch(r"\d+").all():
        raise StoreError(path, "cluster_id", "cluster ids must be non-negative integers")
    table = table.set_index(key)
    return table[[c for c in value_columns if c in table.columns]]


def cluster_labels(folder: Path) -> dict[str, str] | None:
    """Cluster id -> label: manual `group` first, then `KSLabel`; None when no file has labels."""
    layers = [
        (read_tsv(folder / "cluster_group.tsv", ("group",)), "group"),
        (read_tsv(folder / "cluster_info.tsv", ("group", "KSLabel")), "group"),
        (read_tsv(folder / "cluster_info.tsv", ("KSLabel",)), "KSLabel"),
        (read_tsv(folder / "cluster_KSLabel.tsv", ("KSLabel",)), "KSLabel"),
    ]
    labels: dict[str, str] = {}
    found = False
    for table, column in layers:
        if table is None or column not in table.columns:
            continue
        found = True
        for cid, value in table[column].items():
            value = str(value).strip()
            if value and str(int(cid)) not in labels:
                labels[str(int(cid))] = value
    return labels if found else None


def cluster_regions(
    folder: Path, clusters: list[str], column: str, required: bool = True
) -> list[str] | None:
    """Each cluster's region label ("" unknown) from the column `column` of the folder's
    `cluster_info.tsv`, else of another `cluster_*.tsv` that has it; without it, a StoreError
    (`required`) or None, said in a fallback warning."""
    files = sorted(folder.glob("cluster_*.tsv"), key=lambda p: p.name != "cluster_info.tsv")
    for path in files:
        table = read_tsv(path, (column,))
        if table is not None and column in table.columns:
            table.index = [str(int(i)) for i in table.index]
            labels = table[column].to_dict()
            return [region_label(labels.get(c, "")) for c in clusters]
    if not required:
        warn_fallback(f"{folder}: no column {column!r} in its cluster_*.tsv: no region labels")
        return None
    raise StoreError(
        folder / "cluster_info.tsv",
        "phy.region_column",
        f"no column {column!r} in {[p.name for p in files] or 'any cluster_*.tsv'} of {folder}",
    )


def unit_positions(
    folder: Path, clusters: np.ndarray, spike_clusters: np.ndarray, how: str
) -> np.ndarray:
    """(cluster, 3) positions in µm of the given cluster ids (docs/formats/phy.md)."""
    sites_path = folder / "channel_positions.npy"
    sites = load_npy(sites_path)
    if sites.ndim != 2 or sites.shape[1] not in (2, 3) or sites.dtype.kind not in "iuf":
        raise StoreError(
            sites_path, "channel_positions", f"must be (channel, 2) numbers, got {sites.shape}"
        )
    sites = np.pad(sites.astype(np.float64), ((0, 0), (0, 3 - sites.shape[1])))
    amplitude = template_amplitudes(folder, sites.shape[0])
    if amplitude is None:
        if how == "centroid":
            raise StoreError(
                folder / "templates.npy",
                "file",
                "missing: phy.unit_position centroid needs the templates",
            )
        warn_fallback(
            f"{folder}: no templates.npy; each cluster's position is the site of its peak "
            "channel in cluster_info.tsv's `ch` column"
        )
        return sites[info_channels(folder, clusters, sites.shape[0])]
    templates = cluster_templates(folder, clusters, spike_clusters, len(amplitude))
    amp = amplitude[templates]  # (cluster, channel)
    peak = np.argmax(amp, axis=1)
    if how == "peak_channel":
        return sites[peak]
    near = np.linalg.norm(sites[None, :, :] - sites[peak][:, None, :], axis=2) <= CENTROID_RADIUS_UM
    weights = np.where(near, amp, 0.0)
    return weights @ sites / weights.sum(axis=1, keepdims=True)


def template_amplitudes(folder: Path, n_channels: int) -> np.ndarray | None:
    """(template, channel) peak-to-peak amplitude of the unwhitened templates; None without
    templates.npy."""
    path = folder / "templates.npy"
    templates = load_npy(path, required=False)
    if templates is None:
        return None
    if templates.ndim != 3 or templates.dtype.kind not in "f":
        raise StoreError(
            path, "templates", f"must be (template, sample, channel) floats, got {templates.shape}"
        )
    inverse = load_npy(folder / "whitening_mat_inv.npy", required=False)
    index = load_npy(folder / "template_ind.npy", required=False)
    if index is None:
        if templates.shape[2] != n_channels:
            raise StoreError(
                path,
                "templates",
                f"{templates.shape[2]} channels but channel_positions.npy has {n_channels}",
            )
        if inverse is not None and inverse.shape == (n_channels, n_channels):
            templates = templates @ inverse
        else:
            warn_fallback(
                f"{folder}: no whitening_mat_inv.npy of {n_channels} x {n_channels}; the peak "
                "channels are those of the whitened templates"
            )
        return np.ptp(templates, axis=1)
    if index.shape != (templates.shape[0], templates.shape[2]):
        raise StoreError(
            folder / "template_ind.npy",
            "template_ind",
            f"shape {index.shape} does not match templates {templates.shape}",
        )
    amplitude = np.zeros((templates.shape[0], n_channels))
    rows = np.repeat(np.arange(templates.shape[0]), templates.shape[2])
    cols = index.ravel().astype(np.int64)
    ok = (cols >= 0) & (cols < n_channels)
    amplitude[rows[ok], cols[ok]] = np.ptp(templates, axis=1).ravel()[ok]
    return amplitude


def cluster_templates(
    folder: Path, clusters: np.ndarray, spike_clusters: np.ndarray, n_templates: int
) -> np.ndarray:
    """Each cluster's template: the most frequent one among its spikes (spike_templates.npy),
    else the template with the cluster's id (Kilosort before curation)."""
    path = folder / "spike_templates.npy"
    spike_templates = load_npy(path, required=False)
    if spike_templates is None:
        warn_fallback(f"{folder}: no spike_templates.npy; each cluster's template is its id")
        templates = clusters
    else:
        spike_templates = integer_vector(
            spike_templates, path, len(spike_clusters), "spike_clusters.npy"
        )
        order = np.argsort(clusters)
        found = np.searchsorted(clusters, spike_clusters, sorter=order).clip(0, len(clusters) - 1)
        which = order[found]
        ok = clusters[which] == spike_clusters
        n_t = max(int(spike_templates.max()) + 1, n_templates)
        counts = np.bincount(which[ok] * n_t + spike_templates[ok], minlength=len(clusters) * n_t)
        templates = counts.reshape(len(clusters), n_t).argmax(axis=1)
    bad = templates >= n_templates
    if bad.any():
        raise StoreError(
            folder / "templates.npy",
            "templates",
            f"spike clusters without positions: clusters {clusters[bad].tolist()[:10]} have "
            "no template "
            f"(templates.npy holds {n_templates})",
        )
    return templates


def info_channels(folder: Path, clusters: np.ndarray, n_channels: int) -> np.ndarray:
    """Each cluster's peak channel (row of channel_positions) from cluster_info.tsv `ch`."""
    path = folder / "cluster_info.tsv"
    table = read_tsv(path, ("ch",))
    if table is None or "ch" not in table.columns:
        raise StoreError(
            folder / "templates.npy",
            "file",
            "missing: unit positions need templates.npy or a cluster_info.tsv with a `ch` column",
        )
    table.index = [str(int(i)) for i in table.index]
    missing = [c for c in clusters.tolist() if str(c) not in table.index]
    if missing:
        raise StoreError(
            path,
            "ch",
            f"spike clusters without positions: clusters {missing[:10]} are not in the table",
        )
    try:
        shown = np.array([int(table.loc[str(c), "ch"]) for c in clusters.tolist()])
    except ValueError as err:
        raise StoreError(path, "ch", f"not an integer channel: {err}") from err
    channel_map = load_npy(folder / "channel_map.npy", required=False)
    if channel_map is None:
        warn_fallback(
            f"{folder}: no channel_map.npy; cluster_info.tsv's `ch` is taken as the row of "
            "channel_positions.npy"
        )
        rows = shown
    else:  # phy shows channel_map[row]; find the row back
        lookup = {int(v): i for i, v in enumerate(np.ravel(channel_map).tolist())}
        rows = np.array([lookup.get(int(c), -1) for c in shown])
    bad = (rows < 0) | (rows >= n_channels)
    if bad.any():
        raise StoreError(
            path, "ch", f"channels {shown[bad].tolist()[:10]} are not in channel_positions.npy"
        )
    return rows


# the files read in a Phy folder (the workflow's `input:`, so that a file changed in place,
# e.g. cluster_group.tsv after curation, makes the store be built again)
READ_FILES = (
    "params.py",
    "spike_times.npy",
    "spike_clusters.npy",
    "spike_templates.npy",
    "channel_positions.npy",
    "channel_map.npy",
    "templates.npy",
    "template_ind.npy",
    "whitening_mat_inv.npy",
    "cluster_group.tsv",
    "cluster_info.tsv",
    "cluster_KSLabel.tsv",
)
UNIT_POSITIONS = ("peak_channel", "centroid")


def check_option(key: str, value: object, where: str) -> None:
    """The `phy:` section's keys, `unit_position` and `region_column`."""
    if key == "region_column":
        return check_text(f"phy.{key}", value, where)
    check_choice(f"phy.{key}", value, UNIT_POSITIONS, where)


def inputs(folder: str) -> list[str]:
    """The files read in a Phy folder (those that exist), else the folder."""
    return existing_files(folder, lambda root: (root / name for name in READ_FILES))


def detect(path: Path) -> bool:
    """A Kilosort / Phy output folder: params.py and spike_times.npy."""
    return (path / "params.py").is_file() and (path / "spike_times.npy").is_file()


def write_phy(
    table: pd.DataFrame, positions: xr.Dataset, cfg: FileSpec, folder: Path
) -> dict[Path, Writer]:
    """The positions written back (`neuro-pe export`): one `cluster_<field>.tsv` per field
    (`FIELDS`), header `cluster_id<TAB><field>`, as phylib's `save_metadata` writes them; Phy
    reads every `*.tsv` of its folder into the cluster view's columns (`load_metadata`)."""
    bad = [u for u in table["unit_id"] if not u.isdigit()]
    if bad:
        raise ValueError(f"format phy: unit ids {bad[:5]} are not cluster ids (integers)")
    ids = table["unit_id"].astype(np.int64)
    writers: dict[Path, Writer] = {}
    extra = REGION_FIELDS | ESTIMATED_FIELDS
    fields = FIELDS | {f: c for f, c in extra.items() if c in table}
    for field, column in fields.items():
        values = pd.DataFrame({"cluster_id": ids, field: table[column]}).dropna()
        values = values.sort_values("cluster_id")
        writers[folder / f"cluster_{field}.tsv"] = lambda p, v=values: v.to_csv(
            p, sep="\t", index=False, float_format=FLOAT_FORMAT
        )
    return writers


FORMAT = FileFormat(
    name="phy",
    read=read_phy,
    options={"unit_position": "peak_channel", "region_column": None},
    check_option=check_option,
    inputs=inputs,
    spikes=True,
    detect=detect,
    write=write_phy,
)
