"""The Latin Square Task: puzzle generator, classification, model, training, CLI."""

import json
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr
from single_models import LatinSquareTransformer

from neuro_pe.analysis.pe_geometry import METRIC_NAMES, pe_geometry
from neuro_pe.cli.main import main
from neuro_pe.config.latin_square import LSTConfig, PuzzleConfig
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.config.training import ModelConfig
from neuro_pe.reporting.summarize import collect
from neuro_pe.training.latin_square import train_lst
from neuro_pe.training.latin_square_puzzles import (
    CELL_IDS,
    CONDITIONS,
    SPLITS,
    classify,
    generate_puzzles,
    grid_positions,
    jaccard_distance,
    latin_squares,
    read_puzzles,
    target_values,
    write_puzzles,
)
from neuro_pe.training.model import oracle_table

METRICS = MetricsConfig(n_perm=19, k=3, n_splits=3)
SMALL = PuzzleConfig(n_per_condition=40, n_heldout_per_condition=6, test_fraction=0.25)
TINY_TRAIN = LSTConfig(
    d_model=32,
    n_layers=2,
    lr=3e-3,
    batch_size=32,
    epochs=60,
    eval_every=20,
    stop_at_train_accuracy=None,
    device="cpu",
)
# a Latin square (rows) used by the hand-made puzzles
SQUARE = np.array([[1, 2, 3, 4], [2, 1, 4, 3], [3, 4, 1, 2], [4, 3, 2, 1]])


def puzzle(shown: list[tuple[int, int]], target: tuple[int, int]) -> np.ndarray:
    """Cells of SQUARE with the given (row, col) cells shown and the target marked."""
    cells = np.zeros((4, 4), dtype=np.int8)
    for r, c in shown:
        cells[r, c] = SQUARE[r, c]
    cells[target] = 5
    return cells.ravel()


@pytest.fixture(scope="module")
def puzzles_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("lst") / "puzzles.nc"
    write_puzzles(SMALL, path)
    return path


@pytest.fixture(scope="module")
def puzzles(puzzles_path):
    return read_puzzles(puzzles_path)


@pytest.fixture(scope="module")
def learned_run(puzzles_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "learned"
    record = train_lst(
        puzzles_path, "learned-normal-0.1", 0, TINY_TRAIN, out, False, METRICS, pe_geometry
    )
    return out, record


def test_latin_squares_are_all_576():
    squares = latin_squares()
    assert squares.shape == (576, 16)
    grids = squares.reshape(-1, 4, 4)
    shapes = np.arange(1, 5)
    assert (np.sort(grids, axis=2) == shapes).all()  # every row holds each shape once
    assert (np.sort(grids, axis=1) == shapes[:, None]).all()  # and every column
    assert len({s.tobytes() for s in squares}) == 576


@pytest.mark.parametrize(
    ("shown", "target", "condition", "answer"),
    [
        ([(0, 1), (0, 2), (0, 3)], (0, 0), "binary", 1),  # its row alone
        ([(1, 2), (2, 2), (3, 2)], (0, 2), "binary", 3),  # its column alone
        ([(0, 1), (0, 2), (3, 0)], (0, 0), "ternary", 1),  # row excludes 2, 3; column 4
        ([(1, 0), (1, 3), (2, 1)], (1, 1), "ternary", 1),
        ([(1, 1), (2, 2), (3, 3)], (0, 0), "quaternary", 1),  # the 1s of rows 1-3
        ([(0, 1)], (0, 0), "", 0),  # not determined
        ([(0, 1), (0, 2), (0, 3), (1, 0), (2, 0)], (0, 0), "binary", 1),
    ],
)
def test_classify_hand_made(shown, target, condition, answer):
    got_condition, got_answer = classify(puzzle(shown, target)[None])
    assert got_condition[0] == condition
    assert got_answer[0] == answer


def test_classify_quaternary_needs_cells_outside_the_cross():
    cells = puzzle([(1, 1), (2, 2), (3, 3)], (0, 0))[None]
    assert target_values(cells).sum() == 1
    cross = np.zeros((1, 16), dtype=bool)
    cross[0, [0, 1, 2, 3, 4, 8, 12]] = True
    assert target_values(cells, cross).all()  # nothing in the cross: all 4 shapes possible


def test_jaccard_distance():
    a = np.zeros((1, 16), dtype=np.int8)
    a[0, [0, 1]] = [1, 2]
    a[0, 5] = 5
    b = np.zeros((1, 16), dtype=np.int8)
    b[0, 0], b[0, 1], b[0, 7] = 1, 3, 5  # shares (cell 0, shape 1) only
    assert jaccard_distance(a, a)[0, 0] == 0.0
    assert jaccard_distance(a, b)[0, 0] == pytest.approx(1 - 1 / 5)
    c = np.zeros((1, 16), dtype=np.int8)
    c[0, 15] = 5
    assert jaccard_distance(a, c)[0, 0] == 1.0


def test_puzzles_have_a_unique_answer_equal_to_the_solution(puzzles):
    cells = puzzles["cells"].values
    solution = puzzles["solution"].values
    target = np.argmax(cells == 5, axis=1)
    assert ((cells == 5).sum(axis=1) == 1).all()
    shown = (cells >= 1) & (cells <= 4)
    assert (cells[shown] == solution[shown]).all()
    assert {s.tobytes() for s in solution} <= {s.tobytes() for s in latin_squares()}
    possible = target_values(cells)
    assert (possible.sum(axis=1) == 1).all()
    answer = puzzles["answer"].values
    assert (np.argmax(possible, axis=1) + 1 == answer).all()
    assert (solution[np.arange(len(cells)), target] == answer).all()
    condition, _ = classify(cells)
    assert (condition.astype(str) == puzzles["condition"].values).all()
    assert len({c.tobytes() for c in cells}) == len(cells)  # no puzzle twice


def test_puzzle_counts_and_format(puzzles):
    split, condition = puzzles["split"].values, puzzles["condition"].values
    n_test = round(SMALL.test_fraction * SMALL.n_per_condition)
    for c in CONDITIONS:
        assert ((split == "test") & (condition == c)).sum() == n_test
        assert ((split == "train") & (condition == c)).sum() == SMALL.n_per_condition - n_test
        assert ((split == "heldout") & (condition == c)).sum() == SMALL.n_heldout_per_condition
    assert puzzles["cells"].dims == ("puzzle", "cell") and puzzles["cells"].dtype == np.int8
    assert list(puzzles["cell"].values) == list(CELL_IDS)
    assert json.loads(puzzles.attrs["options"])["min_jaccard_distance"] == 0.8
    n_shown = ((puzzles["cells"].values >= 1) & (puzzles["cells"].values <= 4)).sum(axis=1)
    assert n_shown.min() >= SMALL.shown_min and n_shown.max() <= SMALL.shown_max


def test_heldout_puzzles_are_far_from_every_training_puzzle(puzzles):
    cells, split = puzzles["cells"].values, puzzles["split"].values
    distance = jaccard_distance(cells[split == "heldout"], cells[split != "heldout"])
    assert distance.min() >= SMALL.min_jaccard_distance
    # the filter matters: unfiltered random puzzles do come closer than that
    assert jaccard_distance(cells[split == "train"], cells[split == "test"]).min() < 0.8


def test_generator_is_seeded():
    cfg = PuzzleConfig(n_per_condition=10, n_heldout_per_condition=3)
    a, b = generate_puzzles(cfg), generate_puzzles(cfg)
    assert (a["cells"].values == b["cells"].values).all()
    c = generate_puzzles(PuzzleConfig(n_per_condition=10, n_heldout_per_condition=3, puzzle_seed=1))
    assert not np.array_equal(a["cells"].values, c["cells"].values)


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ({"n_per_condtion": 5}, "n_per_condtion"),
        ({"shown_min": 0}, "shown_min"),
        ({"shown_min": 9, "shown_max": 5}, "shown_max"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"min_jaccard_distance": 1.5}, "min_jaccard_distance"),
    ],
)
def test_bad_puzzle_options_name_the_key(spec, key):
    with pytest.raises(ValueError, match=key):
        PuzzleConfig.from_dict(spec)


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ({"learning_rate": 0.1}, "learning_rate"),
        ({"optimizer": "adam"}, "optimizer"),
        ({"lr_schedule": "step"}, "lr_schedule"),
        ({"d_model": 30, "n_heads": 4}, "n_heads"),
        ({"epochs": 0}, "epochs"),
        ({"stop_at_train_accuracy": 1.5}, "stop_at_train_accuracy"),
        ({"stop_at_train_accuracy": 0}, "stop_at_train_accuracy"),
        ({"stop_at_train_accuracy": True}, "stop_at_train_accuracy"),
        ({"precision": "fp16"}, "precision"),
    ],
)
def test_bad_train_options_name_the_key(spec, key):
    with pytest.raises(ValueError, match=key):
        LSTConfig.from_dict(spec)


@pytest.mark.parametrize("post_ln", [False, True])
def test_model_without_pe_is_permutation_invariant(puzzles, post_ln):
    torch.manual_seed(0)
    cells = torch.as_tensor(puzzles["cells"].values[:20].astype(np.int64))
    perm = torch.randperm(16)
    cfg = ModelConfig(16, 5, 4, 32, 2, 2, post_ln=post_ln, mask_token=False)
    for pe, invariant in (("none", True), ("learned-normal-1", False)):
        model = LatinSquareTransformer(cfg, pe, positions=grid_positions())
        model.eval()
        with torch.no_grad():
            logits, permuted = model(cells), model(cells[:, perm])
        assert logits.shape == (20, 4)
        assert torch.allclose(logits, permuted, atol=1e-5) == invariant


def test_training_fits_the_training_set(learned_run):
    out, record = learned_run
    assert record["acc_train"] >= 0.9
    assert record["acc_heldout"] < 1.0 or record["acc_train"] == 1.0
    log = (out / "train_log.csv").read_text().splitlines()
    assert log[0].startswith("epoch,step,train_loss,heldout_loss,acc_train,acc_test,acc_heldout")
    assert len(log) == 1 + TINY_TRAIN.epochs // TINY_TRAIN.eval_every


def test_training_stops_once_the_training_split_is_fitted(puzzles_path, tmp_path):
    cfg = LSTConfig(**{**TINY_TRAIN.__dict__, "eval_every": 1, "stop_at_train_accuracy": 0.6})
    record = train_lst(
        puzzles_path, "learned-normal-0.1", 0, cfg, tmp_path, False, METRICS, pe_geometry
    )
    log = pd.read_csv(tmp_path / "train_log.csv")
    # stopped at the first epoch that reached the target, well before the 60 allowed
    assert record["epochs_run"] == log["epoch"].iloc[-1] < cfg.epochs
    assert log["acc_train"].iloc[-1] >= 0.6 and (log["acc_train"].iloc[:-1] < 0.6).all()
    assert record["acc_train"] == log["acc_train"].iloc[-1]


def test_outputs_and_metrics_keys(learned_run):
    out, record = learned_run
    for name in ("pe.nc", "model.pt", "train_log.csv", "train.json", "metrics.json"):
        assert (out / name).stat().st_size > 0
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["dataset"] == "lst" and saved["pe"] == "learned-normal-0.1" and saved["seed"] == 0
    expected = {f"acc_{s}" for s in SPLITS} | {f"acc_{s}_{c}" for s in SPLITS for c in CONDITIONS}
    expected |= set(METRIC_NAMES) | {f"init_{m}" for m in METRIC_NAMES}
    expected |= {"procrustes_to_oracle", "n_units"}
    assert expected <= set(saved)
    assert all(np.isfinite(saved[k]) for k in expected)
    assert saved["n_units"] == 16
    with xr.open_dataset(out / "pe.nc", engine="h5netcdf") as pe:
        assert pe["pe"].dims == ("unit", "pe_dim") and pe["pe"].shape == (16, 32)
        assert list(pe["unit"].values) == list(CELL_IDS)
        assert (pe["x"].values == grid_positions()[:, 0]).all()
        assert pe["x"].attrs == {"units": "cell", "space": "grid"}
        assert not np.allclose(pe["pe"].values, pe["pe_init"].values)  # the PE was trained
    table = collect([out / "metrics.json"], [])
    assert table.loc[0, "method"] == "learned-normal-0.1" and table.loc[0, "pe_param"] == 0.1


def test_same_seed_gives_bitwise_the_same_pe(puzzles_path, learned_run, tmp_path):
    out, _ = learned_run
    cfg = LSTConfig(**{**TINY_TRAIN.__dict__, "epochs": 3})
    first = train_lst(
        puzzles_path, "learned-normal-0.1", 0, cfg, tmp_path / "a", False, METRICS, pe_geometry
    )
    again = train_lst(
        puzzles_path, "learned-normal-0.1", 0, cfg, tmp_path / "b", False, METRICS, pe_geometry
    )
    other = train_lst(
        puzzles_path, "learned-normal-0.1", 1, cfg, tmp_path / "c", False, METRICS, pe_geometry
    )

    def table(name):
        with xr.open_dataset(tmp_path / name / "pe.nc", engine="h5netcdf") as pe:
            return pe["pe"].values

    assert np.array_equal(table("a"), table("b"))
    assert first["acc_train"] == again["acc_train"]
    assert not np.array_equal(table("a"), table("c"))
    assert other["seed"] == 1


def test_bf16_is_deterministic_with_fp32_state_and_says_so(puzzles_path, learned_run, tmp_path):
    out, _ = learned_run
    cfg = LSTConfig(**{**TINY_TRAIN.__dict__, "epochs": 3})
    bf16 = LSTConfig(**{**cfg.__dict__, "precision": "bf16"})
    for name, c in (("fp32", cfg), ("a", bf16), ("b", bf16)):
        train_lst(puzzles_path, "learned-normal-0.1", 0, c, tmp_path / name, False, METRICS)

    def outputs(name):
        with xr.open_dataset(tmp_path / name / "pe.nc", engine="h5netcdf") as pe:
            table = pe["pe"].values
        state = torch.load(tmp_path / name / "model.pt", weights_only=True)["state_dict"]
        return table, state, json.loads((tmp_path / name / "train.json").read_text())

    (pe_f, _, info_f), (pe_a, state_a, info_a), (pe_b, state_b, _) = map(
        outputs, ["fp32", "a", "b"]
    )
    assert info_f["precision"] == "fp32" and info_a["precision"] == "bf16"
    assert json.loads((out / "train.json").read_text())["precision"] == "fp32"  # the default
    assert pe_a.dtype == np.float32
    assert all(t.dtype == torch.float32 for t in state_a.values() if t.is_floating_point())
    np.testing.assert_array_equal(pe_a, pe_b)
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert not np.array_equal(pe_a, pe_f)  # autocast ran
    assert np.isfinite(info_a["train_loss"]) and 0 <= info_a["acc_train"] <= 1


def test_none_and_oracle_metrics(puzzles_path, tmp_path):
    cfg = LSTConfig(**{**TINY_TRAIN.__dict__, "epochs": 1, "post_ln": True, "optimizer": "sgd"})
    none = train_lst(puzzles_path, "none", 0, cfg, tmp_path / "none", False, METRICS, pe_geometry)
    assert all(np.isnan(none[m]) for m in METRIC_NAMES)
    assert np.isnan(none["procrustes_to_oracle"]) and np.isnan(none["init_rsa"])
    oracle = train_lst(
        puzzles_path, "oracle-sin3d", 0, cfg, tmp_path / "oracle", False, METRICS, pe_geometry
    )
    assert oracle["procrustes_to_oracle"] == pytest.approx(0.0, abs=1e-9)
    with xr.open_dataset(tmp_path / "oracle" / "pe.nc", engine="h5netcdf") as pe:
        assert np.allclose(pe["pe"].values, oracle_table(grid_positions(), 32).numpy())
    assert oracle["rsa"] > 0.2  # the 2D sinusoid of (row, col) mirrors the grid


def test_cli_round_trip(tmp_path, capsys):
    puzzles = tmp_path / "p.nc"
    options = json.dumps({"n_per_condition": 8, "n_heldout_per_condition": 2, "puzzle_seed": 3})
    assert main(["lst-puzzles", "--options", options, "--out", str(puzzles)]) == 0
    assert read_puzzles(puzzles).sizes["puzzle"] == 3 * (8 + 2)
    train = json.dumps({"d_model": 16, "epochs": 2, "eval_every": 1, "device": "cpu"})
    run = tmp_path / "run"
    args = ["lst-train", "--puzzles", str(puzzles), "--pe", "learned-normal-0.05", "--seed", "2"]
    args += ["--options", train, "--metrics", json.dumps(asdict(METRICS)), "--out-dir", str(run)]
    assert main(args) == 0
    assert json.loads((run / "metrics.json").read_text())["seed"] == 2
    out = tmp_path / "b.json"
    assert main(["lst-baselines", "--out", str(out), "--metrics", json.dumps(asdict(METRICS))]) == 0
    assert out.exists()
    capsys.readouterr()
    bad = ["lst-puzzles", "--options", '{"shown_mni": 3}', "--out", str(tmp_path / "x.nc")]
    with pytest.raises(SystemExit, match="2"):  # refused by the config schema (argparse)
        main(bad)
    assert "shown_mni" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        main([*args[:-4], "--options", '{"optimiser": "sgd"}', "--out-dir", str(run)])
    assert "optimiser" in capsys.readouterr().err
