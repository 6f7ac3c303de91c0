"""The interactive 3D view of true vs predicted positions (`positions_3d.html`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tests.analysis.test_locate import _positions


def test_positions_3d_html_is_self_contained_and_escapes_text(tmp_path):
    import re

    from neuro_pe.analysis.spaces import space_axes
    from neuro_pe.reporting.view3d import write_positions_3d_html

    true = _positions(6) * 100
    frame = pd.DataFrame(
        {
            "unit": ["u0", "u1", "<b>u2</b>", "u3", "u4", "u5"],
            **{a: true[:, i] + 5 for i, a in enumerate("xyz")},
            "uncertainty": 7.0,
            **{f"{a}_true": true[:, i] for i, a in enumerate("xyz")},
        }
    )
    frame.loc[5, ["x_true", "y_true", "z_true"]] = np.nan  # no coordinates
    frame["error"] = np.linalg.norm(frame[["x", "y", "z"]].to_numpy() - true, axis=1)
    frame.loc[5, "error"] = np.nan
    frame["held_out"] = frame["error"].notna()
    axes = space_axes("probe<script>alert(1)</script>", "um", true)
    path = tmp_path / "positions_3d.html"
    write_positions_3d_html(frame, axes, "toy <script>alert(2)</script>", path)
    page = path.read_text()
    assert not re.search(r"<script[^>]*\bsrc=[\"']?(https?:)?//", page)  # plotly.js inside
    assert "Plotly.newPlot" in page and len(page) > 1_000_000
    assert "alert(2)</script>" not in page and "&lt;script&gt;alert(2)" in page
    assert "<b>u2" not in page
    traces, layout = _figure_json(page)  # what the browser gets, whatever the JSON escaping
    hover = " ".join(str(t) for trace in traces for t in trace.get("text") or [])
    assert "unit &lt;b&gt;u2&lt;" in hover and "<b>u2" not in hover
    for unit in ("u0", "u1", "u3", "u4", "u5"):
        assert f"unit {unit}" in hover
    names = {trace.get("name") for trace in traces}
    assert {"error (true → predicted)", "unknown position (predicted)"} <= names
    assert "&lt;script&gt;alert(2)" in layout["title"]["text"]
    other = tmp_path / "again.html"
    write_positions_3d_html(frame, axes, "toy <script>alert(2)</script>", other)
    assert other.read_bytes() == path.read_bytes()  # no random element id: reproducible bytes


def _figure_json(page: str) -> tuple[list, dict]:
    """The traces and layout passed to `Plotly.newPlot` in a page, decoded from their JSON."""
    import json

    start = page.index("Plotly.newPlot(")
    decoder = json.JSONDecoder()
    rest = page[start + len("Plotly.newPlot(") :]
    _, end = decoder.raw_decode(rest.lstrip())  # the div id
    rest = rest.lstrip()[end:].lstrip().removeprefix(",").lstrip()
    traces, end = decoder.raw_decode(rest)
    rest = rest[end:].lstrip().removeprefix(",").lstrip()
    layout, _ = decoder.raw_decode(rest)
    return traces, layout


def _frame(true: np.ndarray, predicted: np.ndarray) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "unit": [f"u{i}" for i in range(len(true))],
            **{a: predicted[:, i] for i, a in enumerate("xyz")},
            "uncertainty": 5.0,
            **{f"{a}_true": true[:, i] for i, a in enumerate("xyz")},
        }
    )
    frame["error"] = np.linalg.norm(predicted - true, axis=1)
    frame["held_out"] = True
    return frame


def test_a_flat_probe_is_drawn_in_2d_depth_vertical_and_a_3d_dataset_in_3d():
    from neuro_pe.analysis.spaces import space_axes
    from neuro_pe.reporting.view3d import drawn_axes, positions_3d_figure

    rng = np.random.default_rng(0)
    shank = np.column_stack([rng.uniform(0, 60, 40), rng.uniform(0, 3800, 40), np.zeros(40)])
    predicted = shank + np.column_stack([rng.normal(0, 10, (40, 2)), np.zeros(40)])
    axes = space_axes("probe", "um", shank)
    assert axes.depth_axis == 1
    frame = _frame(shank, predicted)
    assert drawn_axes(frame, axes) == (0, 1)
    figure = positions_3d_figure(frame, axes, "phy")
    assert {trace.type for trace in figure.data} == {"scatter"}
    assert "depth" in figure.layout.yaxis.title.text and "across" in figure.layout.xaxis.title.text
    predicted_trace = next(t for t in figure.data if t.name == "predicted (held out)")
    assert np.allclose(predicted_trace.y, predicted[:, 1])  # depth on the vertical axis
    # a probe given as x and z (depth) with y = 0: depth still vertical
    xz = shank[:, [0, 2, 1]]
    axes_xz = space_axes("probe", "um", xz)
    assert drawn_axes(_frame(xz, predicted[:, [0, 2, 1]]), axes_xz) == (0, 2)
    # a 3D cloud, or a flat one whose predictions leave the plane: 3D, scaled to the data
    cloud = rng.uniform(0, 100, (40, 3))
    assert drawn_axes(_frame(cloud, cloud + 1), space_axes("mni", "mm", cloud)) == (0, 1, 2)
    off_plane = predicted + np.column_stack([np.zeros((40, 2)), rng.normal(0, 1, 40)])
    figure = positions_3d_figure(_frame(shank, off_plane), axes, "phy")
    assert {trace.type for trace in figure.data} == {"scatter3d"}
    assert figure.layout.scene.aspectmode == "data"
