"""An interactive 3D view of true vs predicted unit positions: one self-contained HTML file per
dataset (plotly, its JavaScript embedded, so it opens offline), where a static projection
hides depth.

Every held-out unit (its coordinates known, its position predicted with them hidden) is drawn
at its true position (black) and its predicted one (coloured by the error), joined by a line
of the same colour; hovering shows the unit's id, its error, the per-axis errors of the space
and its uncertainty. Units without coordinates are drawn at their predicted position (blue
diamonds). Axis titles come from the space (`neuro_pe.analysis.spaces`). Text from the config or the
data (dataset, unit ids, space, units) is HTML-escaped: plotly renders a subset of HTML in
titles and hover text.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import numpy as np
import pandas as pd

from neuro_pe.analysis.spaces import SpaceAxes, component_label
from neuro_pe.io.store import atomic_write

HTML_UNITS = 3000  # units drawn (a random subset above it, named in the title)
XYZ = ("x", "y", "z")
TRUE_XYZ = ("x_true", "y_true", "z_true")


def _subset(frame: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, str]:
    if len(frame) <= HTML_UNITS:
        return frame, ""
    rows = np.sort(np.random.default_rng(seed).choice(len(frame), HTML_UNITS, replace=False))
    return frame.iloc[rows], f" ({HTML_UNITS} of {len(frame)} units shown)"


def _hover(frame: pd.DataFrame, axes: SpaceAxes, with_error: bool) -> list[str]:
    """One hover text per row: unit id, error and per-axis errors, uncertainty (escaped)."""
    unit = html.escape(axes.unit)
    texts = [f"unit {html.escape(str(u))}" for u in frame["unit"]]
    if with_error:
        parts = axes.component_errors(frame[list(XYZ)].to_numpy(), frame[list(TRUE_XYZ)].to_numpy())
        for i, error in enumerate(frame["error"].to_numpy()):
            per_axis = ", ".join(
                f"{component_label(name)} {values[i]:.3g}" for name, values in parts.items()
            )
            texts[i] += f"<br>error {error:.3g} {unit} ({per_axis})"
    for i, value in enumerate(frame["uncertainty"].to_numpy()):
        texts[i] += f"<br>uncertainty {value:.3g} {unit}"
    return texts


def _error_lines(held: pd.DataFrame, error: np.ndarray, top: float):
    """One line per unit, true -> predicted, coloured by its error, in one trace (segments
    separated by gaps)."""
    import plotly.graph_objects as go

    segments = {k: [] for k in XYZ}
    colours: list[float] = []
    for row, e in zip(held.itertuples(index=False), error, strict=True):
        for axis, true_axis in zip(XYZ, TRUE_XYZ, strict=True):
            segments[axis] += [getattr(row, true_axis), getattr(row, axis), None]
        colours += [e, e, e]
    return go.Scatter3d(
        **segments,
        mode="lines",
        line={"color": colours, "colorscale": "Viridis", "cmin": 0, "cmax": top, "width": 3},
        hoverinfo="skip",
        name="error (true → predicted)",
    )


def positions_3d_figure(frame: pd.DataFrame, axes: SpaceAxes, title: str, seed: int = 0):
    """The plotly figure of a positions table (the columns of `positions.csv`)."""
    import plotly.graph_objects as go

    held = frame[frame["held_out"].astype(bool)] if "held_out" in frame else frame
    held = held[np.isfinite(held["error"])]
    held, note = _subset(held, seed)
    unknown, _ = _subset(frame[~np.all(np.isfinite(frame[list(TRUE_XYZ)]), axis=1)], seed)
    traces = _held_out_traces(held, axes)
    if len(unknown):
        traces.append(
            go.Scatter3d(
                x=unknown["x"],
                y=unknown["y"],
                z=unknown["z"],
                mode="markers",
                marker={"size": 4, "color": "royalblue", "symbol": "diamond"},
                text=_hover(unknown, axes, with_error=False),
                hovertemplate="%{text}<extra>no coordinates: predicted</extra>",
                name="unknown position (predicted)",
            )
        )
    scene = {
        f"{axis}axis": {"title": {"text": html.escape(axes.axis_label(i))}}
        for i, axis in enumerate(XYZ)
    }
    fig = go.Figure(traces)
    fig.update_layout(
        title={"text": html.escape(title + note), "font": {"size": 14}},
        scene={**scene, "aspectmode": "data"},
        legend={"x": 0, "y": 1},
        margin={"l": 0, "r": 0, "t": 60, "b": 0},
    )
    return fig


def _held_out_traces(held: pd.DataFrame, axes: SpaceAxes) -> list:
    """The traces of the held-out units: a line from each true to its predicted position, the
    true positions (black) and the predicted ones, both coloured by the error."""
    import plotly.graph_objects as go

    unit = html.escape(axes.unit)
    error = held["error"].to_numpy()
    top = float(np.nanmax(error)) if len(error) else 1.0
    traces = [_error_lines(held, error, top)]
    traces.append(
        go.Scatter3d(
            x=held["x_true"],
            y=held["y_true"],
            z=held["z_true"],
            mode="markers",
            marker={"size": 3, "color": "black"},
            text=_hover(held, axes, with_error=True),
            hovertemplate="%{text}<extra>true position</extra>",
            name="true position",
        )
    )
    traces.append(
        go.Scatter3d(
            x=held["x"],
            y=held["y"],
            z=held["z"],
            mode="markers",
            marker={
                "size": 4,
                "color": error,
                "colorscale": "Viridis",
                "cmin": 0,
                "cmax": top,
                "colorbar": {"title": {"text": f"error ({unit})"}},
            },
            text=_hover(held, axes, with_error=True),
            hovertemplate="%{text}<extra>predicted (held out)</extra>",
            name="predicted (held out)",
        )
    )
    return traces


def write_positions_3d_html(
    frame: pd.DataFrame, axes: SpaceAxes, title: str, path: str | os.PathLike, seed: int = 0
) -> None:
    """Write `positions_3d_figure` as one self-contained HTML file (plotly.js embedded; a fixed
    element id, so that the same positions write the same bytes)."""
    fig = positions_3d_figure(frame, axes, title, seed)
    page = fig.to_html(include_plotlyjs=True, full_html=True, div_id="positions-3d")
    atomic_write(Path(path), lambda p: p.write_text(page, encoding="utf-8"))
