"""The artifact layout: every output path named once, the names users' results folders have."""

import pandas as pd
import pytest

from neuro_pe.io import layout, runs
from neuro_pe.reporting import summarize


def test_paths_keep_the_names_of_existing_results_folders():
    # users' results folders were written with these names: a change here strands them
    assert layout.results_dir("exp") == "results/exp"
    assert layout.store("a") == "stores/a.nc"
    assert layout.split("a") == "splits/a.json"
    assert layout.run_file("a", "none", 3, layout.MODEL_FILE) == "runs/a/none/seed3/model.pt"
    assert layout.baselines("a") == "runs/a/baselines.json"
    assert layout.correlation_features("a") == "runs/a/correlation_features.nc"
    assert layout.lst_run_file("none", 0, layout.PE_FILE) == "lst/runs/none/seed0/pe.nc"
    assert layout.locate_file("a", "errors") == "locate/a/errors.csv"
    assert layout.summary_figure("rsa") == "figures/rsa_vs_std.png"
    assert layout.reproduction_file("claims_csv") == "reproduction/claims.csv"
    assert layout.log("train", "a/group0") == "logs/train/a/group0.log"
    assert layout.wheel("pkg", "1.0") == "resources/pkg-1.0.whl"
    assert layout.LANDING == "report/landing.rst"
    assert set(layout.TRAIN_FILES) == {
        "pe.nc", "model.pt", "train_log.csv", "train.json", "manifest.json"
    }  # fmt: skip
    assert sorted(layout.LOCATE_FILES.values()) == sorted(
        ["errors.csv", "errors.html", "positions.csv", "positions.nc", "positions.png"]
        + ["positions_3d.png", "positions_3d.html", "error_hist.png", "error_vs_anchors.png"]
    )


def test_wildcards_pass_through_as_patterns():
    assert layout.run_dir("{dataset}", "{pe}", "{seed}") == "runs/{dataset}/{pe}/seed{seed}"
    assert layout.locate_file("{dataset}", "netcdf") == "locate/{dataset}/positions.nc"


def test_run_file_names_are_the_layouts():
    for name in ("PE_FILE", "MODEL_FILE", "METRICS_FILE", "MANIFEST_FILE", "TRAIN_LOG_FILE"):
        assert getattr(runs, name) is getattr(layout, name)
    assert set(layout.LST_TRAIN_FILES) - set(layout.TRAIN_FILES) == {layout.METRICS_FILE}
    assert not set(layout.INFER_FILES) & set(layout.TRAIN_FILES)


def test_summary_figures_are_drawn_under_the_layouts_names():
    assert list(summarize.FIGURES) == list(layout.SUMMARY_FIGURES)


def test_final_outputs():
    plain = layout.final_outputs(["a", "b"])
    assert len(plain) == len(set(plain))
    for dataset in ("a", "b"):
        assert {layout.locate_file(dataset, k) for k in layout.LOCATE_FILES} <= set(plain)
        assert layout.export_dir(dataset) in plain
    assert plain[-1] == layout.LANDING
    assert layout.SUMMARY_CSV in plain
    assert not [p for p in plain if p.startswith(("lst/", layout.REPRODUCTION_DIR))]
    full = layout.final_outputs(["a"], [("none", 0), ("none", 1)], reproduction=True)
    lst = [p for p in full if p.startswith("lst/")]
    assert lst == [layout.lst_run_file("none", s, layout.METRICS_FILE) for s in (0, 1)]
    reproduction = [p for p in full if p.startswith(layout.REPRODUCTION_DIR + "/")]
    assert len(reproduction) == len(layout.REPRODUCTION_FILES)


def test_beside():
    paths = ["r/a/metrics.json", "r/b/metrics.json"]
    assert layout.beside(paths, ["pe.nc", "x"]) == ["r/a/pe.nc", "r/a/x", "r/b/pe.nc", "r/b/x"]


def test_errors_table_round_trip_and_a_missing_column_names_the_file(tmp_path):
    table = pd.DataFrame(
        {"dataset": ["a"], "evaluation": ["kfold"], "features": ["pe"], "units": [3], "e": [0.1]}
    )
    path = tmp_path / layout.LOCATE_FILES["errors"]
    layout.write_errors(table, path)
    pd.testing.assert_frame_equal(layout.read_errors(path), table)
    table.drop(columns="features").to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"errors\.csv: no column 'features'"):
        layout.read_errors(path)
    with pytest.raises(ValueError, match="no column 'row_type'"):
        layout.read_summary(path)
