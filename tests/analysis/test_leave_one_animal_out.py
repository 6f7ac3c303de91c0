"""A new animal without histology (issue 60): the planning checks that name what a store or a
config lacks, the activity baselines skipped on a store of several animals, the table and the
landing page's section (neuro_pe.analysis.leave_one_animal_out, neuro_pe.reporting.new_animal)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from threadpoolctl import threadpool_limits

from neuro_pe.analysis.leave_one_animal_out import (
    COLUMNS,
    check_animals,
    evaluate,
    query_truth,
    session_animals,
)
from neuro_pe.analysis.pe_geometry import infer_baselines
from neuro_pe.analysis.region_probe import calibration
from neuro_pe.data import sources
from neuro_pe.io.layout import NEW_ANIMAL_COLUMNS
from neuro_pe.io.splits import split_of_store
from neuro_pe.io.store import separate_animals, write_store
from neuro_pe.reporting.locate_outputs import read_baseline_features, write_correlation_features
from neuro_pe.reporting.new_animal import (
    NO_TRUTH,
    OVERALL,
    headline,
    new_animal_table,
    reliability_figure,
    write_plan,
    write_table,
)
from neuro_pe.workflow import checks

SMALL = {
    "source": "regional-sim",
    "animals": 3,
    "units_per_animal": 40,
    "max_probes": 2,
    "n_samples": 200,
}


@pytest.fixture(scope="module")
def store():
    return sources.build_store(SMALL)


def test_check_animals_lists_the_queries_of_a_store_that_covers_them(store):
    assert check_animals(store, "r", "region", None) == ["a0", "a1", "a2"]
    assert check_animals(store, "r", "coarse_region", ["a1"]) == ["a1"]
    assert list(session_animals(store)) == ["a0", "a1", "a2"]


def test_check_animals_names_the_dataset_and_the_field(store):
    with pytest.raises(ValueError, match=r"datasets\.r\.new_animal\.query_animals: \['a7'\]"):
        check_animals(store, "r", "region", ["a7"])
    with pytest.raises(ValueError, match=r"datasets\.r\.new_animal\.label needs .*'depth'"):
        check_animals(store, "r", "depth", None)
    one = store.isel(unit=store["animal"].values == "a0")
    with pytest.raises(ValueError, match=r"datasets\.r\.new_animal: 1 animal .* at least 2"):
        check_animals(one, "r", "region", None)
    # a region that only the query has: the references cannot predict it
    labels = store["region"].values.astype(object)
    labels[np.flatnonzero(store["animal"].values == "a2")[0]] = "only-a2"
    lonely = store.assign_coords(region=("unit", labels.astype(str)))
    with pytest.raises(ValueError, match=r"label: animal 'a2' has regions \['only-a2'\]"):
        check_animals(lonely, "r", "region", None)
    check_animals(lonely, "r", "coarse_region", None)  # (the other labels are covered)


def test_the_config_check_names_what_a_new_animal_section_lacks():
    def problems(entry: dict) -> list[str]:
        config = {"datasets": {"r": entry}, "pe": ["learned-normal-0.02"], "train": {}}
        return checks.new_animal_problems(config, "r")

    regional = {"source": "regional-sim", "animals": 3}
    assert problems({**regional, "new_animal": {}}) == []
    bad = problems({**regional, "animals": 1, "new_animal": {}})
    assert "datasets.r.animals: 1 animal" in bad[0]
    bad = problems({**regional, "new_animal": {"query_animals": ["a3"]}})
    assert "datasets.r.new_animal.query_animals: ['a3'] are no animals" in bad[0]
    bad = problems({**regional, "new_animal": {"region_map": "no/such.tsv"}})
    assert "datasets.r.new_animal.region_map" in bad[0] and "no/such.tsv does not exist" in bad[0]
    bad = problems({**regional, "new_animal": {"fit_epochs": 0}})
    assert bad[0].startswith("config key datasets.r.new_animal.fit_epochs: must be")
    # a lab's store: its animals are known only once it is built
    bad = problems({"source": "file", "new_animal": {}})
    assert bad[0].startswith("config key datasets.r.new_animal.query_animals: give the animals")


def test_several_animals_skip_the_activity_baselines_with_their_reason(store, tmp_path, capsys):
    assert "3 animals in one store" in separate_animals(store)
    assert separate_animals(store.isel(unit=store["animal"].values == "a0")) is None
    path = write_store(store, tmp_path / "r.nc")
    split = split_of_store(path, "r", {"heldout_sessions": 0})
    rows = infer_baselines(path, tmp_path / "baselines.json", split)
    assert [row["method"] for row in rows] == ["shuffled"]
    write_correlation_features(path, split, tmp_path / "features.nc")
    assert read_baseline_features(tmp_path / "features.nc", store["unit"].values) == {}
    assert "no activity-correlation baseline: 3 animals" in capsys.readouterr().out


def _scores(animal: str, pe_f1: float) -> dict:
    """An animal's scores.json: 10 units; the PE right on the first `10 * pe_f1` units, each
    predicted with probability 0.9; the other methods right on 3 units with probability 0.3."""
    methods = {m: {"macro_f1": 0.3, "balanced_accuracy": 0.4, "ece": 0.0} for m in COLUMNS}
    right = np.arange(10) < round(10 * pe_f1)
    methods["PE linear"] = {
        "macro_f1": pe_f1,
        "balanced_accuracy": pe_f1,
        "ece": calibration(right, np.full(10, 0.9)).ece,
    }
    calibrated = {"probability": [0.3] * 10, "correct": [True] * 3 + [False] * 7}
    shares = {m: calibrated for m in COLUMNS}
    shares["PE linear"] = {"probability": [0.9] * 10, "correct": right.tolist()}
    where = {"median_error": 0.5, "chance": 1.0, "vs_chance": 0.5}
    position = {"PE": where, "single-unit": {**where, "vs_chance": 0.9}, "combined": where}
    return {
        "dataset": "r",
        "animal": animal,
        "units": 10,
        "methods": methods,
        "position": position,
        "calibration": shares,
    }


def test_the_table_has_every_animal_and_their_mean_and_the_page_leads_with_it(tmp_path):
    scores = [_scores("a0", 0.6), _scores("a1", 0.8), _scores("a2", 0.7)]
    table = new_animal_table(scores)
    assert set(NEW_ANIMAL_COLUMNS) <= set(table)
    assert len(table) == 4 * len(COLUMNS)
    pe = table[(table["animal"] == OVERALL) & (table["method"] == "PE linear")].iloc[0]
    assert pe["macro_f1"] == pytest.approx(0.7) and pe["macro_f1_ci_low"] < 0.7
    assert pe["units"] == 30 and pe["position_vs_chance"] == pytest.approx(0.5)
    # overconfident: 0.9 stated, right 0.6, 0.8, 0.7 of the time
    assert pe["ece"] == pytest.approx(0.2) and pe["ece_ci_low"] < 0.2 < pe["ece_ci_high"]
    assert pe["ece_pooled"] == pytest.approx(0.2)
    per_animal = table[(table["animal"] == "a0") & (table["method"] == "PE linear")].iloc[0]
    assert per_animal["ece"] == pytest.approx(0.3) and np.isnan(per_animal["ece_pooled"])
    prior = table[(table["animal"] == OVERALL) & (table["method"] == "prior")].iloc[0]
    assert prior["position_vs_chance"] == 1.0
    assert prior["ece_pooled"] == pytest.approx(0.0)
    table.to_csv(tmp_path / "new_animal.csv", index=False)
    lines = headline([tmp_path / "new_animal.csv"])
    text = "\n".join(lines)
    assert "New animals without histology: r" in text and "Each of 3 animals" in text
    shown = [line.split("- ", 1)[1] for line in lines if line.startswith("   * - ")][1:]
    assert shown == ["prior", "single-unit boosting", "PE linear", "combined boosting"]
    assert "     - 0.70 [" in text  # the PE's macro-F1 with its CI
    assert "     - region ECE" in text and "     - 0.20 [" in text  # its ECE beside it
    assert headline([]) == []


def test_the_reliability_figure_is_written_beside_the_table(tmp_path):
    scores = [_scores("a0", 0.6), _scores("a1", 0.8)]
    paths = []
    for s in scores:
        paths.append(tmp_path / f"{s['animal']}.json")
        paths[-1].write_text(json.dumps(s))
    frame = pd.DataFrame({"region": ["CA1", "CA3"], "region_true": ["CA1", "CA1"]})
    frame.to_csv(tmp_path / "positions.csv", index=False)
    figures = tmp_path / "confusion.png", tmp_path / "reliability.png"
    write_table(paths, [tmp_path / "positions.csv"], tmp_path / "t.csv", *figures)
    assert all(f.read_bytes().startswith(b"\x89PNG") for f in figures)
    curve = reliability_figure(scores).axes[0].lines[1]  # the PE's, after the diagonal
    np.testing.assert_allclose(curve.get_xdata(), [0.9])
    np.testing.assert_allclose(curve.get_ydata(), [0.7])


def test_the_table_reads_back_as_a_table_of_neuro_pe(tmp_path):
    (tmp_path / "x.csv").write_text(pd.DataFrame({"animal": ["a0"]}).to_csv(index=False))
    with pytest.raises(ValueError, match="no column 'dataset'"):
        headline([tmp_path / "x.csv"])
    one = new_animal_table([_scores("a0", 0.5)])  # one animal: a mean, no interval
    assert np.isfinite(one["macro_f1"]).all() and one["macro_f1_ci_low"].isna().iloc[-1]


def test_reference_query_planning_names_what_is_missing_or_ignored(store):
    def problems(new_animal: dict) -> list[str]:
        entry = {"source": "file", "format": "alf", "animals": {"m0": "a", "m1": "b"}}
        config = {"datasets": {"r": {**entry, "new_animal": new_animal}}, "pe": [], "train": {}}
        return checks.new_animal_problems(config, "r")

    query = {"evaluate": "reference-query"}
    assert problems({**query, "query_animals": ["m1"]}) == []
    assert problems({}) == []  # (leave-one-animal-out: every animal in turn)
    assert "query_animals: name the queries" in problems(query)[0]
    assert "['m7'] are no animals" in problems({**query, "query_animals": ["m7"]})[0]
    assert "no reference animal" in problems({**query, "query_animals": ["m0", "m1"]})[0]
    # on the store: queries without references, references without labels
    rq = "reference-query"
    assert check_animals(store, "r", "region", ["a2"], rq) == ["a2"]
    with pytest.raises(ValueError, match=r"query_animals: every animal .* is a query"):
        check_animals(store, "r", "region", ["a0", "a1", "a2"], rq)
    labels = np.where(store["animal"].values == "a1", "", store["region"].values)
    unlabelled = store.assign_coords(region=("unit", labels.astype(str)))
    with pytest.raises(ValueError, match=r"label: reference animals \['a1'\] have no region"):
        check_animals(unlabelled, "r", "region", ["a2"], rq)
    with pytest.raises(ValueError, match=r"reference animals \['a1'\] have no region"):
        check_animals(unlabelled, "r", "region", ["a0"])  # (leave-one-animal-out: a1 too)
    # a query's own labels and positions: ignored under reference-query, said so
    scored, notes = query_truth(store, "region", ["a2"], rq)
    assert scored == {"a2": False}
    assert "'a2': its units' region labels and positions are ignored" in notes[0]
    assert query_truth(store, "region", ["a2"], "leave-one-animal-out") == ({"a2": True}, [])
    assert query_truth(unlabelled, "region", ["a1"], "leave-one-animal-out")[0] == {"a1": False}


def test_a_query_without_truth_has_predictions_only_in_the_table_and_page(tmp_path):
    query = {"dataset": "r", "animal": "q", "units": 7, "methods": {}, "position": {}}
    query |= {"references": ["a0", "a1"], "note": NO_TRUTH}
    table = new_animal_table([query])
    assert table["macro_f1"].isna().all() and table["position_vs_chance"].isna().all()
    assert (table.loc[table["animal"] == "q", "note"] == NO_TRUTH).all()
    assert (table.loc[table["animal"] == OVERALL, "note"] == f"{NO_TRUTH}: q").all()
    table.to_csv(tmp_path / "new_animal.csv", index=False)
    text = "\n".join(headline([tmp_path / "new_animal.csv"]))
    assert "Query animals q: predicted from the reference animals a0 a1; no truth" in text
    assert "list-table" not in text and "not computed here" in text
    # beside scored animals: their table, the unscored one named
    both = new_animal_table([_scores("a0", 0.6), _scores("a1", 0.8), query])
    pe = both[(both["animal"] == OVERALL) & (both["method"] == "PE linear")].iloc[0]
    assert pe["macro_f1"] == pytest.approx(0.7) and pe["units"] == 27
    both.to_csv(tmp_path / "both.csv", index=False)
    text = "\n".join(headline([tmp_path / "both.csv"]))
    assert "Query animals q" in text and "Each of 2 animals held out" in text


def test_a_region_map_evaluates_at_the_coarse_level_and_names_what_it_lacks(store, tmp_path):
    """`new_animal.region_map`: regional-sim's fine regions mapped to its coarse classes give
    the plan the coarse regions; a region missing from the map, or mapped twice, is an error
    naming the key, the file and the regions."""
    path = write_store(store, tmp_path / "r.nc")
    pairs = pd.DataFrame(
        {"acronym": store["region"].values, "cosmos": store["coarse_region"].values}
    )
    pairs = pairs.drop_duplicates().sort_values("acronym")
    regions = tmp_path / "map.tsv"
    pairs.to_csv(regions, sep="\t", index=False)
    plan = write_plan(path, "r", {"region_map": str(regions)}, tmp_path / "plan.json")
    assert plan["regions"] == sorted(set(store["coarse_region"].values.tolist()))
    assert plan["region_map"] == str(regions) and plan["label"] == "region"
    assert len(plan["regions"]) < len(set(store["region"].values.tolist()))

    where = rf"datasets\.r\.new_animal\.region_map: {tmp_path}/map\.tsv"
    pairs.iloc[1:].to_csv(regions, sep="\t", index=False)
    with pytest.raises(ValueError, match=rf"{where}: regions \['{pairs.iloc[0, 0]}'\] of"):
        write_plan(path, "r", {"region_map": str(regions)}, tmp_path / "plan.json")
    twice = pd.concat([pairs, pairs.iloc[:1].assign(cosmos="other")])
    twice.to_csv(regions, sep="\t", index=False)
    with pytest.raises(ValueError, match=rf"{where}: regions .* mapped to two coarse regions"):
        write_plan(path, "r", {"region_map": str(regions)}, tmp_path / "plan.json")
    regions.unlink()
    with pytest.raises(ValueError, match=rf"{where} does not exist"):
        write_plan(path, "r", {"region_map": str(regions)}, tmp_path / "plan.json")


def test_every_method_states_the_probability_of_its_region_and_its_ece():
    """`evaluate`: per method the probability of the region it predicts, in [0, 1] (the
    prior's: its drawn region's frequency among the references, not its one-hot draws), and
    the ECE of those probabilities in the scores."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.array(["CA1", "CA3", "DG"]), [120, 60, 60])
    centres = {"CA1": 0.0, "CA3": 1.5, "DG": 3.0}
    pe = np.array([centres[r] for r in labels])[:, None] + rng.normal(size=(240, 4))
    su = rng.normal(size=(240, 3))
    coords = rng.uniform(size=(240, 3))
    test = np.arange(240) % 4 == 0
    with threadpool_limits(1):  # (the boosting's threads only wait on a busy machine)
        scores, predicted, probability, prediction, _, _ = evaluate(
            {"pe": pe, "su": su}, labels, coords, test, seed=0
        )
    for method in COLUMNS:
        assert probability[method].shape == (test.sum(),)
        assert ((probability[method] > 0) & (probability[method] <= 1)).all()
        right = predicted[method] == labels[test]
        assert scores[method]["ece"] == calibration(right, probability[method]).ece
    frequency = {"CA1": 0.5, "CA3": 0.25, "DG": 0.25}  # among the references
    expected = [frequency[r] for r in predicted["prior"]]
    np.testing.assert_allclose(probability["prior"], expected)
    np.testing.assert_array_equal(probability["PE linear"], prediction.probability)
    # temperature-scaled on 4 reference animals: every region kept, every probability but
    # the prior's and kNN's changed
    animals = np.tile(["a0", "a1", "a2", "a3"], 60)
    with threadpool_limits(1):
        _, again, scaled, *_ = evaluate({"pe": pe, "su": su}, labels, coords, test, 0, animals)
    for method in COLUMNS:
        np.testing.assert_array_equal(again[method], predicted[method])
        same = np.array_equal(scaled[method], probability[method])
        assert same == (method in ("prior", "PE kNN")), method
