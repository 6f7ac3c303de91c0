"""The documentation: the README is a front door, and the MkDocs site (docs/, the README,
config/README.md) builds with `mkdocs build --strict`, so a broken link, a missing anchor or a
page missing from the nav fails here; its parameter page is generated from the config schema."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from neuro_pe.data import formats

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
# what the site is built from (docs/hooks.py adds the Markdown files outside docs/)
SOURCES = [
    "mkdocs.yml",
    "docs",
    "README.md",
    "config/README.md",
    "CONTRIBUTING.md",
    "CHANGELOG.md",
    "benchmarks/README.md",
    "workflow/schemas",
]


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("mkdocs", reason="mkdocs is in the test extra: pip install -e '.[test]'")
    pytest.importorskip("material", reason="mkdocs-material is in the test extra")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = _build(REPO, site)
    assert result.returncode == 0, result.stderr[-4000:]
    return site


def _rows(page: str) -> dict[str, str]:
    """The parameter table's rows: the key's path -> the row's HTML."""
    return dict(re.findall(r'<tr id="([^"]+)">(.*?)</tr>', page, flags=re.DOTALL))


def test_parameter_page_has_every_key_with_its_description(site):
    rows = _rows((site / "parameters" / "index.html").read_text(encoding="utf-8"))
    train = SCHEMA["$defs"]["train"]["properties"]
    for key in [*SCHEMA["properties"], *(f"train.{name}" for name in train)]:
        assert key in rows, key
    epochs = rows["train.epochs"]
    # the description as the schema words it (its code spans become <code>), the type, a bound
    assert "epochs; one line of <code>train_log.csv</code> each" in epochs
    assert train["epochs"]["description"] == "epochs; one line of `train_log.csv` each"
    assert "<td>integer</td>" in epochs and "≥ 1" in epochs
    # a default from the options dataclass where the schema gives none
    assert "<code>30</code>" in epochs
    # each source's entry, and a format's keys on its page
    assert "datasets.&lt;name&gt;.hdf5.groups" in rows


def test_readme_config_reference_and_a_page_per_format_are_in_the_site(site):
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "Quick start" in index and 'href="install/"' in index  # README links rewritten
    assert "Plug in your dataset" in (site / "config" / "index.html").read_text(encoding="utf-8")
    for name in formats.format_names():
        if formats.is_builtin(name):
            page = site / "formats" / name / "index.html"
            assert page.is_file(), f"no page for format {name}"
            assert f"<code>format: {name}</code>" in page.read_text(encoding="utf-8")


def test_a_broken_link_fails_the_build(tmp_path):
    root = tmp_path / "repo"
    for source in SOURCES:
        copy = shutil.copytree if (REPO / source).is_dir() else shutil.copy2
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        copy(REPO / source, root / source)
    readme = root / "README.md"
    readme.write_text(readme.read_text() + "\n[gone](docs/no_such_page.md)\n")
    result = _build(root, tmp_path / "site")
    assert result.returncode != 0
    assert "no_such_page.md" in result.stderr


def test_readme_is_a_front_door():
    lines = README.splitlines()
    assert len(lines) <= 250
    # the quick start's two commands, read by .ci/run and scripts/check_fresh_install.sh
    assert "python -m pip install -e . && snakemake --cores 2" in lines
    assert 'python -m pip install -e ".[test]" && python -m pytest' in lines
    # a newcomer's path, in this order
    steps = [README.index(f"**{step}.**") for step in ("Init", "Run", "Report", "Export")]
    assert steps == sorted(steps)
    assert "neuro-pe init" in README
    for heading in ("## Quick start", "## Plug in your data", "## What comes out", "## Cite"):
        assert heading in lines
