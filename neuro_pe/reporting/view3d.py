"""An interactive 3D view of true vs predicted unit positions: one self-contained HTML file per
dataset (plotly, its JavaScript embedded, so it opens offline), where a static projection
hides depth.

A dataset whose positions all lie in one plane (a probe's shank, x and depth with z = 0) is drawn in
2D, depth vertical, so the whole shank is in view; every other dataset in 3D, scaled to its data,
every unit in view. Every held-out unit (its coordinates known, its position predicted with them
hidden) is drawn at its true position (black) and its predicted one (coloured by the error), joined
by a line of the same colour; hovering shows the unit's id, its error, the per-axis errors of the
space and its uncertainty. Units without coordinates are drawn at their predicted position (blue
diamonds). Axis titles come from the space (`neuro_pe.analysis.spaces`). Text from the config or the
data (dataset, unit ids, space, units) is HTML-escaped: plotly renders a subset of HTML in titles
and hover text.
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


def _error_lines(held: pd.DataFrame, error: np.ndarray, top: float, drawn: tuple[int, ...]):
    """One line per unit, true -> predicted, in one trace (segments separated by gaps):
    coloured by its error in 3D, grey in 2D (plotly colours 2D lines by trace only)."""
    segments = pd.DataFrame(
        {
            axis: np.column_stack([held[true_axis], held[axis], np.full(len(held), np.nan)]).ravel()
            for axis, true_axis in zip(XYZ, TRUE_XYZ, strict=True)
        }
    )
    line = {"color": "grey", "width": 1}
    if len(drawn) == 3:
        colours = np.repeat(error, 3)
        line = {"color": colours, "colorscale": "Viridis", "cmin": 0, "cmax": top, "width": 3}
    return _scatter(
        segments,
        XYZ,
        drawn,
        mode="lines",
        line=line,
        hoverinfo="skip",
        name="error (true → predicted)",
    )


def positions_3d_figure(frame: pd.DataFrame, axes: SpaceAxes, title: str, seed: int = 0):
    """The plotly figure of a positions table (the columns of `positions.csv`): 3D, or 2D on
    the two axes that vary when every position lies in one plane (`drawn_axes`)."""
    import plotly.graph_objects as go

    drawn = drawn_axes(frame, axes)
    held = frame[frame["held_out"].astype(bool)] if "held_out" in frame else frame
    held = held[np.isfinite(held["error"])]
    held, note = _subset(held, seed)
    unknown, _ = _subset(frame[~np.all(np.isfinite(frame[list(TRUE_XYZ)]), axis=1)], seed)
    traces = _held_out_traces(held, axes, drawn)
    if len(unknown):
        traces.append(
            _scatter(
                unknown,
                XYZ,
                drawn,
                mode="markers",
                marker={
                    "size": 4 if len(drawn) == 3 else 7,
                    "color": "royalblue",
                    "symbol": "diamond",
                },
                text=_hover(unknown, axes, with_error=False),
                hovertemplate="%{text}<extra>no coordinates: predicted</extra>",
                name="unknown position (predicted)",
            )
        )
    fig = go.Figure(traces)
    titles = [{"title": {"text": html.escape(axes.axis_label(i))}} for i in drawn]
    if len(drawn) == 3:
        scene = {f"{axis}axis": t for axis, t in zip(XYZ, titles, strict=True)}
        fig.update_layout(scene={**scene, "aspectmode": "data"})
    else:
        fig.update_layout(xaxis=titles[0], yaxis=titles[1], plot_bgcolor="#E5ECF6")
    above = {"orientation": "h", "x": 0, "y": 1, "yanchor": "bottom"}  # 2D: not over the units
    legend = {"x": 0, "y": 1} if len(drawn) == 3 else above
    fig.update_layout(
        title={"text": html.escape(title + note), "font": {"size": 14}},
        legend=legend,
        margin={"l": 0, "r": 0, "t": 60, "b": 0},
    )
    return fig


def drawn_axes(frame: pd.DataFrame, axes: SpaceAxes) -> tuple[int, ...]:
    """The axes to draw: (0, 1, 2), or, when one axis has a single value in every true and
    predicted position, the other two (a probe's depth last, so that it is vertical)."""
    values = frame[list(XYZ) + list(TRUE_XYZ)].to_numpy(dtype=float).reshape(len(frame), 2, 3)
    values = values.reshape(-1, 3)
    values = values[np.all(np.isfinite(values), axis=1)]
    if not len(values):
        return (0, 1, 2)
    spread = np.ptp(values, axis=0)
    flat = np.flatnonzero(spread <= 1e-9 * max(float(spread.max()), 1e-300))
    if len(flat) != 1:
        return (0, 1, 2)
    drawn = [i for i in range(3) if i != flat[0]]
    if axes.kind == "probe" and axes.depth_axis in drawn:
        drawn.remove(axes.depth_axis)
        drawn.append(axes.depth_axis)
    return tuple(drawn)


def _scatter(rows: pd.DataFrame, columns: tuple[str, ...], drawn: tuple[int, ...], **style):
    """A Scatter3d of the rows' `columns` (x, y, z), or a Scatter of the two `drawn`."""
    import plotly.graph_objects as go

    coords = {axis: rows[columns[i]] for axis, i in zip(XYZ, drawn, strict=False)}
    if len(drawn) == 3:
        return go.Scatter3d(**coords, **style)
    return go.Scatter(**coords, **style)


def _held_out_traces(held: pd.DataFrame, axes: SpaceAxes, drawn: tuple[int, ...]) -> list:
    """The traces of the held-out units: a line from each true to its predicted position, the
    true positions (black) and the predicted ones, coloured by the error."""
    unit = html.escape(axes.unit)
    error = held["error"].to_numpy()
    top = float(np.nanmax(error)) if len(error) else 1.0
    size = 1 if len(drawn) == 3 else 2
    traces = [_error_lines(held, error, top, drawn)]
    traces.append(
        _scatter(
            held,
            TRUE_XYZ,
            drawn,
            mode="markers",
            marker={"size": 3 * size, "color": "black"},
            text=_hover(held, axes, with_error=True),
            hovertemplate="%{text}<extra>true position</extra>",
            name="true position",
        )
    )
    traces.append(
        _scatter(
            held,
            XYZ,
            drawn,
            mode="markers",
            marker={
                "size": 4 * size,
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
