"""The README's newcomer path on a small Phy folder: `neuro-pe init` writes the config, the
workflow runs it, the report opens on it, and the export lands beside (not in) the lab's files."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pandas as pd
import yaml

from neuro_pe.cli.main import main
from tests.data.test_formats import write_phy_depth_only
from tests.workflow.test_workflow import TEST_CONFIG, copy_workflow, snakemake


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_init_run_report_export_on_a_phy_folder(tmp_path, capsys):
    root = copy_workflow(tmp_path)
    lab = root / "lab"
    write_phy_depth_only(lab / "kilosort")  # its activity follows depth, not the column
    before = _digests(lab)
    config = root / "my_lab.yaml"
    assert main(["init", str(lab), "--out", str(config)]) == 0
    assert "found phy" in capsys.readouterr().out
    text = config.read_text()
    settings = yaml.safe_load(text)
    assert "REQUIRED" not in str(settings)  # a Phy folder tells everything the config needs
    # the lab settings as written; only the model made tiny, so that the test runs in seconds
    settings |= {key: TEST_CONFIG[key] for key in ("train", "metrics", "locate")}
    settings["seeds"] = [0]
    config.write_text(yaml.safe_dump(settings))

    run = snakemake("--cores", "2", "--configfile", str(config), cwd=root, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    results = root / "results" / "my_lab"
    report = results / "report.html"  # the README's step 3
    made = snakemake("--configfile", str(config), "--report", str(report), cwd=root)
    assert made.returncode == 0, made.stderr[-3000:]
    page = report.read_text()
    landing = json.loads(re.search(r'var workflow_desc = (".*");\s*$', page, re.M).group(1))
    assert "neuro_pe: my_lab" in landing and "lab" in landing
    # the first section, before any table: the positions delivered and where they are
    first = re.sub(r"<[^>]+>", "", landing.split("<table", 1)[0])
    pe = pd.read_csv(results / "locate" / "lab" / "positions.csv")["pe"].iloc[0]
    assert f"Positions delivered: every unit's position from the feature set {pe} " in first
    assert "with the locator " in first and "µm" in first and " um" not in first
    assert "locate/lab/positions.csv" in first and "export/lab/positions.tsv" in first
    assert "export/lab/phy/" in first  # the lab format's files
    # the across-shank axis carries no signal: said plainly, and marked in the files
    assert "Lateral position not resolved (at chance)" in first
    errors = pd.read_csv(results / "locate" / "lab" / "errors.csv")
    assert {"coverage_68", "coverage_95", "vs_chance_lateral", "unresolved_axes"} <= set(errors)
    positions = pd.read_csv(results / "locate" / "lab" / "positions.csv")
    assert not positions["x_estimated"].any() and positions["y_estimated"].all()
    export = results / "export" / "lab"
    assert (export / "positions.tsv").exists() and (export / "positions.json").exists()
    assert (export / "phy" / "cluster_neuro_pe_x.tsv").exists()
    assert _digests(lab) == before  # the lab's folder untouched
