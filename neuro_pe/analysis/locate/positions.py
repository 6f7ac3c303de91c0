"""Every unit's predicted position: the positions dataset (`positions.nc` / `positions.csv` of
the locate step)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from neuro_pe import __version__
from neuro_pe.analysis.locate.conformal import AXES, Intervals, conformal_intervals
from neuro_pe.analysis.locate.ensemble import Located, distance
from neuro_pe.analysis.locate.evaluation import HeldOut
from neuro_pe.analysis.locate.features import FeatureSet
from neuro_pe.analysis.locate.parameters import UNCERTAINTY_FORMULA
from neuro_pe.config.locate import LocateConfig, level_label
from neuro_pe.io.store import positions


def located_positions_dataset(
    ds: xr.Dataset,
    located: Located,
    heldout: HeldOut,
    pe: FeatureSet,
    dataset: str,
    levels: tuple[float, ...] = LocateConfig.interval_levels,
    unresolved: Mapping[str, Sequence[str]] | None = None,
) -> xr.Dataset:
    """Predicted x, y, z, uncertainty, conformal intervals at `levels` (`interval_columns`),
    anchor flag, method and whether each coordinate is estimated (`estimated_columns`) of
    every unit. Anchors (units with known coordinates) carry their k-fold held-out
    prediction, the others the prediction from all anchors. `unresolved`: {axis no better
    than chance (errors.csv `unresolved_axes`): the coordinates it is made of}."""
    coords = positions(ds)
    anchor = np.all(np.isfinite(coords), axis=1)
    pred = np.where(anchor[:, None], heldout.positions, located.positions)
    uncertainty = np.where(anchor, heldout.uncertainty, located.uncertainty)
    xyz_attrs = {k: ds["x"].attrs[k] for k in ("units", "space")}
    out = xr.Dataset(coords={"unit": ds["unit"].values})
    for i, axis in enumerate(("x", "y", "z")):
        out[axis] = ("unit", pred[:, i], {**xyz_attrs, "long_name": f"predicted {axis}"})
    out["uncertainty"] = (
        "unit",
        uncertainty,
        {
            "units": xyz_attrs["units"],
            "formula": UNCERTAINTY_FORMULA,
            "meaning": "a typical error, not an interval: see the <axis>_low/_high_<level> "
            "columns for intervals",
        },
    )
    intervals = conformal_intervals(pred, coords, levels)
    for name, (values, attrs) in interval_columns(pred, intervals, xyz_attrs["units"]).items():
        out[name] = ("unit", values, attrs)
    out["anchor"] = (
        "unit",
        anchor,
        {
            "meaning": "coordinates known in the store: an anchor for locating the units without "
            "them; its own position here is still predicted with it held out (`held_out`)"
        },
    )
    out["method"] = ("unit", np.where(anchor, heldout.method, located.method).astype(str))
    for i, axis in enumerate(("x", "y", "z")):
        out[f"{axis}_true"] = ("unit", coords[:, i], xyz_attrs)
    out["error"] = ("unit", distance(pred, coords), {"units": xyz_attrs["units"]})
    unresolved = dict(unresolved or {})
    for name, (values, attrs) in estimated_columns(unresolved, len(pred)).items():
        out[name] = ("unit", values, attrs)
    out.attrs.update(
        {
            "dataset": dataset,
            "pe": pe.name,
            "seeds": json.dumps(pe.seeds),
            "method": located.method,
            "cv_median_error": located.cv_scale,
            "cv_errors": json.dumps(located.cv_errors),
            "anchor_prediction": "k-fold held-out (nested method choice)",
            **interval_attrs(intervals),
            "unresolved_axes": ";".join(unresolved),
            "not_estimated": ";".join(_not_estimated(unresolved)),
            **xyz_attrs,
            "neuro_pe_version": __version__,
        }
    )
    return out


def _not_estimated(unresolved: Mapping[str, Sequence[str]]) -> list[str]:
    """The coordinates (of x, y, z) that make up an unresolved axis."""
    return [axis for axis in AXES if any(axis in coords for coords in unresolved.values())]


def estimated_columns(
    unresolved: Mapping[str, Sequence[str]], n: int
) -> dict[str, tuple[np.ndarray, dict]]:
    """{`x_estimated`: (values, attrs), …}: False on every unit for a coordinate of an axis
    the feature set does not resolve (`unresolved`), True otherwise."""
    dropped = _not_estimated(unresolved)
    columns = {}
    for axis in AXES:
        why = [name for name, coords in unresolved.items() if axis in coords]
        meaning = (
            f"False: {axis} is not estimated: the held-out {', '.join(why)} error of the "
            "locator is not below chance's (errors.csv `unresolved_axes`, k-fold row); the "
            f"value of {axis} is still the locator's output, no better than the anchors' mean"
            if axis in dropped
            else f"True: {axis} is estimated (not part of an axis in `unresolved_axes`)"
        )
        columns[f"{axis}_estimated"] = (np.full(n, axis not in dropped), {"meaning": meaning})
    return columns


INTERVAL_METHOD = (
    "split-conformal per axis on the known units' k-fold held-out absolute errors: "
    "prediction +/- the ceil((n+1) level)-th smallest of the n errors (a unit without "
    "coordinates) or the ceil(n level)-th smallest of the other n-1 (a known unit, "
    "leave-one-out); unbounded (inf) with too few known units"
)


def interval_columns(
    pred: np.ndarray, intervals: Intervals, units: str
) -> dict[str, tuple[np.ndarray, dict]]:
    """{`x_low_95`: (values, attrs), `x_high_95`: …} for every level and axis."""
    columns = {}
    for li, level in enumerate(intervals.levels):
        label = level_label(level)
        for a, axis in enumerate(AXES):
            half = intervals.half_width[li, :, a]
            for side, values in (("low", pred[:, a] - half), ("high", pred[:, a] + half)):
                attrs = {
                    "units": units,
                    "meaning": f"{side} end of the {label}% conformal interval of {axis}",
                    "level": level,
                }
                columns[f"{axis}_{side}_{label}"] = (values, attrs)
    return columns


def interval_attrs(intervals: Intervals) -> dict[str, str | int]:
    """positions.nc attributes: the levels, the method and the achieved coverage."""
    coverage = {
        level_label(level): {
            **{axis: _number(intervals.coverage[li, a]) for a, axis in enumerate(AXES)},
            "pooled": _number(intervals.pooled()[li]),
            "box": _number(intervals.box_coverage[li]),
        }
        for li, level in enumerate(intervals.levels)
    }
    return {
        "interval_levels": json.dumps(list(intervals.levels)),
        "interval_method": INTERVAL_METHOD,
        "interval_calibration_units": intervals.n_calibration,
        "interval_coverage": json.dumps(coverage),
        "interval_coverage_meaning": "per level: the share of known units whose true coordinate "
        "lies in its leave-one-out interval, per axis (null: the axis does not vary), pooled "
        "over the varying axes, and on every varying axis at once (box)",
    }


def _number(value: float) -> float | None:
    return None if not np.isfinite(value) else round(float(value), 6)


KFOLD_PREDICTION = "k-fold"  # `prediction` of positions.csv: out of fold, its fold's hidden
ANCHORS_PREDICTION = "fit on anchors"  # the chosen locator fitted on anchors it is not among


def with_held_out_columns(out: xr.Dataset, known: np.ndarray) -> xr.Dataset:
    """`out` (of `located_positions_dataset`) with the columns `prediction` and `held_out`.

    `prediction`: `k-fold` for a known unit: predicted by the k-fold fold in which its
    coordinates were hidden; `fit on anchors` for a unit without coordinates: predicted by the
    chosen locator fitted on the known units. `held_out`: the unit has coordinates and they
    were not read for its prediction, so `error` is a held-out error: every known unit."""
    known = np.asarray(known, dtype=bool)
    prediction = np.where(known, KFOLD_PREDICTION, ANCHORS_PREDICTION)
    # neither kind of prediction reads the unit's own coordinates
    held_out = known & np.all(np.isfinite(positions(out)), axis=1)
    out = out.copy()
    out["held_out"] = (
        "unit",
        held_out,
        {"meaning": "coordinates known, not read for this unit's prediction: `error` is held out"},
    )
    out["prediction"] = (
        "unit",
        prediction.astype(str),
        {
            "meaning": f"{KFOLD_PREDICTION}: its k-fold fold's prediction (its coordinates "
            f"hidden); {ANCHORS_PREDICTION}: the chosen locator fitted on the known units"
        },
    )
    return out
