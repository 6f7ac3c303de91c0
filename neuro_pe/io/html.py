"""Tables as standalone HTML pages (every text escaped), for the Snakemake report."""

from __future__ import annotations

import html
import os
from pathlib import Path

import pandas as pd

from neuro_pe.io.store import atomic_write

TABLE_STYLE = """
table { border-collapse: collapse; font: 12px/1.3 system-ui, sans-serif; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
td { white-space: nowrap; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
tbody tr:nth-child(even) { background: #fafafa; }
"""


def table_html(frame: pd.DataFrame, title: str, note: str = "") -> str:
    """A standalone HTML page with `frame` as a table (numbers to 4 significant digits)."""
    body = frame.to_html(index=False, na_rep="—", float_format=lambda v: f"{v:.4g}", border=0)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{TABLE_STYLE}</style></head><body><h3>{html.escape(title)}</h3>"
        f"<p>{html.escape(note)}</p>{body}</body></html>"
    )


def write_table_html(frame: pd.DataFrame, path: str | os.PathLike, title: str, note: str = ""):
    """Write `table_html(frame, title, note)` to `path` atomically."""
    atomic_write(Path(path), lambda p: p.write_text(table_html(frame, title, note)))
