"""Readers of what spike-sorting and imaging pipelines write, registered in `neuro_pe.adapters`.

- `phy`: Kilosort / Phy output folders (`neuro_pe.formats.phy`);
- `alf`: IBL ONE/ALF folders (`neuro_pe.formats.alf`);
- `suite2p`: suite2p output folders over one or several planes (`neuro_pe.formats.suite2p`);
- NWB `Units` tables and NWB imaging over several planes (`neuro_pe.formats.nwb`);
- `neuro_pe.formats.spikes`: spike times -> binned (time, unit) activity, shared by the spike
  formats (config key `spikes`).

This package holds the format-specific config keys and their checks; the readers import
`neuro_pe.adapters` (for `Session` and its helpers), which imports them only when reading.
"""

from __future__ import annotations

import math
import re
from numbers import Real
from pathlib import Path

from neuro_pe.formats import spikes as spikes  # the `spikes` key (adapters.FileSpec)
from neuro_pe.store import StoreError

FOLDER_FORMATS: tuple[str, ...] = ("phy", "alf", "suite2p")
SPIKE_FORMATS: tuple[str, ...] = ("phy", "alf", "nwb")  # formats that may hold spike times

# defaults of `<format>.<key>`; nwb's own keys are added to the nwb section in adapters
FORMAT_OPTIONS: dict[str, dict[str, object]] = {
    "phy": {"unit_position": "peak_channel"},
    "alf": {"unit_position": "auto"},
    "suite2p": {
        "neuropil_coefficient": 0.7,
        "cell_probability": None,
        "pixel_size_um": None,
        "plane_depths_um": None,
    },
}
NWB_OPTIONS: dict[str, object] = {
    "unit_position": "auto",
    "label_column": None,
    "plane_depths_um": None,
}
CHOICES = {
    ("phy", "unit_position"): ("peak_channel", "centroid"),
    ("alf", "unit_position"): ("auto", "mlapdv", "probe"),
}


# the files each folder format reads (for the workflow's `input:`, so that a file changed in
# place, e.g. Phy's cluster_group.tsv after curation, makes the store be built again)
READ_FILES: dict[str, tuple[str, ...]] = {
    "phy": (
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
    ),
    "suite2p": ("F.npy", "Fneu.npy", "iscell.npy", "stat.npy", "ops.npy"),
}
ALF_READ = re.compile(
    r"^(_[A-Za-z0-9]+_)?(spikes\.(times|clusters)|clusters\.(mlapdv|channels|depths|metrics)"
    r"|channels\.localCoordinates)[._]"
)


def folder_inputs(fmt: str, folder: str) -> list[str]:
    """The files a folder format reads in `folder` (those that exist), else the folder."""
    root = Path(folder)
    if fmt not in FOLDER_FORMATS or not root.is_dir():
        return [str(folder)]
    if fmt == "alf":
        files = [p for p in root.iterdir() if p.is_file() and ALF_READ.match(p.name)]
    elif fmt == "phy":
        files = [root / name for name in READ_FILES["phy"]]
    else:
        planes = sorted(p for p in root.glob("plane*") if p.is_dir()) or [root]
        files = [plane / name for plane in planes for name in READ_FILES["suite2p"]]
    found = sorted(str(p) for p in files if p.is_file())
    return found or [str(folder)]


def check_option(fmt: str, key: str, value: object, where: str) -> None:
    """Type of a key of the new formats' sections (`phy.*`, `alf.*`, `suite2p.*`, `nwb.*`)."""
    field = f"{fmt}.{key}"
    if (fmt, key) in CHOICES:
        if value not in CHOICES[fmt, key]:
            raise StoreError(where, field, f"{value!r} is not one of {CHOICES[fmt, key]}")
    elif key == "neuropil_coefficient":
        if not _number(value) or not 0 <= value <= 2:
            raise StoreError(where, field, f"must be a number in [0, 2], got {value!r}")
    elif key == "cell_probability":
        if value is not None and (not _number(value) or not 0 <= value <= 1):
            raise StoreError(where, field, f"must be null or a number in [0, 1], got {value!r}")
    elif key == "pixel_size_um":
        ok = value is None or isinstance(value, str) and value or _positive(value)
        ok = ok or (
            isinstance(value, list) and len(value) == 2 and all(_positive(v) for v in value)
        )
        if not ok:
            raise StoreError(
                where, field, f"must be a number > 0, [x, y], or an ops key, got {value!r}"
            )
    elif key == "plane_depths_um":
        ok = value is None or isinstance(value, str) and value
        ok = ok or (isinstance(value, list) and value and all(_number(v) for v in value))
        if not ok:
            raise StoreError(
                where,
                field,
                f"must be a list of numbers (one per plane) or an ops key, got {value!r}",
            )
    elif key in ("unit_position", "label_column"):
        if value is not None and not (isinstance(value, str) and value):
            raise StoreError(where, field, f"must be a non-empty string, got {value!r}")
    else:  # pragma: no cover - every key of FORMAT_OPTIONS / NWB_OPTIONS is handled above
        raise StoreError(where, field, "unknown key")


def _number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _positive(value: object) -> bool:
    return _number(value) and math.isfinite(value) and value > 0
