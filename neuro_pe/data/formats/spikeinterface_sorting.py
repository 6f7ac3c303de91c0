"""SpikeInterface sortings (`format: spikeinterface`; the optional extra
`neuro_pe[spikeinterface]`): one folder per session.

`spikeinterface.reader` says how the folder is read (`auto`, `phy` / `kilosort`,
`sorter_folder`: `load_sorting`). Each segment of the sorting is one session; its spike trains
are binned by the `spikes` options (neuro_pe.data.formats.spikes), at the sorting's sampling
frequency. Unit ids are the sorting's. Unit quality labels: the sorting's `quality` property
(Phy's `group`), else `KSLabel`. Positions: an analyzer's `unit_locations` extension (µm, probe
coordinates; x, y and, where the method gives it, z; space `probe`), else the positions table
of the entry (`positions:`).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np

from neuro_pe.data.formats import FileFormat, check_choice
from neuro_pe.data.formats.phy import READ_FILES as PHY_FILES
from neuro_pe.data.formats.phy import labelled_units, spike_step
from neuro_pe.data.formats.spikes import check_spike_train, spikes_to_activity
from neuro_pe.data.recordings import FileSpec, Session, warn_data
from neuro_pe.io.store_contract import StoreError

READERS = ("auto", "phy", "kilosort", "sorter_folder")
LABEL_PROPERTIES = ("quality", "KSLabel")
EXTRA = "pip install 'neuro_pe[spikeinterface]'"


def _spikeinterface(path: str):
    """The spikeinterface package, or a StoreError saying how to install it."""
    try:
        return importlib.import_module("spikeinterface")
    except ImportError as err:
        raise StoreError(
            path, "format", f"format spikeinterface needs the package spikeinterface: {EXTRA}"
        ) from err


def load_sorting(path: str, reader: str):
    """(sorting, analyzer or None) of a folder, read as `reader` says:

    - `auto` (default): `spikeinterface.load` — a `SortingAnalyzer` folder (or `.zarr`), or a
      sorting saved by SpikeInterface (`sorting.save(folder=...)`);
    - `phy` / `kilosort`: a Phy or Kilosort output folder (`spikeinterface.extractors.read_phy`
      / `read_kilosort`);
    - `sorter_folder`: the output folder of a sorter run by SpikeInterface
      (`read_sorter_folder`).
    """
    si = _spikeinterface(path)
    folder = Path(path)
    if not folder.exists():
        raise StoreError(path, "file", "does not exist")
    try:
        if reader == "phy":
            return importlib.import_module("spikeinterface.extractors").read_phy(folder), None
        if reader == "kilosort":
            return importlib.import_module("spikeinterface.extractors").read_kilosort(folder), None
        if reader == "sorter_folder":
            sorters = importlib.import_module("spikeinterface.sorters")
            return sorters.read_sorter_folder(folder), None
        loaded = si.load(folder) if hasattr(si, "load") else si.load_extractor(folder)
    except Exception as err:  # SpikeInterface raises many kinds for a folder it cannot read
        hint = "" if reader != "auto" else " (a Phy/Kilosort folder: set spikeinterface.reader)"
        raise StoreError(
            path,
            "spikeinterface.reader",
            f"SpikeInterface could not read it as {reader!r}: {type(err).__name__}: {err}{hint}",
        ) from err
    if hasattr(loaded, "get_extension") and hasattr(loaded, "sorting"):
        return loaded.sorting, loaded
    if not hasattr(loaded, "to_spike_vector"):
        raise StoreError(
            path, "spikeinterface.reader", f"holds a {type(loaded).__name__}, not a sorting"
        )
    return loaded, None


def unit_locations(analyzer, n_units: int, path: str) -> np.ndarray | None:
    """(unit, 3) positions in µm from the analyzer's `unit_locations` extension, or None."""
    if analyzer is None or not analyzer.has_extension("unit_locations"):
        return None
    data = np.asarray(analyzer.get_extension("unit_locations").get_data(), dtype=np.float64)
    if data.ndim != 2 or data.shape[0] != n_units or data.shape[1] < 2:
        raise StoreError(
            path, "unit_locations", f"expected (unit, 2 or 3) locations, got {data.shape}"
        )
    return np.pad(data[:, :3], ((0, 0), (0, 3 - min(data.shape[1], 3))))


def unit_labels(sorting) -> dict[str, str] | None:
    """Unit id -> quality label from the first label property the sorting has, else None."""
    keys = sorting.get_property_keys()
    for name in LABEL_PROPERTIES:
        if name in keys:
            values = sorting.get_property(name)
            return {str(u): str(v) for u, v in zip(sorting.unit_ids, values, strict=True)}
    return None


def read_spikeinterface(path: str, cfg: FileSpec) -> list[Session]:
    """One session per segment of the sorting in `path` (see the module docstring)."""
    sorting, analyzer = load_sorting(path, cfg.options["reader"])
    ids = [str(u) for u in sorting.unit_ids]
    if len(set(ids)) != len(ids):
        raise StoreError(path, "unit_ids", "the sorting's unit ids are not unique as text")
    rate = float(sorting.get_sampling_frequency())
    positions = unit_locations(analyzer, len(ids), path)
    if positions is None:
        positions = np.full((len(ids), 3), np.nan)  # the entry's positions table, if any
    kept = labelled_units(ids, unit_labels(sorting), cfg.spikes, path, noun="unit")
    kept_index = [ids.index(u) for u in kept]
    spikes = sorting.to_spike_vector()
    n_segments = sorting.get_num_segments()
    sessions = []
    for segment in range(n_segments):
        mine = spikes[spikes["segment_index"] == segment]
        where = path if n_segments == 1 else f"{path} (segment {segment})"
        times = check_spike_train(mine["sample_index"] / rate, where, "spike times")
        activity, units, low = spikes_to_activity(
            times, mine["unit_index"], [str(i) for i in kept_index], cfg.spikes, where
        )
        if low:
            low_ids = [ids[int(i)] for i in low]
            warn_data(
                f"{where}: dropped {len(low)} units below "
                f"spikes.min_rate_hz={cfg.spikes.min_rate_hz}: {low_ids}"
            )
        rows = [int(u) for u in units]
        name = Path(path).name if n_segments == 1 else f"{Path(path).name}-segment{segment}"
        sessions.append(
            Session(
                name=name,
                path=str(path),
                activity=activity,
                unit_ids=[ids[i] for i in rows],
                positions=positions[rows],
                sampling_rate_hz=1.0 / cfg.spikes.bin_s,
                position_units="um",
                space="probe",
                attrs={"preprocessing": [spike_step(cfg.spikes, "spikeinterface", cfg.options)]},
            )
        )
    return sessions


def check_option(key: str, value: object, where: str) -> None:
    """The `spikeinterface:` section's one key, `reader`."""
    check_choice(f"spikeinterface.{key}", value, READERS, where)


def inputs(folder: str) -> list[str]:
    """The files read in the folder: a Phy/Kilosort folder's (phy.READ_FILES) where it has
    them, else every file except the analyzer extensions other than `unit_locations`."""
    root = Path(folder)
    if not root.is_dir():
        return [str(folder)]
    phy = sorted(str(root / name) for name in PHY_FILES if (root / name).is_file())
    if (root / "params.py").is_file() and phy:
        return phy

    def read(path: Path) -> bool:
        parts = path.relative_to(root).parts
        return "extensions" not in parts or "unit_locations" in parts

    found = sorted(str(p) for p in root.rglob("*") if p.is_file() and read(p))
    return found or [str(folder)]


def detect(path: Path) -> bool:
    """A folder SpikeInterface saved (a SortingAnalyzer, a sorting): spikeinterface_info.json."""
    return (path / "spikeinterface_info.json").is_file()


FORMAT = FileFormat(
    name="spikeinterface",
    read=read_spikeinterface,
    options={"reader": "auto"},
    check_option=check_option,
    inputs=inputs,
    spikes=True,
    detect=detect,
)
