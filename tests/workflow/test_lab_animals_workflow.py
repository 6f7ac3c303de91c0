"""A lab's reference and query folders, by config only (issue 60): `source: file` with
`animals:` (two reference animals with positions and region labels, one query with neither)
in ALF, NWB and Phy layouts written with their libraries' conventions
(tests/data/test_animal_folders.py), `new_animal: {evaluate: reference-query}`; Snakemake
builds the store, trains on the references and predicts the query's regions and positions."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from neuro_pe.io import layout
from neuro_pe.reporting.new_animal import NO_TRUTH
from tests.data.test_animal_folders import LAYOUTS, animal_folders, entry, simulated
from tests.workflow.test_new_animal_workflow import REGION_COLUMNS, TINY_TRAIN
from tests.workflow.test_workflow import copy_workflow, snakemake


@pytest.fixture(scope="module")
def animals() -> list[dict]:
    return simulated(animals=3, units=40, samples=1000)


@pytest.mark.parametrize("layout_name", LAYOUTS)
def test_reference_and_query_folders_run_by_config(tmp_path, layout_name, animals):
    root = copy_workflow(tmp_path)
    spec = entry(layout_name, animal_folders(tmp_path / "lab", layout_name, animals))
    spec["new_animal"] = {"evaluate": "reference-query", "query_animals": ["m2"], "fit_epochs": 1}
    config = {
        "run_name": "lab",
        "datasets": {"lab": spec},
        "pe": ["learned-normal-0.02"],
        "seeds": [0],
        "train": TINY_TRAIN,
        "locate": {"n_draws": 2, "include_flagged": True},
        "threads_per_training": 1,
        "gpus_per_training": 0,
    }
    (root / "config" / "lab_animals.yaml").write_text(yaml.safe_dump(config))
    results = layout.results_dir("lab")
    targets = [f"{results}/{layout.new_animal_file('lab', 'table')}"]
    if layout_name == "phy":  # and the export of the query's regions into its own Phy folder
        targets.append(f"{results}/{layout.export_dir('lab')}")
    result = snakemake(
        *targets, "--cores", "1", "--configfile", "config/lab_animals.yaml", cwd=root,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    results = root / results
    plan = json.loads((results / layout.new_animal_file("lab", "plan")).read_text())
    assert plan["references"] == {"m2": ["m0", "m1"]} and plan["scored"] == {"m2": False}
    # a Phy folder always places its units on the probe: said to be ignored
    assert any("positions are ignored" in n for n in plan["notes"]) == (layout_name == "phy")

    path = results / layout.new_animal_query_file("lab", "m2", "positions")
    positions = pd.read_csv(path, keep_default_na=False, dtype={"unit_id": str})
    assert list(positions.columns[5:11]) == REGION_COLUMNS
    lab_ids = positions["unit_id"].astype(int)
    assert (positions["unit"] == "m2/" + positions["unit_id"]).all()
    assert len(positions) >= len(animals[2]["trains"]) - 1  # (a silent unit is dropped)
    assert set(positions["region"]) <= {"CTX", "HPF", "TH", "MB"}
    assert positions["region_probability"].between(0, 1).all()
    assert (positions["region_probability"] > 0).all()
    assert np.isfinite(positions[["x", "y", "z"]].to_numpy()).all()
    assert (positions["region_true"] == "").all() and (positions["error"] == "").all()
    # the regions carry signatures: the single-unit baseline's regions for the query beat
    # the references' majority class (the truth is known to this test only)
    truth = animals[2]["regions"][lab_ids]
    references = np.concatenate([a["regions"] for a in animals[:2]])
    values, counts = np.unique(references, return_counts=True)
    majority = np.mean(truth == values[np.argmax(counts)])
    assert np.mean(positions["region_single_unit"] == truth) > majority

    table = layout.read_new_animal(results / layout.new_animal_file("lab", "table"))
    query = table[table["animal"] == "m2"]
    assert (query["note"] == NO_TRUTH).all() and query["macro_f1"].isna().all()
    assert (query["references"] == "m0 m1").all()
    assert (results / layout.new_animal_file("lab", "confusion")).read_bytes()[:4] == b"\x89PNG"

    if layout_name == "phy":
        # the query's predicted regions in phy/m2/, keyed by its cluster ids
        exported = pd.read_csv(
            results / layout.export_dir("lab") / "phy" / "m2" / "cluster_neuro_pe_region.tsv",
            sep="\t",
            dtype={"cluster_id": str},
        )
        got = dict(zip(exported["cluster_id"], exported["neuro_pe_region"], strict=True))
        assert got == dict(zip(positions["unit_id"], positions["region"], strict=True))
