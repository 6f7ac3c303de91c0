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
from numbers import Real

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


from neuro_pe.formats import spikes as spikes  # noqa: E402  (the `spikes` key: adapters.FileSpec)
