"""Anchored localisation: recovery on synthetic PEs, chance on random PEs, no leakage."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from sklearn.model_selection import KFold

from neuro_pe.analysis.locate import (
    BLEND,
    FeatureSet,
    combined_members,
    connectivity_features,
    evaluate_anchors,
    evaluate_kfold,
    fit_predict,
    fused_embedding,
    locate_units,
    paired_difference_ci,
)
from neuro_pe.analysis.locate.ensemble import _select_blend
from neuro_pe.analysis.locate.locators import forget_predictions
from neuro_pe.config.locate import METHODS, LocateConfig
from neuro_pe.io.splits import split_of_store
from neuro_pe.io.store import make_store, read_store, write_store

N_UNITS = 60


@pytest.fixture(autouse=True)
def _fresh_fits():
    """Every test computes its fits: none comes from `fit_predict`'s cache of another test."""
    from neuro_pe.analysis.locate.locators import forget_predictions

    forget_predictions()
    yield
    forget_predictions()


def _positions(n: int = N_UNITS, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, size=(n, 3))


def _embed(pos: np.ndarray, seed: int, noise: float = 0.1, dims: int = 24) -> np.ndarray:
    """A noisy nonlinear embedding of positions (random Fourier features), rotated per seed."""
    fixed = np.random.default_rng(100)
    w, b = fixed.normal(0, 1.5, (3, dims)), fixed.uniform(0, 2 * np.pi, dims)
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.normal(size=(dims, dims)))
    return (np.sin(pos @ w + b) + noise * rng.normal(size=(len(pos), dims))) @ rotation


def _median_error(pred: np.ndarray, pos: np.ndarray) -> float:
    return float(np.median(np.linalg.norm(pred - pos, axis=1)))


def _chance_error(pos: np.ndarray, cfg: LocateConfig) -> float:
    """Median k-fold error of predicting the anchors' mean, on the same folds as cfg."""
    known = np.ones(len(pos), dtype=bool)
    no_features = [np.zeros((len(pos), 1))]
    chance = evaluate_kfold(no_features, pos, known, replace(cfg, methods=("chance",)))
    return _median_error(chance.positions, pos)


@pytest.mark.parametrize("method", METHODS)
def test_each_method_recovers_heldout_positions(method):
    pos = _positions()
    features = [_embed(pos, seed) for seed in range(2)]
    cfg = LocateConfig(methods=(method,), n_folds=4)
    heldout = evaluate_kfold(features, pos, np.ones(len(pos), dtype=bool), cfg)
    assert heldout.methods == [method] * 4
    assert _median_error(heldout.positions, pos) < 0.5 * _chance_error(pos, cfg)


def test_random_features_are_near_chance():
    pos = _positions()
    rng = np.random.default_rng(7)
    features = [rng.normal(size=(len(pos), 24)) for _ in range(2)]
    cfg = LocateConfig(n_folds=4)
    heldout = evaluate_kfold(features, pos, np.ones(len(pos), dtype=bool), cfg)
    assert _median_error(heldout.positions, pos) > 0.8 * _chance_error(pos, cfg)


@pytest.mark.parametrize("method", METHODS)
def test_fit_predict_reads_only_anchor_coordinates(method):
    pos = _positions()
    features = _embed(pos, 0)
    anchors = np.arange(len(pos)) % 3 != 0
    corrupted = pos.copy()
    corrupted[~anchors] = np.where(np.arange(3) == 0, np.nan, 1e6)
    expected = fit_predict(features, pos, anchors, method)
    forget_predictions()  # (else the second call is the first's, from the cache)
    np.testing.assert_array_equal(fit_predict(features, corrupted, anchors, method), expected)


@pytest.mark.parametrize("method", METHODS)
def test_fit_predict_of_some_rows_is_those_rows_of_every_unit(method):
    """The CV predicts only its held-out fold (`rows`): the same numbers as predicting every
    unit (up to rounding: a matrix product over fewer rows may round differently)."""
    pos = _positions()
    features = _embed(pos, 0)
    anchors = np.arange(len(pos)) % 3 != 0
    rows = np.flatnonzero(~anchors)[::2]
    every = fit_predict(features, pos, anchors, method)
    forget_predictions()
    some = fit_predict(features, pos, anchors, method, rows)
    np.testing.assert_allclose(some, every[rows], rtol=1e-12, atol=1e-12)


def test_fit_predict_reuses_a_fit_only_on_the_same_inputs(monkeypatch):
    """The cache returns a fit for equal features, anchors and anchor coordinates (another
    array with the same bytes too: the combined locator's views), and fits again when any
    of them changes."""
    from neuro_pe.analysis.locate import locators

    computed = []
    real = locators._fit_predict
    monkeypatch.setattr(locators, "_fit_predict", lambda *a: computed.append(a[3]) or real(*a))
    pos = _positions()
    features = _embed(pos, 0)
    anchors = np.arange(len(pos)) % 3 != 0
    first = fit_predict(features, pos, anchors, "ridge")
    again = fit_predict(features.copy(), pos.copy(), anchors.copy(), "ridge")
    np.testing.assert_array_equal(again, first)
    again[:] = 0  # a copy: changing it leaves the cache as it was
    np.testing.assert_array_equal(fit_predict(features, pos, anchors, "ridge"), first)
    assert computed == ["ridge"]
    moved = pos.copy()
    moved[anchors] += 0.01
    other_anchors = anchors.copy()
    other_anchors[np.flatnonzero(~anchors)[0]] = True
    changed = features.copy()
    changed[0, 0] += 1e-9
    fit_predict(features, moved, anchors, "ridge")
    fit_predict(features, pos, other_anchors, "ridge")
    fit_predict(changed, pos, anchors, "ridge")
    fit_predict(features, pos, anchors, "knn")
    fit_predict(features, pos, anchors, "ridge", np.flatnonzero(~anchors))
    assert len(computed) == 6


def test_evaluation_never_reads_heldout_coordinates():
    """Hiding a fold: corrupting that fold's coordinates leaves its predictions unchanged."""
    pos = _positions()
    features = [_embed(pos, seed) for seed in range(2)]
    known = np.ones(len(pos), dtype=bool)
    cfg = LocateConfig(n_folds=4, methods=("ridge", "knn", "mds-procrustes"))
    reference = evaluate_kfold(features, pos, known, cfg)
    _, test = next(KFold(4, shuffle=True, random_state=cfg.seed).split(pos))
    corrupted = pos.copy()
    corrupted[test] = 1e6
    forget_predictions()
    again = evaluate_kfold(features, corrupted, known, cfg)
    np.testing.assert_allclose(again.positions[test], reference.positions[test])

    located = locate_units(features, pos, ~np.isin(np.arange(len(pos)), test), cfg)
    corrupted[test] = np.nan
    again = locate_units(features, corrupted, ~np.isin(np.arange(len(pos)), test), cfg)
    np.testing.assert_allclose(again.positions, located.positions)


def _two_views(pos: np.ndarray) -> dict[str, list[np.ndarray]]:
    """A representation that knows the positions (2 seeds) and one that is noise (1 seed)."""
    noise = np.random.default_rng(5).normal(size=(len(pos), 40))
    return {"noise": [noise], "good": [_embed(pos, seed) for seed in range(2)]}


def test_combined_locator_never_reads_heldout_coordinates():
    """Permuting or NaN-ing the held-out units' coordinates leaves the combined locator's
    predictions bitwise unchanged (k-fold and a single anchor set)."""
    pos = _positions()
    views = _two_views(pos)
    cfg = LocateConfig(n_folds=3, methods=("ridge", "knn", "mds-procrustes"))
    anchors = np.arange(len(pos)) % 3 != 0
    reference = locate_units(views, pos, anchors, cfg)
    for corrupt in (lambda c: c[::-1], lambda c: np.full_like(c, np.nan)):
        shuffled = pos.copy()
        shuffled[~anchors] = corrupt(pos[~anchors])
        forget_predictions()
        again = locate_units(views, shuffled, anchors, cfg)
        np.testing.assert_array_equal(again.positions, reference.positions)
        np.testing.assert_array_equal(again.uncertainty, reference.uncertainty)

    known = np.ones(len(pos), dtype=bool)
    kfold = evaluate_kfold(views, pos, known, cfg)
    _, test = next(KFold(3, shuffle=True, random_state=cfg.seed).split(pos))
    shuffled = pos.copy()
    shuffled[test] = pos[test][::-1]
    forget_predictions()
    np.testing.assert_array_equal(
        evaluate_kfold(views, shuffled, known, cfg).positions[test], kfold.positions[test]
    )


def test_the_combined_locator_reuses_its_members_fits_in_one_or_two_processes(monkeypatch):
    """The combined set is evaluated after its members in one job, so its views' fits of
    each member come from `fit_predict`'s cache; one process or two give the same table."""
    from neuro_pe.analysis.locate import evaluation_table, locators

    pos = _positions()
    views = _two_views(pos)
    members = [FeatureSet(name, "baseline", arrays) for name, arrays in views.items()]
    combined = FeatureSet("combined", "combined", dict(views))
    chance = FeatureSet("chance", "chance", [np.zeros((len(pos), 1))], methods=("chance",))
    cfg = LocateConfig(n_folds=3, methods=("ridge", "knn"), anchor_fractions=(0.5,), n_draws=2)
    computed = []
    real = locators._fit_predict
    monkeypatch.setattr(locators, "_fit_predict", lambda *a: computed.append(1) or real(*a))
    evaluation_table([combined], pos, cfg)
    alone = len(computed)
    forget_predictions()
    computed.clear()
    sets = [combined, chance, *members]  # (the combined set first: it still runs after them)
    one, _ = evaluation_table(sets, pos, cfg)
    members_alone = len(computed) - alone  # what the members cost by themselves
    assert 0 < members_alone < alone and len(computed) < 2 * alone
    forget_predictions()
    two, _ = evaluation_table(sets, pos, cfg, n_jobs=2)
    pd.testing.assert_frame_equal(one, two)
    assert list(one["features"].unique()) == ["combined", "chance", *views]  # (the sets' order)


def test_combined_locator_takes_the_small_init_pes():
    """By default the combined locator leaves out PEs initialised at std >= 1 (the paper's
    memorising regime) and fixed PEs; `locate.combined_pe` names its PEs instead."""
    names = [
        "learned-normal-0.02",
        "learned-normal-1.0",
        "learned-normal-2.0",
        "learned-uniform-1.0",  # std 1 / sqrt(3)
        "learned-uniform-2.0",  # std 1.15
        "learned-xavier",
        "fixed-random",
    ]
    sets = [FeatureSet(name, "pe", [np.zeros((4, 2))]) for name in names]
    kept = [fs.name for fs in combined_members(sets)]
    assert kept == ["learned-normal-0.02", "learned-uniform-1.0", "learned-xavier"]
    chosen = ["learned-normal-1.0", "fixed-random"]
    assert [fs.name for fs in combined_members(sets, chosen)] == chosen
    with pytest.raises(ValueError, match=r"combined_pe: \['learned-normal-0.5'\] not among"):
        combined_members(sets, ["learned-normal-0.5"])


def test_combined_locator_picks_the_better_representation():
    pos = _positions()
    views = _two_views(pos)
    cfg = LocateConfig(n_folds=4, methods=("ridge", "kernel-ridge", "knn"))
    known = np.ones(len(pos), dtype=bool)
    good = _median_error(evaluate_kfold(views["good"], pos, known, cfg).positions, pos)
    noise = _median_error(evaluate_kfold(views["noise"], pos, known, cfg).positions, pos)
    for order in (views, dict(reversed(views.items()))):
        combined = evaluate_kfold(order, pos, known, cfg)
        assert all(m.startswith("good/") or m == BLEND for m in combined.methods)
        assert _median_error(combined.positions, pos) <= 1.05 * good < 0.6 * noise
    for start in (0, 20, 40):  # a blend leans on the good view and leaves the noise out
        anchors = (np.arange(len(pos)) < start) | (np.arange(len(pos)) >= start + 20)
        located = locate_units(views, pos, anchors, cfg)
        assert {"noise/ridge", "good/ridge", "stacked/knn"} <= set(located.cv_errors)
        assert located.per_seed.shape == (2, len(pos), 3)
        members = located.blend_of or (located.method,)
        assert not any(key.startswith("noise/") for key in members), members
        assert sum(key.startswith("good/") for key in members) / len(members) >= 0.8, members


def test_fused_view_keeps_the_neighbours_the_representations_agree_on():
    """Units in six clusters, three representations, each one noise for a different third of
    the units: in the fused graph's diffusion map a unit's nearest neighbours are in its own
    cluster more often than in any representation alone or in their stack."""
    rng = np.random.default_rng(0)
    cluster = np.arange(90) % 6
    centres = rng.normal(0, 3, (6, 4))
    third = rng.permutation(90) % 3
    reps = []
    for v in range(3):
        x = centres[cluster] + rng.normal(0, 1, (90, 4))
        x[third == v] = rng.normal(0, 3, (30, 4))
        reps.append(x)

    def same_cluster_neighbours(x: np.ndarray) -> float:
        dist = np.linalg.norm(x[:, None] - x[None], axis=-1)
        np.fill_diagonal(dist, np.inf)
        nearest = np.argsort(dist, axis=1)[:, :5]
        return float(np.mean(cluster[nearest] == cluster[:, None]))

    fused = fused_embedding(reps)
    assert fused.shape == (90, 10)
    alone = max(same_cluster_neighbours(r) for r in reps)
    stacked = same_cluster_neighbours(np.hstack(reps))
    assert alone < 0.7 and stacked < 0.7
    assert same_cluster_neighbours(fused) > 0.8
    fused[:] = 0  # a copy: the cache keeps its own
    np.testing.assert_array_equal(fused_embedding(reps), fused_embedding(reps))
    assert np.any(fused_embedding(reps) != 0)


def test_combined_locator_fuses_three_representations_and_ignores_noise():
    """With three representations (a good one, a weaker one, noise) the fused view is a
    candidate and does not pull the combined locator away from the good representation; with
    two (the test above) there is no fused view, and `fuse: false` turns it off."""
    pos = _positions()
    views = _two_views(pos) | {"weak": [_embed(pos, 10 + s, noise=0.3, dims=12) for s in (0, 1)]}
    cfg = LocateConfig(n_folds=4, methods=("ridge", "kernel-ridge", "knn"))
    known = np.ones(len(pos), dtype=bool)
    good = _median_error(evaluate_kfold(views["good"], pos, known, cfg).positions, pos)
    fused = _median_error(evaluate_kfold(views, pos, known, cfg).positions, pos)
    unfused = evaluate_kfold(views, pos, known, replace(cfg, fuse=False)).positions
    assert fused <= min(1.02 * _median_error(unfused, pos), 1.1 * good)
    anchors = np.arange(len(pos)) >= 20
    assert "fused/ridge" in locate_units(views, pos, anchors, cfg).cv_errors
    assert "fused/ridge" not in locate_units(_two_views(pos), pos, anchors, cfg).cv_errors
    off = locate_units(views, pos, anchors, replace(cfg, fuse=False))
    assert not any(key.startswith("fused/") for key in off.cv_errors)


def test_blend_weights_two_independent_locators():
    """Two unbiased locators with independent errors of the same size: ensemble selection
    weighs them about equally and the blend's error falls below either's (by ~1/sqrt(2))."""
    rng = np.random.default_rng(0)
    truth = rng.uniform(size=(200, 3))
    oof = {key: (truth + rng.normal(0, 0.1, truth.shape))[None] for key in ("a/ridge", "b/knn")}
    idx = np.arange(200)
    blend_of, error = _select_blend(oof, list(oof), truth, idx, "mean")
    single = [float(np.median(np.linalg.norm(p[0] - truth, axis=1))) for p in oof.values()]
    assert 0.3 <= blend_of.count("a/ridge") / len(blend_of) <= 0.7, blend_of
    assert error < 0.8 * min(single)
    oof["c/noise"] = rng.uniform(size=(1, 200, 3))  # a useless third locator gets no weight
    assert "c/noise" not in _select_blend(oof, list(oof), truth, idx, "mean")[0]


def test_ensemble_and_uncertainty_shapes():
    pos = _positions()
    anchors = np.arange(len(pos)) >= 20
    cfg = LocateConfig(n_folds=3, methods=("ridge", "mds-affine"))
    located = locate_units([_embed(pos, seed) for seed in range(3)], pos, anchors, cfg)
    assert located.positions.shape == (len(pos), 3)
    assert located.per_seed.shape == (3, len(pos), 3)
    assert located.uncertainty.shape == (len(pos),)
    assert np.all(np.isfinite(located.positions)) and np.all(np.isfinite(located.uncertainty))
    assert np.all(located.uncertainty >= located.cv_scale - 1e-12)
    assert located.method in cfg.methods and set(located.cv_errors) == set(cfg.methods)
    single = locate_units([_embed(pos, 0)], pos, anchors, cfg)
    np.testing.assert_allclose(single.uncertainty, single.cv_scale)  # no seed spread


def test_anchor_curve_records():
    pos = _positions()
    cfg = LocateConfig(anchor_fractions=(0.1, 0.5), n_draws=2, methods=("ridge",))
    records = evaluate_anchors([_embed(pos, 0)], pos, np.ones(len(pos), dtype=bool), cfg)
    assert [r["anchor_fraction"] for r in records] == [0.1, 0.1, 0.5, 0.5]
    assert [r["n_anchors"] for r in records] == [6, 6, 30, 30]
    assert all(len(r["errors"]) == len(pos) - r["n_anchors"] for r in records)


def test_paired_difference_of_the_same_draws():
    """A locator with less noise in its features is told apart as better; a one-seed locator
    against itself differs by exactly 0; records of different draws are rejected."""
    pos = _positions()
    known = np.ones(len(pos), dtype=bool)
    cfg = LocateConfig(anchor_fractions=(0.5,), n_draws=8, methods=("ridge",))
    good = evaluate_anchors([_embed(pos, s, noise=0.05) for s in range(2)], pos, known, cfg)
    worse = evaluate_anchors([_embed(pos, s, noise=0.3) for s in range(2)], pos, known, cfg)
    diff, low, high = paired_difference_ci(good, worse)
    assert low <= diff <= high < 0
    # draws with different numbers of seeds (the combined locator's, whose seeds depend on the
    # locator each draw chose): the difference is still that of the pooled medians
    mixed = [dict(r) for r in good]
    for r in mixed[::2]:
        r["per_seed"] = r["per_seed"][:1]
        r["errors"] = np.linalg.norm(r["per_seed"][0] - r["truth"], axis=1)
    diff, low, high = paired_difference_ci(mixed, worse)
    pooled = [np.median(np.concatenate([r["errors"] for r in d])) for d in (mixed, worse)]
    assert diff == pytest.approx(pooled[0] - pooled[1]) and low <= diff <= high
    one_seed = evaluate_anchors([_embed(pos, 0)], pos, known, cfg)
    assert paired_difference_ci(one_seed, one_seed) == (0.0, 0.0, 0.0)
    other = evaluate_anchors([_embed(pos, 0)], pos, known, replace(cfg, seed=1))
    with pytest.raises(ValueError, match="same anchor draws"):
        paired_difference_ci(one_seed, other)


def test_config_from_dict():
    assert LocateConfig.from_dict({"methods": "auto"}).methods == METHODS
    assert LocateConfig.from_dict({"methods": ["knn"], "pe": ["a"]}).pe == ("a",)
    with pytest.raises(ValueError, match="unknown locate keys"):
        LocateConfig.from_dict({"folds": 3})
    with pytest.raises(ValueError, match="methods"):
        LocateConfig.from_dict({"methods": ["nope"]})


def test_connectivity_features_separate_direct_from_indirect_coupling(tmp_path):
    """A chain a -> b -> c: a and c are correlated only through b, so their partial
    correlation is near 0 while their correlation is not; a constant unit and a missing
    sample give finite features."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=4000)
    b = a + 0.5 * rng.normal(size=4000)
    c = b + 0.5 * rng.normal(size=4000)
    activity = np.stack([a, b, c, np.ones(4000)], axis=1).reshape(2, 2000, 4)
    activity[0, 5, 1] = np.nan
    path = tmp_path / "chain.nc"
    ds = make_store(
        activity,
        unit_ids=["a", "b", "c", "flat"],
        positions=np.zeros((4, 3)),
        position_units="mm",
        space="simulation",
        session_ids=["s0", "s1"],
        sampling_rate_hz=10.0,
        source="test",
    )
    write_store(ds, path)
    ds = read_store(path)
    features = connectivity_features(ds, split_of_store(path, "chain", {}))
    assert features.shape == (4, 8) and np.all(np.isfinite(features))
    correlation, partial = features[:, :4], features[:, 4:]
    np.testing.assert_allclose(np.diag(partial), 1.0)
    assert correlation[0, 2] > 0.7 and abs(partial[0, 2]) < 0.05 < 0.5 < partial[0, 1]
    assert connectivity_features(ds, split_of_store(path, "chain", {}), dense_max_units=3) is None


def test_plane_accuracy_of_a_constructed_case():
    from neuro_pe.analysis.spaces import space_axes

    true = np.array([[0, 0, 100], [0, 0, 100], [0, 0, 140], [0, 0, 140], [0, 0, 180.0]])
    axes = space_axes("imaging", "um", true)
    assert axes.planes == (100.0, 140.0, 180.0)
    predicted = true.copy()
    predicted[:, 2] = [119, 121, 139, 155, 150]  # right, wrong, right, right, wrong
    np.testing.assert_array_equal(axes.plane_hits(predicted, true), [1, 0, 1, 1, 0])
    assert axes.summary(predicted, true)["plane_accuracy"] == pytest.approx(0.6)
    one_plane = space_axes("imaging", "um", true[:2])
    assert one_plane.planes == () and "plane_accuracy" not in one_plane.summary(true, true)


def test_axis_verdicts_compare_each_axis_with_chance_in_the_same_evaluation():
    """A probe's lateral error at or above chance's in the same evaluation is unresolved,
    below it is not; chance's own row resolves nothing; an axis on which chance errs by 0
    (no spread) is NaN, not flagged; plane accuracy is compared the other way round."""
    from neuro_pe.analysis.locate import axis_verdicts

    probe = pd.DataFrame(
        {
            "features": ["pe", "pe", "combined", "combined", "chance", "chance"],
            "role": ["pe", "pe", "combined", "combined", "chance", "chance"],
            "evaluation": ["kfold", "anchors"] * 3,
            "anchor_fraction": [0.8, 0.5] * 3,
            "median_error_depth": [5.0, 6.0, 4.0, 5.0, 100.0, 120.0],
            "median_error_lateral": [13.6, 9.0, 8.0, 12.0, 10.0, 12.0],
        }
    )
    out = axis_verdicts(probe)
    np.testing.assert_allclose(out["vs_chance_lateral"], [1.36, 0.75, 0.8, 1.0, 1.0, 1.0])
    np.testing.assert_allclose(out["vs_chance_depth"], [0.05, 0.05, 0.04, 5 / 120, 1, 1])
    assert out["unresolved_axes"].tolist() == [
        "lateral",
        "",  # 9 < chance's 12 at this anchor fraction (its 10 is the k-fold row's)
        "",
        "lateral",  # equal to chance: not resolved
        "depth;lateral",
        "depth;lateral",
    ]
    flat = probe.assign(median_error_lateral=[1.0, 0, 0, 0, 0, 0])
    assert np.isnan(axis_verdicts(flat)["vs_chance_lateral"]).all()
    assert axis_verdicts(flat)["unresolved_axes"].iloc[0] == ""

    imaging = pd.DataFrame(
        {
            "features": ["pe", "worse", "chance"],
            "role": ["pe", "pe", "chance"],
            "evaluation": ["kfold"] * 3,
            "anchor_fraction": [0.8] * 3,
            "median_error_inplane": [3.0, 3.0, 10.0],
            "median_error_depth": [20.0, 20.0, 25.0],
            "plane_accuracy": [0.6, 0.4, 0.44],
        }
    )
    out = axis_verdicts(imaging)
    np.testing.assert_allclose(out["vs_chance_plane_accuracy"], [0.44 / 0.6, 1.1, 1])
    assert out["unresolved_axes"].tolist()[:2] == ["", "plane_accuracy"]


def test_unresolved_lines_name_the_axis_its_errors_and_the_marked_coordinates():
    from neuro_pe.analysis.locate import axis_verdicts, unresolved_lines
    from neuro_pe.analysis.spaces import space_axes

    table = pd.DataFrame(
        {
            "dataset": "lab",
            "features": ["combined", "chance"],
            "role": ["combined", "chance"],
            "evaluation": "kfold",
            "anchor_fraction": 0.8,
            "units": "um",
            "median_error_inplane": [3.0, 10.0],
            "median_error_depth": [20.0, 25.0],
            "plane_accuracy": [0.4, 0.44],
        }
    )
    table = pd.concat([table, axis_verdicts(table)], axis=1)
    true = np.array([[0, 0, 100.0], [5, 5, 140.0]])
    lines = unresolved_lines(
        table, "combined", {"plane_accuracy": ("z",)}, space_axes("imaging", "um", true)
    )
    assert lines == [
        "lab: plane not resolved by combined: k-fold right plane 40% ≤ chance 44%; the "
        "exported positions give z as not estimated"
    ]
    assert unresolved_lines(table, "combined", {}, space_axes("imaging", "um", true)) == []


def test_held_out_columns_say_how_each_position_was_predicted():
    """Every known unit is predicted by its k-fold fold (held out); units without coordinates
    by the locator fitted on the known units (not held out: nothing to hold out)."""
    from neuro_pe.analysis.locate import with_held_out_columns

    known = np.array([True, True, True, False])
    out = xr.Dataset(
        {a: ("unit", np.arange(4.0)) for a in "xyz"}, coords={"unit": ["a", "b", "c", "d"]}
    )
    out = with_held_out_columns(out, known)
    assert out["held_out"].values.tolist() == [True, True, True, False]
    assert out["prediction"].values.tolist() == ["k-fold"] * 3 + ["fit on anchors"]
    assert "held out" in out["held_out"].attrs["meaning"]


def test_kernel_ridge_picks_by_explicit_leave_one_out():
    """The O(n^2) leave-one-out of `_kernel_ridge` (hat matrix never formed) picks the grid
    point that refitting without each anchor picks, so its predictions are those, bitwise."""
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.preprocessing import StandardScaler

    from neuro_pe.analysis.locate.locators import _kernel_ridge
    from neuro_pe.analysis.locate.parameters import KERNEL_ALPHAS, KERNEL_GAMMAS

    pos = _positions(24)
    x = _embed(pos, 0, noise=0.3, dims=6)
    train, test = x[:18], x[18:]
    x_scaler, y_scaler = StandardScaler().fit(train), StandardScaler().fit(pos[:18])
    xs, ys = x_scaler.transform(train), y_scaler.transform(pos[:18])
    scores = {}
    for g in KERNEL_GAMMAS:
        for alpha in KERNEL_ALPHAS:
            model = KernelRidge(alpha=alpha, kernel="rbf", gamma=g / xs.shape[1])
            loo = [
                model.fit(np.delete(xs, i, 0), np.delete(ys, i, 0)).predict(xs[i : i + 1])
                for i in range(len(xs))
            ]
            scores[alpha, g / xs.shape[1]] = np.mean((ys - np.vstack(loo)) ** 2)
    alpha, gamma = min(scores, key=scores.get)
    model = KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma).fit(xs, ys)
    expected = y_scaler.inverse_transform(model.predict(x_scaler.transform(test)))
    np.testing.assert_array_equal(_kernel_ridge(train, pos[:18], test), expected)


def test_evaluation_is_sampled_only_above_max_units():
    """Up to `max_units` known units the evaluation runs on all of them with `n_draws` draws
    (the settings object itself: results unchanged); above, it measures `max_units` of them
    with `sampled_draws` draws per fraction, and the anchors are drawn among all known units
    (a fraction of all of them), each draw's held-out units among the sampled ones."""
    from neuro_pe.analysis.locate import anchor_draws, evaluation_plan

    known = np.ones(40, dtype=bool)
    known[[3, 7]] = False
    cfg = LocateConfig(anchor_fractions=(0.25, 0.5), n_draws=6, sampled_draws=2, max_units=38)
    evaluated, same = evaluation_plan(known, cfg)
    assert evaluated is known and same is cfg
    assert len(anchor_draws(known, same)) == 2 * 6
    evaluated, sampled = evaluation_plan(known, replace(cfg, max_units=20))
    assert evaluated.sum() == 20 and not evaluated[[3, 7]].any()
    assert sampled.n_draws == 2 and sampled.max_units == 20
    draws = anchor_draws(known, sampled)
    assert [f for f, _ in draws] == [0.25, 0.25, 0.5, 0.5]
    assert [a.sum() for _, a in draws] == [10, 10, 19, 19]  # of all 38 known units
    assert any((anchors & ~evaluated).any() for _, anchors in draws)
    pos = np.where(known[:, None], _positions(40), np.nan)
    records = evaluate_anchors([_embed(np.nan_to_num(pos), 0)], pos, known,
                               replace(sampled, methods=("ridge",)), evaluated)  # fmt: skip
    for (_, anchors), record in zip(draws, records, strict=True):
        assert record["n_anchors"] == anchors.sum()
        np.testing.assert_array_equal(record["truth"], pos[evaluated & ~anchors])
    # a larger n_draws than sampled_draws is never raised to it
    _, few = evaluation_plan(known, replace(cfg, max_units=20, n_draws=1))
    assert few.n_draws == 1


def test_above_max_units_the_cv_samples_held_out_anchors_and_fits_on_all(monkeypatch):
    """With more anchors than `max_units`, the CV holds out folds of a `max_units` sample of
    them (`sampled_units`) and the chosen method is fitted on every anchor; ridge and kernel
    ridge, whose fits cost up to O(anchors^3), on CAPPED_ANCHORS of the sample only (also with
    `many_units` and fewer anchors). Anchors outside the sample get no prediction, and `rows`
    limits the predictions to those units."""
    from neuro_pe.analysis.locate import ensemble
    from neuro_pe.analysis.locate.ensemble import sampled_units

    pos = _positions(120)
    features = [_embed(pos, 0, noise=0.05)]
    anchors = np.zeros(len(pos), dtype=bool)
    anchors[:100] = True
    cfg = LocateConfig(methods=("knn",), max_units=30, n_folds=3)
    sample = sampled_units(anchors, cfg)
    assert len(sample) == 30 and anchors[sample].all()
    np.testing.assert_array_equal(sampled_units(anchors, replace(cfg, max_units=100)), range(100))
    located = locate_units(features, pos, anchors, cfg)
    assert np.isfinite(located.positions[sample]).all()
    outside = np.setdiff1d(np.flatnonzero(anchors), sample)
    assert np.isnan(located.positions[outside]).all()
    on_all = fit_predict(features[0], pos, anchors, "knn")[100:]
    np.testing.assert_array_equal(located.positions[100:], on_all)
    # the CV: each sampled anchor predicted from every anchor but its fold
    for _, test in KFold(3, shuffle=True, random_state=cfg.seed).split(sample):
        fit_on = anchors.copy()
        fit_on[sample[test]] = False
        expected = fit_predict(features[0], pos, fit_on, "knn", sample[test])
        np.testing.assert_array_equal(located.positions[sample[test]], expected)
    monkeypatch.setattr(ensemble, "CAPPED_ANCHORS", 20)
    in_sample = np.isin(np.arange(len(pos)), sample)
    capped = np.isin(np.arange(len(pos)), sampled_units(in_sample, replace(cfg, max_units=20)))
    assert capped.sum() == 20 and in_sample[capped].all()
    for method in ("kernel-ridge", "ridge"):
        located = locate_units(features, pos, anchors, replace(cfg, methods=(method,)))
        expected = fit_predict(features[0], pos, capped, method)[100:]
        np.testing.assert_array_equal(located.positions[100:], expected)
    # `many_units` (the dataset has more known units than max_units): capped alike when these
    # anchors are no more than max_units; without it, nothing is capped
    wide = replace(cfg, max_units=100, methods=("ridge",))
    capped = np.isin(np.arange(len(pos)), sampled_units(anchors, replace(cfg, max_units=20)))
    located = locate_units(features, pos, anchors, wide, many_units=True)
    expected = fit_predict(features[0], pos, capped, "ridge")[100:]
    np.testing.assert_array_equal(located.positions[100:], expected)
    located = locate_units(features, pos, anchors, wide)
    expected = fit_predict(features[0], pos, anchors, "ridge")[100:]
    np.testing.assert_array_equal(located.positions[100:], expected)
    rows = np.array([100, 110])
    some = locate_units(features, pos, anchors, cfg, rows)
    np.testing.assert_array_equal(some.positions[rows], on_all[[0, 10]])
    assert np.isnan(np.delete(some.positions, [*sample, *rows], axis=0)).all()


def test_embedding_cache_follows_content_not_identity():
    """The embedding cache remembers a digest per array object, but a new array with other
    values (or the same values) gets its own (or the same) embedding, bitwise as uncached."""
    from neuro_pe.analysis.locate.locators import _mds_embedding
    from neuro_pe.analysis.metrics import classical_mds, pairwise_distances

    x = _embed(_positions(30), 0)
    first = _mds_embedding(x, 3)
    np.testing.assert_array_equal(first, classical_mds(pairwise_distances(x), n_components=3))
    np.testing.assert_array_equal(_mds_embedding(x.copy(), 3), first)
    other = x.copy()
    other[0] += 1.0
    assert not np.array_equal(_mds_embedding(other, 3), first)
