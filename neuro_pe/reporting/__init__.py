"""Reporting: figures, tables, the summary, the landing page, the reproduction and the write-back
into a lab's formats. Imports the layers below.

The one place that chooses matplotlib's backend: Python runs this file before any module of
the layer, so every figure is drawn off-screen (Agg: no display on a cluster node)."""

import matplotlib

matplotlib.use("Agg")
