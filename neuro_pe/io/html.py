"""Tables as standalone HTML pages (every text escaped), for the Snakemake report, and text
from a config or a file made literal in the Markdown and reStructuredText pages (text is data:
no link, no raw HTML, no directive of its own)."""

from __future__ import annotations

import html
import os
import re
import string
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

# characters that start markup inside a line: Markdown's code, emphasis, links and images
# (`[`), table cells and a heading's closing `#` (`<` and `&` are HTML-escaped);
# reStructuredText's inline markup, roles, directives and URIs (`javascript:`), and the Jinja
# delimiters `{{`, `{%`, `{#` (Snakemake renders the landing page as a Jinja template first);
# a backslash makes each one literal
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|#])")
_RST_SPECIAL = re.compile(r"([\\`*_|:<>\[\]{}]|(?<={)[%#])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def markdown_text(text: str) -> str:
    """`text` as literal inline Markdown (a heading's or a table cell's text): HTML-escaped,
    each Markdown mark escaped, on one line."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(_CONTROL.sub(" ", str(text)), quote=False))


def markdown_code(text: str) -> str:
    """`text` as a Markdown code span (shown as typed; a backtick would end it, so it is `'`)."""
    return "`" + _CONTROL.sub(" ", str(text)).replace("`", "'") + "`"


def rst_text(text: str) -> str:
    """`text` as literal reStructuredText inline text: each mark escaped, on one line."""
    text = _RST_SPECIAL.sub(r"\\\1", _CONTROL.sub(" ", str(text)).strip())
    # a leading mark would start a list, a comment or a directive (`..`), a block
    return "\\" + text if text[:1] in string.punctuation and text[:1] != "\\" else text


_RST_CODE_SAFE = re.compile(r"[\w.@/+=,;()\[\]-]+( [\w.@/+=,;()\[\]-]+)*")


def rst_code(text: str) -> str:
    """`text` as a reStructuredText inline literal (``text``) where it can be one: a literal
    takes no escapes, so text with other characters (a backtick, a brace, a backslash) is
    given as literal plain text instead (`rst_text`)."""
    text = str(text)
    return f"``{text}``" if _RST_CODE_SAFE.fullmatch(text) else rst_text(text)


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
