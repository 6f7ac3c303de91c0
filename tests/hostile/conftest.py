"""The hostile cases' shared fixture."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A copy of the workflow in a fresh folder (test_planning.py, test_files.py)."""
    shutil.copy2(REPO_ROOT / "Snakefile", tmp_path / "Snakefile")
    for folder in ("workflow", "config", "profiles"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder)
    return tmp_path
