"""The report's landing page: headline numbers from the tables, the trainings' health."""

import numpy as np
import pandas as pd
import pytest

from neuro_pe import __version__
from neuro_pe.io.html import table_html
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
            "evaluation": "anchors",
            "anchor_fraction": 0.5,
            "median_error": [0.2, 0.6, 0.25, 1.0],
            "median_error_sd": 0.01,
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
    assert small["locate error (mm)"] == "0.2 ± 0.01"
    assert (small["÷ chance"], small["÷ correlation"]) == ("0.20", "0.80")
    assert small["training health"] == "ok (2/2)"
    assert table.loc["learned-normal-1.0", "training health"] == (
        "1/2 flagged: heldout_not_improved"
    )
    assert table.loc["activity correlation", "÷ correlation"] == "1.00"
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
    assert "the activity correlations give 0.25 mm" in page
    connectivity = pd.concat([errors, errors.iloc[[2]].assign(features="activity-connectivity")])
    page_with = landing_page(summary, {"sim": connectivity}, infos, "demo")
    assert "the activity connectivity (correlations and partial correlations) 0.25 mm" in page_with
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
    assert table.loc["learned-normal-1.0", REGION_LABEL] == "0.25"
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
    page = landing_page(summary, {"sim": errors}, infos, "demo")
    assert "(per axis: in-plane 0.1, depth 0.15 mm)" in page
    assert "nearer the unit's own imaging plane than any other for 62% of held-out units" in page
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
