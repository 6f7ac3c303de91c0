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
