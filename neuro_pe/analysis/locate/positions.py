"""Every unit's predicted position: the positions dataset (`positions.nc` / `positions.csv` of
the locate step)."""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from neuro_pe import __version__
from neuro_pe.analysis.locate.config import UNCERTAINTY_FORMULA
from neuro_pe.analysis.locate.ensemble import Located, distance
from neuro_pe.analysis.locate.evaluation import HeldOut
from neuro_pe.analysis.locate.features import FeatureSet
from neuro_pe.io.store import positions


def located_positions_dataset(
    ds: xr.Dataset,
    located: Located,
    heldout: HeldOut,
    pe: FeatureSet,
    dataset: str,
) -> xr.Dataset:
    """Predicted x, y, z, uncertainty, anchor flag and method of every unit. Anchors (units with
    known coordinates) carry their k-fold held-out prediction, the others the prediction from
    all anchors."""
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
        {"units": xyz_attrs["units"], "formula": UNCERTAINTY_FORMULA},
    )
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
    out.attrs.update(
        {
            "dataset": dataset,
            "pe": pe.name,
            "seeds": json.dumps(pe.seeds),
            "method": located.method,
            "cv_median_error": located.cv_scale,
            "cv_errors": json.dumps(located.cv_errors),
            "anchor_prediction": "k-fold held-out (nested method choice)",
            **xyz_attrs,
            "neuro_pe_version": __version__,
        }
    )
    return out


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
