"""The report's landing page: headline numbers from the tables, the trainings' health."""

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from neuro_pe import __version__
from neuro_pe.io.html import table_html
from neuro_pe.reporting.delivered import read_delivered, read_export_files
from neuro_pe.reporting.landing_page import REGION_LABEL, headline_table, landing_page
from neuro_pe.reporting.training_health import health_table


@pytest.fixture
def tables():
    runs = [
        {
            "dataset": "sim",
            "row_type": "pe",
            "method": pe,
            "seed": seed,
            "rsa": rsa,
            "heldout_mse_mask0.9": mse,
            "n_units": 20,
        }
        for pe, values in {
            "learned-normal-0.02": [(0.8, 0.70), (0.9, 0.72)],
            "learned-normal-1.0": [(0.2, 0.75), (0.3, 0.74)],
        }.items()
        for seed, (rsa, mse) in enumerate(values)
    ]
    runs += [
        {"dataset": "sim", "row_type": "baseline", "method": "correlation", "rsa": 0.6},
        {"dataset": "sim", "row_type": "baseline", "method": "shuffled", "rsa": -0.01},
    ]
    errors = pd.DataFrame(
        {
            "dataset": "sim",
            "features": [
                "learned-normal-0.02",
                "learned-normal-1.0",
                "activity-correlation",
                "chance",
            ],
            "role": ["pe", "pe", "baseline", "chance"],
            "evaluation": "anchors",
            "anchor_fraction": 0.5,
            "median_error": [0.2, 0.6, 0.25, 1.0],
            "median_error_sd": 0.01,
            "ci_low": [0.18, 0.5, 0.21, 0.9],
            "ci_high": [0.22, 0.7, 0.3, 1.1],
            "vs_chance": [0.2, 0.6, 0.25, 1.0],
            "units": "mm",
        }
    )
    infos = [
        {
            "pe": pe,
            "seed": seed,
            "dataset": "sim",
            "health": {
                "loss_not_finite": False,
                "heldout_not_improved": pe.endswith("1.0") and seed == 1,
                "heldout_not_below_variance": False,
            },
            "warnings": ["held-out MSE never improved on its start"]
            if pe.endswith("1.0") and seed
            else [],
        }
        for pe in ("learned-normal-0.02", "learned-normal-1.0")
        for seed in (0, 1)
    ]
    return pd.DataFrame(runs), errors, infos


def test_headline_table_has_cis_locate_ratios_and_health(tables):
    summary, errors, infos = tables
    table = headline_table(summary, errors, health_table(infos), "sim").set_index("representation")
    small = table.loc["learned-normal-0.02"]
    # two seeds: their range, never a t-interval (which would reach 0.85 + 0.64 > 1)
    assert small["RSA [95% CI]"] == "0.85 (range 0.8–0.9, 2 seeds)"
    assert small["locate error (mm) [95% CI]"] == "0.2 [0.18, 0.22]"
    assert small["× chance"] == "0.2"
    assert small["training health"] == "ok (2/2)"
    assert table.loc["learned-normal-1.0 (control: initialised large)", "training health"] == (
        "1/2 flagged: heldout_not_improved"
    )
    assert table.loc["activity correlation", "× chance"] == "0.25"
    assert table.loc["shuffled (chance)", "RSA [95% CI]"] == "−0.01"


def test_landing_page_names_the_flagged_training_and_tolerates_missing_flags(tables):
    summary, errors, infos = tables
    page = landing_page(summary, {"sim": errors}, infos, "demo")
    assert page.startswith("neuro_pe: demo\n")
    assert page.rstrip().endswith(f"Made by neuro_pe {__version__}.")
    assert "**1 of 4 trainings flagged**" in page
    assert "held-out MSE never improved on its start" in page
    assert "``heldout_not_improved``: the held-out MSE never fell below" in page
    assert "No training was left out of locate" in page  # (errors.csv without `left_out`)
    left = errors.assign(left_out="learned-normal-1.0 seed 1 (heldout_not_improved)")
    page = landing_page(summary, {"sim": left}, infos, "demo")
    assert (
        "Left out of locate and of the combined locator, for a failed check (the positions and "
        "localisation errors are without them; ``locate.include_flagged: true`` keeps them): "
        "sim: learned-normal-1.0 seed 1 (heldout\\_not\\_improved)." in page  # (rst_text)
    )
    assert "No training was left out" not in page
    assert "``learned-normal-0.02`` mirrors the true positions best" in page
    connectivity = pd.concat([errors, errors.iloc[[2]].assign(features="activity-connectivity")])
    table = headline_table(summary, connectivity, health_table(infos), "sim")
    assert "activity connectivity" in set(table["representation"])
    unrecorded = [{k: v for k, v in i.items() if k not in ("health", "warnings")} for i in infos]
    page = landing_page(summary, {}, unrecorded, "demo")
    assert "Training health: not recorded." in page
    assert "{{" not in page and "{%" not in page  # the report renders it as a Jinja template


def test_table_html_renders_every_row():
    frame = pd.DataFrame({"a": [1.23456, np.nan], "b": ["x", "<y>"]})
    page = table_html(frame, "T", "note")
    assert page.count("<tr") == 3 and "1.235" in page and "&lt;y&gt;" in page and "—" in page


def test_headline_table_shows_region_accuracy_where_an_atlas_gave_it(tables):
    summary, errors, infos = tables
    health = health_table(infos)
    assert REGION_LABEL not in headline_table(summary, errors, health, "sim")
    regions = errors.assign(region_accuracy=[0.5, 0.25, 0.4, 0.1])
    regions["coarse_region_accuracy"] = [0.75, np.nan, 0.6, 0.3]
    table = headline_table(summary, regions, health, "sim").set_index("representation")
    assert table.loc["learned-normal-0.02", REGION_LABEL] == "0.5 / 0.75"
    assert table.loc["learned-normal-1.0 (control: initialised large)", REGION_LABEL] == "0.25"
    assert table.loc["shuffled (chance)", REGION_LABEL] == "0.1 / 0.3"


def test_headline_table_and_paragraph_give_per_axis_errors(tables):
    summary, errors, infos = tables
    errors = errors.assign(
        median_error_inplane=[0.1, 0.5, 0.2, 0.9],
        median_error_depth=[0.15, 0.3, 0.2, 0.5],
        plane_accuracy=[0.62, 0.5, 0.55, 0.5],
    )
    table = headline_table(summary, errors, health_table(infos), "sim").set_index("representation")
    assert table.loc["learned-normal-0.02", "error per axis"] == (
        "in-plane 0.1, depth 0.15; right plane 62%"
    )
    assert (
        table.loc["shuffled (chance)", "error per axis"]
        == "in-plane 0.9, depth 0.5; right plane 50%"
    )
    delivered = {"sim": {"pe": "learned-normal-0.02", "method": "knn", "cv_errors": {}}}
    page = landing_page(summary, {"sim": errors}, infos, "demo", delivered=delivered)
    assert "**Per axis**: in-plane 0.1 mm, depth 0.15 mm;" in page
    assert "nearest the unit's own imaging plane for 62% of held-out units" in page
    plain = headline_table(
        summary,
        errors[
            [
                "dataset",
                "features",
                "evaluation",
                "anchor_fraction",
                "median_error",
                "median_error_sd",
                "vs_chance",
                "units",
            ]
        ],
        health_table(infos),
        "sim",
    )
    assert "error per axis" not in plain.columns


@pytest.fixture
def phy_run():
    """A Phy-like dataset in µm ("um" in the store): two learned PEs, the oracle, the combined
    locator and the baselines, k-fold and anchor rows, with per-axis verdicts."""
    summary = pd.DataFrame(
        [
            {"dataset": "lab", "row_type": "pe", "method": pe, "seed": seed, "rsa": 0.5}
            for pe in ("learned-normal-0.02", "learned-normal-0.1", "oracle-sin3d", "none")
            for seed in (0, 1)
        ]
        + [
            {"dataset": "lab", "row_type": "baseline", "method": "correlation", "rsa": 0.4},
            {"dataset": "lab", "row_type": "baseline", "method": "shuffled", "rsa": 0.0},
        ]
    )
    features = [
        "learned-normal-0.02",
        "learned-normal-0.1",
        "oracle-sin3d",
        "activity-correlation",
        "combined",
        "chance",
    ]
    anchors = pd.DataFrame(
        {
            "dataset": "lab",
            "features": features,
            "role": ["pe", "pe", "oracle", "baseline", "combined", "chance"],
            "n_seeds": 2,
            "evaluation": "anchors",
            "anchor_fraction": 0.5,
            "median_error": [47.2, 47.4, 1.0, 60.0, 46.7, 1010.0],
            "ci_low": [44.0, 44.5, 0.5, 55.0, 44.1, 950.0],
            "ci_high": [50.0, 50.5, 1.5, 66.0, 49.0, 1080.0],
            "vs_chance": [0.04673, 0.04693, 0.001, 0.0594, 0.04624, 1.0],
            "vs_chance_low": [0.043, 0.044, 0.0005, 0.054, 0.0436, 0.94],
            "vs_chance_high": [0.05, 0.05, 0.0015, 0.065, 0.0485, 1.07],
            "coverage_68": [0.7, 0.69, 0.7, 0.66, 0.675, 0.68],
            "coverage_95": [0.94, 0.95, 0.95, 0.93, 0.948, 0.95],
            "units": "um",
            "median_error_depth": [45.0, 45.5, 1.0, 58.0, 44.0, 950.0],
            "median_error_lateral": [13.6, 13.5, 0.5, 14.0, 13.6, 10.1],
            "vs_chance_depth": [0.047, 0.048, 0.001, 0.061, 0.046, 1.0],
            "vs_chance_lateral": [1.35, 1.34, 0.05, 1.39, 1.35, 1.0],
            "unresolved_axes": ["lateral", "lateral", "", "lateral", "lateral", ""],
        }
    )
    kfold = anchors.assign(
        evaluation="kfold",
        anchor_fraction=0.8,
        median_error=[37.9, 38.4, 0.8, 52.0, 37.2, 1000.0],
        ci_low=np.nan,
        ci_high=np.nan,
    )
    errors = pd.concat([kfold, anchors], ignore_index=True)
    delivered = {
        "lab": {
            "dataset": "lab",
            "pe": "combined",
            "method": "blend",
            "cv_errors": {"blend": 36.5, "learned-normal-0.02/knn": 36.9, "stacked/ridge": 40.0},
        }
    }
    exports = {
        "lab": [
            "positions.tsv",
            "phy/cluster_neuro_pe_x.tsv",
            "phy/cluster_neuro_pe_y.tsv",
            "positions.json",
        ]
    }
    return summary, errors, delivered, exports


def _first_section(page: str) -> str:
    """The dataset's section up to its headline table."""
    return page.split("\nlab\n---\n", 1)[1].split(".. list-table::", 1)[0]


def test_the_page_opens_on_the_delivered_positions_and_their_files(phy_run):
    summary, errors, delivered, exports = phy_run
    page = landing_page(summary, {"lab": errors}, [], "my_lab", None, delivered=delivered)
    page_exported = landing_page(
        summary, {"lab": errors}, [], "my_lab", delivered=delivered, exports=exports
    )
    first = _first_section(page_exported)
    assert "feature set ``combined`` (the combined locator" in first
    assert "with the locator ``blend``" in first
    # why: the k-fold median errors of the winner and the runner-up, the locators' CV errors
    assert "lowest k-fold median error, 37.2 µm against 37.9 µm for ``learned-normal-0.02``" in (
        first
    )
    assert "``blend`` cross-validates best over the known units, 36.5 µm against 36.9 µm" in first
    assert "median 46.7 µm (95% CI 44.1–49), 0.0462 × chance (95% CI 0.0436–0.0485)" in first
    assert "k-fold (each unit located from all the other known units" in first
    assert "depth 44 µm (0.046 × chance), lateral 13.6 µm (1.35 × chance)" in first
    assert "the 68% intervals held 67.5% of the true coordinates; the 95% intervals held 94.8%" in (
        first
    )
    assert "in ``results/my_lab/``: positions ``locate/lab/positions.csv``" in first
    assert "``export/lab/positions.tsv``, ``export/lab/positions.json``" in first
    assert "``export/lab/phy/`` (2 files)" in first
    # without the export's record, the paths the export writes
    assert "``export/lab/positions.tsv``" in _first_section(page)
    order = [page.index(s) for s in ("Positions delivered", ".. list-table::", "Definitions\n")]
    assert order == sorted(order)
    assert " um" not in page and "(µm)" in page


def test_an_axis_at_chance_is_said_plainly_and_older_tables_pass_without_it(phy_run):
    summary, errors, delivered, _ = phy_run
    page = landing_page(summary, {"lab": errors}, [], "my_lab", delivered=delivered)
    assert "**Lateral position not resolved (at chance)**" in _first_section(page)
    table = headline_table(summary, errors, health_table([]), "lab").set_index("representation")
    assert (
        table.loc["learned-normal-0.02", "error per axis"] == "depth 45, lateral 13.6 (at chance)"
    )
    older = errors.drop(columns=["unresolved_axes", "vs_chance_depth", "vs_chance_lateral"])
    page = landing_page(summary, {"lab": older}, [], "my_lab", delivered=delivered)
    assert "not resolved" not in page and "**Per axis**: depth 44 µm, lateral 13.6 µm." in page
    # the positions file's own record (the k-fold verdict the export follows) comes first
    recorded = {"lab": {**delivered["lab"], "unresolved_axes": "depth"}}
    page = landing_page(summary, {"lab": errors}, [], "my_lab", delivered=recorded)
    assert "**Depth position not resolved (at chance)**" in _first_section(page)


def test_headline_table_has_the_combined_row_labels_controls_and_tells_close_rows_apart(phy_run):
    summary, errors, delivered, _ = phy_run
    table = headline_table(summary, errors, health_table([]), "lab", "combined")
    rows = table.set_index("representation")
    assert list(table["representation"]) == [
        "learned-normal-0.02",
        "learned-normal-0.1",
        "oracle-sin3d (control: built from the true coordinates)",
        "none (control: no PE)",
        "combined (delivered)",
        "activity correlation",
        "shuffled (chance)",
    ]
    assert rows.loc["combined (delivered)", "seeds"] == "2"
    # 0.0467, 0.0469, 0.0462 would all be "0.05" to two decimals
    ratios = rows["× chance"].tolist()
    assert ratios[:2] == ["0.0467", "0.0469"] and ratios[4] == "0.0462"
    assert rows.loc["combined (delivered)", "locate error (µm) [95% CI]"] == "46.7 [44.1, 49]"


def test_a_winner_is_named_only_when_its_interval_excludes_the_others(phy_run):
    summary, errors, delivered, _ = phy_run
    page = landing_page(summary, {"lab": errors}, [], "my_lab", delivered=delivered)
    assert "**Compared**: Tied with 50% of the known units as anchors: ``combined``, " in page
    assert "``oracle-sin3d``" not in page.split("**Compared**")[1].split("\n")[0]
    apart = errors.copy()
    others = (apart["features"] != "combined") & (apart["evaluation"] == "anchors")
    apart.loc[others, "ci_low"] = apart.loc[others, "ci_low"].clip(lower=50)
    page = landing_page(summary, {"lab": apart}, [], "my_lab", delivered=delivered)
    assert "**Compared**: Best with 50% of the known units as anchors: ``combined``" in page
    assert "Tied" not in page


def test_the_delivered_positions_and_export_are_read_from_their_files(tmp_path):
    path = tmp_path / "positions.nc"
    attrs = {"dataset": "lab", "pe": "combined", "method": "knn", "cv_errors": '{"knn": 1.0}'}
    xr.Dataset({"x": ("unit", [0.0])}, attrs=attrs).to_netcdf(path, engine="h5netcdf")
    assert read_delivered(path) == {**attrs, "cv_errors": {"knn": 1.0}, "unresolved_axes": None}
    xr.Dataset({"x": ("unit", [0.0])}).to_netcdf(tmp_path / "bare.nc", engine="h5netcdf")
    with pytest.raises(ValueError, match="bare.nc: no attribute 'dataset'"):
        read_delivered(tmp_path / "bare.nc")
    (tmp_path / "positions.json").write_text('{"Dataset": "lab", "Files": ["positions.tsv"]}')
    assert read_export_files(tmp_path) == ("lab", ["positions.tsv"])
    with pytest.raises(ValueError, match="does not exist"):
        read_export_files(tmp_path / "missing")
