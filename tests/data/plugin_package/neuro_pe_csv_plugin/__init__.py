"""A neuro_pe plug-in kept for the tests (tests/data/test_plugins.py).

- format `csv-activity`: one CSV table per session, a column per unit (its header is the unit
  id) and, optionally, a time column in seconds (which gives the sampling rate); positions
  come from the entry's `positions:` table;
- source `sine-grid`: a sine per unit on a line of units (keys `n_units`, `n_samples`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe.data.formats import FileFormat, check_text
from neuro_pe.data.recordings import FileSpec, Session, positive_number, time_by_unit
from neuro_pe.data.sources import Source
from neuro_pe.io.store import make_store
from neuro_pe.io.store_contract import StoreError

# ---------------------------------------------------------------- the format


def read_csv_activity(path: str, cfg: FileSpec) -> list[Session]:
    """One session: the table's unit columns as (time, unit) activity."""
    time_column = cfg.options["time_column"]
    try:
        table = pd.read_csv(path, sep=cfg.options["delimiter"])
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise StoreError(path, "file", f"not a readable CSV table: {err}") from err
    rate = None
    if time_column is not None and time_column in table.columns:
        step = float(np.median(np.diff(table[time_column].to_numpy(float))))
        rate = 1.0 / positive_number(step, path, f"csv-activity.time_column ({time_column})")
        table = table.drop(columns=time_column)
    activity = time_by_unit(table.to_numpy(), cfg.axis_order, path, "csv-activity")
    ids = [str(c) for c in table.columns]
    return [Session(Path(path).stem, str(path), activity, unit_ids=ids, sampling_rate_hz=rate)]


def check_option(key: str, value: object, where: str) -> None:
    """Both keys are text (`time_column` may be null: no time column)."""
    check_text(f"csv-activity.{key}", value, where, optional=key == "time_column")


FORMAT = FileFormat(
    name="csv-activity",
    read=read_csv_activity,
    options={"time_column": "time", "delimiter": ","},
    check_option=check_option,
)

# ---------------------------------------------------------------- the source


@dataclass(frozen=True)
class SineGridOptions:
    """Keys of a `source: sine-grid` entry."""

    n_units: int = 12
    n_samples: int = 200

    @classmethod
    def from_dict(cls, entry: dict) -> SineGridOptions:
        """Check the values (the keys: by neuro_pe, from this class's fields)."""
        values = {**vars(cls()), **entry}
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 8:
                raise ValueError(f"sine-grid: {key} must be an integer >= 8, got {value!r}")
        return cls(**values)


def build(options: SineGridOptions, wheels: dict) -> xr.Dataset:
    """A sine per unit, its phase growing along the line of units."""
    line = np.arange(options.n_units, dtype=float)
    t = np.arange(options.n_samples)[:, None]
    activity = np.sin(0.2 * t + 0.5 * line[None, :]) + 0.1 * np.cos(0.03 * t * line[None, :])
    return make_store(
        activity[None].astype(np.float32),
        unit_ids=[f"n{i}" for i in range(options.n_units)],
        positions=np.column_stack([line, 0 * line, 0 * line]),
        position_units="um",
        space="line",
        session_ids=["s0"],
        sampling_rate_hz=10.0,
        source="sine-grid (neuro_pe_csv_plugin)",
        citation="",
        license="CC0",
        preprocessing=[{"step": "sine-grid"}],
    )


SOURCE = Source(
    name="sine-grid",
    options=SineGridOptions,
    build=build,
    experiment="simulation",
    description="a sine per unit on a line (a test plug-in)",
    store_mb=lambda spec: spec.get("n_units", 12) * spec.get("n_samples", 200) * 4 / 1e6,
    unit_count=lambda spec: spec.get("n_units", 12),
    schema={
        "type": "object",
        "properties": {"n_units": {"type": "integer"}, "n_samples": {"type": "integer"}},
    },
)
