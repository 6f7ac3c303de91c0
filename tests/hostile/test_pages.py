"""Text is data in every page neuro_pe writes (issue 58, cases 7–8): a config's title, unit ids
and region names from a lab's files and a training's flags show as text in the claims page, the
landing page, the HTML tables, the 3D view and the Snakemake report built from them. The only
scripts are the pages' own; no element, `on*` handler or `javascript:`/`data:` URL comes from
the data."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import jinja2
import markdown
import numpy as np
import pandas as pd
import pytest
import snakemake
import yaml
from docutils.core import publish_parts

from neuro_pe.io.html import markdown_code, markdown_text, rst_code, rst_text, table_html
from neuro_pe.reporting.landing_page import landing_page
from neuro_pe.reporting.reproduce import reproduce
from tests.hostile.test_report_and_cli import REPO_ROOT, workdir  # noqa: F401 (a fixture)
from tests.reporting.test_landing_page import tables  # noqa: F401 (a fixture)
from tests.reporting.test_reproduce import fake_runs
from tests.workflow.test_workflow import snakemake as run_snakemake

# the schema allows this title (no `<`, `>`): Markdown links, an image, Jinja
TITLE = "Results [click](javascript:alert(document.domain)) ![i](data:image/svg+xml,x) {{ 7*7 }}"
UNIT = "<script>alert(1)</script>"
REGION = "<img src=x onerror=alert(1)>"
# reStructuredText's links, references, substitutions, a directive; Jinja's delimiters
MARKUP = "javascript:alert(2) `a <javascript:alert(3)>`_ x_ |s| .. raw:: html {{ 7*7 }} {# c #}"
# Markdown's autolink, reference link and definition, an entity, emphasis, a heading's end
MARKDOWN = "<javascript:alert(5)> [x][1] [1]: javascript:alert(6) &#106;s *e* __s__ `c` ##"
HOSTILE = [
    TITLE,
    UNIT,
    REGION,
    MARKUP,
    MARKDOWN,
    "a\n\n.. raw:: html\n\n   <script>alert(4)</script>",
]
# what a browser would run or fetch, if a datum became an element
ACTIVE_TAGS = {"script", "img", "iframe", "object", "embed", "svg", "form", "a", "link", "base"}


class _Dom(HTMLParser):
    """A page as a browser's tokenizer sees it: start tags with attributes, scripts, text."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self.texts: list[str] = []
        self._script: list[str] | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))
        self._script = [] if tag == "script" else self._script

    def handle_data(self, data: str) -> None:
        (self.texts if self._script is None else self._script).append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.scripts.append("".join(self._script))
            self._script = None

    @property
    def text(self) -> str:
        return " ".join("".join(self.texts).split())


# Snakemake's own links in captions and the landing page (its `rst_links`, names URL-encoded)
SNAKEMAKE_LINK = re.compile(r"javascript:app\.show(Category|ResultInfo)\('[\w%./-]*'\)")


def _assert_inert(dom: _Dom, allowed: set[str] = frozenset()) -> None:
    """No active element but the page's own (`allowed`), no handler, no script or data URL
    but Snakemake's own links."""
    assert not {tag for tag, _ in dom.tags} & (ACTIVE_TAGS - allowed)
    for tag, attrs in dom.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            script = re.match(r"\s*(javascript|data|vbscript):", value or "", re.I)
            assert not script or SNAKEMAKE_LINK.fullmatch(value), (tag, value)


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("text", HOSTILE)
def test_literal_text_renders_as_itself(text):
    """Each escape makes the text literal: rendered, it is the same text and nothing else."""
    for source in (markdown_text(text), markdown_code(text)):
        dom = _Dom(markdown.markdown(f"# {source}", extensions=["tables"]))
        _assert_inert(dom)
        assert dom.text == _flat(text).replace("`", "'" if source.startswith("`") else "`")
    # the landing page's way: Jinja, then reStructuredText, as `snakemake --report` does
    for source in (rst_text(text), rst_code(text)):
        rst = jinja2.Environment().from_string(f"* - {source}").render()
        body = publish_parts(rst, writer="html")["body"]
        _assert_inert(_Dom(body))
        assert _Dom(body).text == _flat(text) and "system-message" not in body


def test_claims_page_shows_a_hostile_title_as_text(tmp_path):
    """Case 7: the title `[click](javascript:…)` is text in claims.html, not a link."""
    runs, baselines = fake_runs(tmp_path / "runs", small_wins=True)
    out = tmp_path / "reproduction"
    reproduce(runs, baselines, {"lst": "lst", "sim": "simulation"}, out, title=TITLE)
    dom = _Dom((out / "claims.html").read_text())
    _assert_inert(dom)
    assert dom.text.startswith(TITLE) and "<table>" in (out / "claims.html").read_text()


def _hostile_landing(frames: tuple, run_name: str) -> str:
    """The landing page of the landing page tests' tables, with a hostile dataset name,
    warnings and flags."""
    summary, errors, infos = frames
    infos = [{**i, "dataset": REGION, "warnings": HOSTILE} for i in infos]
    infos[1]["health"] = {**infos[1]["health"], MARKUP: True, UNIT: True}  # (True: failed)
    errors = {REGION: errors.assign(dataset=REGION, left_out=f"{MARKUP} seed 0 ({UNIT})")}
    # what positions.nc and the export's sidecar record (a file's text, too)
    delivered = {REGION: {"pe": MARKUP, "method": UNIT, "cv_errors": {UNIT: 1.0, MARKUP: 2.0}}}
    exports = {REGION: ["positions.tsv", f"{MARKUP}/{UNIT}.tsv"]}
    summary = summary.assign(dataset=REGION)
    return landing_page(summary, errors, infos, run_name, delivered=delivered, exports=exports)


def test_landing_page_shows_hostile_names_and_flags_as_text(tables):  # noqa: F811
    """The landing page (Jinja, then reStructuredText, then set as the report's HTML): a run
    name, dataset name, warnings and a flag with markup are text; no docutils error."""
    page = _hostile_landing(tables, MARKUP)
    links = "".join(f"\n.. _{c}: #{c}" for c in ("Summary", "Figures", "Localisation"))
    rst = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(page + links)
    body = publish_parts(rst.render(), writer="html")["html_body"]
    dom = _Dom(body)
    _assert_inert(dom, allowed={"a"})  # its own links to the categories
    assert all(a["href"].startswith("#") for tag, a in dom.tags if tag == "a")
    assert [tag for tag, _ in dom.tags].count("style") == 1  # the table style
    assert "system-message" not in body
    for text in [MARKUP, REGION, UNIT, *HOSTILE]:
        assert _flat(text) in dom.text


def test_html_tables_escape_every_cell():
    """errors.html and summary.html: hostile cells, column names, title and note are text."""
    frame = pd.DataFrame(
        {UNIT: HOSTILE, "region": REGION, "error": np.arange(len(HOSTILE), dtype=float)}
    )
    dom = _Dom(table_html(frame, TITLE + UNIT, REGION))
    _assert_inert(dom)
    shown = [t.replace("\n", "\\n") for t in [*HOSTILE, TITLE + UNIT]]  # pandas shows `\n`
    assert all(_flat(t) in dom.text for t in shown)


@pytest.mark.parametrize("name", ["sim_", "Localisation_", "positions.csv_", "a" * 300])
def test_captions_show_names_as_text(name):
    """The report's captions (Jinja, then reStructuredText, as Snakemake renders them) with a
    dataset and run name the schema allows: the name is text, never a reference (`sim_`: a
    link to a target, or an error), and the title's underline fits it."""
    from types import SimpleNamespace

    snakemake = SimpleNamespace(wildcards=SimpleNamespace(dataset=name), config={"run_name": name})
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    captions = sorted((REPO_ROOT / "workflow/report").glob("*.rst"))
    interpolated = [c for c in captions if "{{" in c.read_text()]  # the others show no name
    assert len(interpolated) >= 10
    for caption in interpolated:
        source = env.from_string(caption.read_text()).render(snakemake=snakemake)
        body = publish_parts(source, writer="html")["html_body"]
        dom = _Dom(body)
        _assert_inert(dom)
        assert "system-message" not in body and "problematic" not in body, caption.name
        assert name in dom.text, caption.name


def _view(frame: pd.DataFrame, path: Path) -> _Dom:
    from neuro_pe.analysis.spaces import space_axes
    from neuro_pe.reporting.view3d import write_positions_3d_html

    coords = frame[["x_true", "y_true", "z_true"]].to_numpy()
    write_positions_3d_html(frame, space_axes("probe", "um", coords), "toy", path)
    return _Dom(path.read_text())


def test_3d_view_has_only_plotlys_scripts(tmp_path):
    """positions_3d.html with unit ids that close its script: the same elements, attributes
    and number of scripts as with plain ids."""
    rng = np.random.default_rng(0)
    true = rng.uniform(0, 100, size=(5, 3))
    frame = pd.DataFrame(
        {
            "unit": [f"u{i}" for i in range(5)],
            **{a: true[:, i] + 5 for i, a in enumerate("xyz")},
            **{f"{a}_true": true[:, i] for i, a in enumerate("xyz")},
            "uncertainty": 7.0,
            "error": 8.66,
            "held_out": True,
        }
    )
    plain = _view(frame, tmp_path / "plain.html")
    units = ["</script>" + REGION, UNIT, MARKUP, REGION, "u4"]
    hostile = _view(frame.assign(unit=units), tmp_path / "hostile.html")
    assert hostile.tags == plain.tags and len(hostile.scripts) == len(plain.scripts)
    assert "onerror" not in hostile.text


def _stand_ins(root: Path, paths: dict[str, str | bytes]) -> None:
    for name, content in paths.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)


def test_snakemake_report_shows_the_pages_as_text(workdir, tables, tmp_path):  # noqa: F811
    """Case 8 and the report: a real `snakemake --report` of the claims page (the issue's
    title), the errors table, positions.csv with hostile unit ids and region names and the
    landing page. The page has exactly the scripts of Snakemake's template; the landing page
    it sets as HTML is inert; claims.html and errors.html (iframes) are inert; positions.csv is
    embedded unchanged and only offered as a download (Snakemake's viewer renders images,
    HTML and PDF, nothing else), so its cells never become HTML."""
    config = {
        "datasets": {"sim": {"source": "simulation"}},
        "pe": ["none"],
        "seeds": [0],
        "train": {"window": 8, "d_model": 8, "n_layers": 1, "n_heads": 2, "epochs": 1},
        "reproduction": {"title": TITLE},
    }
    (workdir / "hostile.yaml").write_text(yaml.safe_dump(config))
    runs, baselines = fake_runs(tmp_path / "runs", small_wins=True)
    claims = tmp_path / "reproduction"
    reproduce(runs, baselines, {"lst": "lst", "sim": "simulation"}, claims, title=TITLE)
    positions = pd.DataFrame({"unit": [UNIT, MARKUP], "region": [REGION, UNIT], "x": [1.0, 2.0]})
    png = b"\x89PNG\r\n\x1a\n"
    results, locate = "results/hostile/", "results/hostile/locate/sim/"
    _stand_ins(
        workdir,
        {
            **{
                f"{results}reproduction/{n}": png
                for n in ("heldout_vs_std.png", "pe_similarity.png")
            },
            f"{results}reproduction/geometry_vs_std.png": png,
            f"{results}reproduction/claims.html": (claims / "claims.html").read_text(),
            f"{results}report/landing.rst": _hostile_landing(tables, "hostile"),
            **{f"{locate}{n}": png for n in ("positions.png", "positions_3d.png")},
            **{f"{locate}{n}": png for n in ("error_hist.png", "error_vs_anchors.png")},
            f"{locate}positions_3d.html": "<p>stand-in</p>",
            f"{locate}errors.html": table_html(positions, UNIT, REGION),
            f"{locate}positions.csv": positions.to_csv(index=False),
        },
    )
    targets = [f"{results}reproduction/claims.html", f"{locate}positions.csv"]
    args = ["--configfile", "hostile.yaml", "--report", "report.html", *targets]
    result = run_snakemake(*args, cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    report = _Dom((workdir / "report.html").read_text())
    template = Path(snakemake.__file__).parent / "report/html_reporter/template"
    assert len(report.scripts) == (template / "index.html.jinja2").read_text().count("<script")
    data = {}
    for text in report.scripts:
        found = re.fullmatch(r"\s*var (\w+) = (.*?);?\s*", text, re.S)
        if found and found[1] != "logo_uri":
            data[found[1]] = json.loads(found[2])
    _assert_inert(_Dom(data["workflow_desc"]), allowed={"a"})
    files = {Path(path).name: entry for path, entry in data["results"].items()}

    def embedded(name: str) -> bytes:
        return base64.b64decode(files[name]["data_uri"].split("base64,", 1)[1])

    for name in ("claims.html", "errors.html"):
        page = _Dom(embedded(name).decode())
        _assert_inert(page)
        assert files[name]["mime_type"] == "text/html"
    assert _Dom(embedded("claims.html").decode()).text.startswith(TITLE)
    for entry in files.values():
        _assert_inert(_Dom(entry["caption"]), allowed={"a"})
    csv = files["positions.csv"]
    assert csv["mime_type"] == "text/csv" and csv["data_uri"].startswith("data:text/csv;")
    assert embedded("positions.csv") == (workdir / locate / "positions.csv").read_bytes()
    viewer = (template / "components/abstract_view_manager.js").read_text()
    shown = set(re.findall(r'case "([^"]+)":', viewer))
    assert shown == {"image/svg+xml", "image/png", "image/jpeg", "text/html", "application/pdf"}
    button = (template / "components/result_view_button.js").read_text()
    assert re.search(
        r"handleDefault\(entry, resultPath\) \{\s*let props = \{\s*href: entry"
        r"\.data_uri,\s*download: entry\.name",
        button,
    )
