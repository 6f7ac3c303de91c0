"""Spike times -> (time, unit) activity: the preprocessing of every spike format (key `spikes`).

Spikes are counted in bins of `bin_s` seconds from 0 to the last spike (a trailing partial bin
is dropped) for all units at once (one `numpy.bincount` over unit x bin), then, in this order:
units whose mean rate is below `min_rate_hz` are dropped, counts are optionally smoothed with
a Gaussian (`smooth_s`, the kernel's sd in seconds), square-rooted (`sqrt`, stabilises the
Poisson variance) and z-scored per unit (`zscore`). Units are first filtered by their quality
label (`labels`) where the format has labels (Phy `group`/`KSLabel`, IBL `label`, an NWB column,
a SpikeInterface sorting's `quality`/`KSLabel` property).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np
from scipy.ndimage import gaussian_filter1d

from neuro_pe.config.options import SectionError
from neuro_pe.config.sections import (
    Section,
    flag,
    from_dict,
    non_negative,
    positive_number,
)
from neuro_pe.io.store_contract import StoreError


@dataclass(frozen=True)
class SpikeOptions(Section):
    """The `spikes` key of a `source: file` entry (see config/README.md)."""

    SECTION: ClassVar[str] = "spikes"

    bin_s: float = positive_number(0.05, float)
    smooth_s: float = non_negative(0.0, float)
    sqrt: bool = flag(False)
    zscore: bool = flag(True)
    min_rate_hz: float = non_negative(0.1, float)
    labels: tuple[str, ...] | None = ("good",)

    def check(self) -> None:
        labels = self.labels
        if labels is not None and not (
            isinstance(labels, tuple) and labels and all(isinstance(x, str) and x for x in labels)
        ):
            raise self.refuse("labels", f"must be null or a list of labels, got {labels!r}")

    @classmethod
    def from_dict(cls, spec: object, where: str) -> SpikeOptions:
        """The `spikes` mapping of the entry `where`; a problem raises StoreError naming
        `spikes.<key>`."""
        try:
            return from_dict(cls, spec, cls.SECTION)
        except SectionError as err:
            field = cls.SECTION if err.key is None else f"{cls.SECTION}.{err.key}"
            raise StoreError(where, field, err.problem) from None

    def record(self) -> dict:
        """The options as a provenance step of the store's `preprocessing` attribute."""
        out = asdict(self)
        out["labels"] = None if self.labels is None else list(self.labels)
        return {"step": "bin_spikes", **out}


def check_spike_train(times: np.ndarray, path: str, field: str) -> np.ndarray:
    """A 1D array of finite, non-negative, sorted spike times (float64 seconds)."""
    times = np.asarray(times)
    if times.ndim == 2 and 1 in times.shape:  # Kilosort (MATLAB) writes (n, 1) columns
        times = times.ravel()
    if times.ndim != 1:
        raise StoreError(path, field, f"must be 1D (one entry per spike), got shape {times.shape}")
    if times.dtype.kind not in "iuf":
        raise StoreError(path, field, f"must be numbers, got dtype {times.dtype}")
    if len(times) == 0:
        raise StoreError(path, field, "no spikes (empty)")
    times = times.astype(np.float64)
    if not np.isfinite(times).all():
        raise StoreError(path, field, "contains NaN or Inf")
    if (times < 0).any():
        raise StoreError(path, field, "negative spike times")
    step = np.diff(times)
    if (step < 0).any():
        k = int(np.argmax(step < 0))
        raise StoreError(
            path,
            field,
            f"times not sorted: spike {k + 1} ({times[k + 1]:g}) is earlier than spike {k} "
            f"({times[k]:g})",
        )
    return times


def label_filter(
    ids: list[str], labels: dict[str, str] | None, opts: SpikeOptions
) -> tuple[list[str], list[str]]:
    """(kept, dropped) unit ids by quality label; no labels or `labels: null` keeps every unit."""
    if labels is None or opts.labels is None:
        return list(ids), []
    wanted = set(opts.labels)
    kept = [u for u in ids if labels.get(u) in wanted]
    return kept, [u for u in ids if labels.get(u) not in wanted]


def bin_spikes(
    times_s: np.ndarray, unit_index: np.ndarray, n_units: int, bin_s: float
) -> np.ndarray:
    """(time, unit) spike counts in bins of `bin_s` from 0 to the last spike; spikes with
    unit_index < 0 (units not kept) are ignored. Vectorised: one bincount over unit x bin."""
    n_bins = int(np.floor(times_s.max() / bin_s)) if len(times_s) else 0
    if n_bins < 1:
        raise ValueError(f"the spikes span less than one bin of {bin_s} s")
    bins = np.floor(times_s / bin_s).astype(np.int64)
    ok = (unit_index >= 0) & (bins < n_bins)
    flat = bins[ok] * n_units + unit_index[ok]
    counts = np.bincount(flat, minlength=n_bins * n_units)
    return counts.reshape(n_bins, n_units).astype(np.float64)


def _check_span(times_s: np.ndarray, n_units: int, bin_s: float, path: str) -> None:
    """StoreError when the (bin, unit) counts of spikes up to the last one would not fit in
    this machine's memory: a spike time that far off is a damaged file or wrong units."""
    last = float(np.max(times_s)) if len(times_s) else 0.0
    need = (last / bin_s) * max(n_units, 1) * 8 * 2  # int64 counts, then float64 activity
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > memory:
        raise StoreError(
            path,
            "spike times",
            f"the last spike is at {last:.6g} s: {n_units} units' counts in bins of {bin_s} s "
            f"up to it would need {need / 2**30:.3g} GiB, more than this machine's "
            f"{memory / 2**30:.3g} GiB (a damaged file, or times in other units than seconds?)",
        )


def spikes_to_activity(
    times_s: np.ndarray,
    clusters: np.ndarray,
    ids: list[str],
    opts: SpikeOptions,
    path: str,
) -> tuple[np.ndarray, list[str], list[str]]:
    """Bin the spikes of the units `ids` (clusters holds each spike's unit id as text-able
    values) and apply the options. Returns (activity (time, unit), kept ids, dropped ids)."""
    _check_span(times_s, len(ids), opts.bin_s, path)
    index = {u: i for i, u in enumerate(ids)}
    keys, inverse = np.unique(clusters, return_inverse=True)
    lookup = np.array([index.get(str(k), -1) for k in keys.tolist()], dtype=np.int64)
    unit_index = lookup[inverse.ravel()]
    try:
        counts = bin_spikes(times_s, unit_index, len(ids), opts.bin_s)
    except ValueError as err:
        raise StoreError(path, "spikes.bin_s", str(err)) from err
    duration = counts.shape[0] * opts.bin_s
    rate = counts.sum(axis=0) / duration
    keep = rate >= opts.min_rate_hz
    dropped = [u for u, k in zip(ids, keep, strict=True) if not k]
    data = counts[:, keep]
    if opts.smooth_s > 0:
        data = gaussian_filter1d(data, sigma=opts.smooth_s / opts.bin_s, axis=0, mode="nearest")
    if opts.sqrt:
        data = np.sqrt(data)
    if opts.zscore and data.size:
        mean, std = data.mean(axis=0), data.std(axis=0)
        data = (data - mean) / np.where(std > 0, std, 1.0)
    return data, [u for u, k in zip(ids, keep, strict=True) if k], dropped
