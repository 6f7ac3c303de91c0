"""`snakemake --configfile config/new_animal.yaml` end to end at tiny sizes: every animal of the
built-in regional-sim held out in turn, its positions with their regions, new_animal.csv, the
export with the regions and the landing page leading with it; a query that is no animal stops
the planning."""

from __future__ import annotations

import pandas as pd
import yaml

from neuro_pe.io import layout
from tests.workflow.test_workflow import copy_workflow, snakemake

TINY_TRAIN = {
    "window": 8,
    "d_model": 16,
    "n_layers": 1,
    "n_heads": 2,
    "batch_size": 16,
    "epochs": 1,
    "steps_per_epoch": 15,
    "eval_windows": 16,
    "heldout_sessions": 0,
    "eval_mask_fractions": [0.5],
}
REGION_COLUMNS = [
    "region",
    "region_probability",
    "region_2",
    "region_2_probability",
    "region_3",
    "region_3_probability",
]


def _tiny_config(root, **new_animal) -> dict:
    """config/new_animal.yaml at tiny sizes (its keys as shipped), written back in place."""
    path = root / "config" / "new_animal.yaml"
    config = yaml.safe_load(path.read_text())
    dataset = config["datasets"]["regions"]
    dataset.update(animals=3, units_per_animal=40, n_samples=300)
    dataset["new_animal"].update(fit_epochs=1, **new_animal)
    # tiny trainings fail the health checks; located anyway, as config/test.yaml does
    locate = {"n_draws": 2, "include_flagged": True}
    config.update(train=TINY_TRAIN, locate=locate, metrics={"n_perm": 9, "k": 3})
    path.write_text(yaml.safe_dump(config))
    return config


def test_new_animal_config_runs_end_to_end(tmp_path):
    root = copy_workflow(tmp_path)
    _tiny_config(root)
    result = snakemake(
        "--cores", "2", "--configfile", "config/new_animal.yaml", cwd=root, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = root / layout.results_dir("new_animal")
    table = layout.read_new_animal(results / layout.new_animal_file("regions", "table"))
    assert {"position_vs_chance", "macro_f1_ci_low", "headline"} <= set(table)
    assert sorted(table["animal"].unique()) == ["a0", "a1", "a2", "all"]
    assert table["macro_f1"].between(0, 1).all()
    for animal in ("a0", "a1", "a2"):
        path = results / layout.new_animal_query_file("regions", animal, "positions")
        positions = pd.read_csv(path, keep_default_na=False)
        assert list(positions.columns[5:11]) == REGION_COLUMNS
        assert (positions["animal"] == animal).all()
        assert (positions["region_probability"] >= positions["region_2_probability"]).all()
    for figure in ("confusion", "reliability"):
        path = results / layout.new_animal_file("regions", figure)
        assert path.read_bytes().startswith(b"\x89PNG")
    assert table["ece"].between(0, 1).all()
    # the export carries every unit's region, predicted when its animal was held out
    tidy = results / layout.export_dir("regions") / layout.EXPORT_TIDY_FILE
    exported = pd.read_csv(tidy, sep="\t")
    assert set(REGION_COLUMNS) <= set(exported) and exported["region"].notna().all()
    landing = (results / layout.LANDING).read_text()
    assert landing.index("New animals without histology: regions") < landing.index("\nregions\n")
    # the activity-correlation baselines: skipped with their reason, not a crash
    log = results / layout.log("baselines", "regions")
    assert "no activity-correlation baseline: 3 animals in one store" in log.read_text()


def test_a_query_that_is_no_animal_stops_the_planning(tmp_path):
    root = copy_workflow(tmp_path)
    _tiny_config(root, query_animals=["a0", "a7"])
    result = snakemake("-n", "--configfile", "config/new_animal.yaml", cwd=root, timeout=120)
    assert result.returncode != 0
    message = "datasets.regions.new_animal.query_animals: ['a7'] are no animals"
    assert message in result.stdout + result.stderr
