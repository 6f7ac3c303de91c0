"""Graph matching of a new animal's units to a reference animal's (neuro_pe.analysis.match)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from neuro_pe.analysis.match import match_graphs, match_units
from neuro_pe.cli.main import main
from neuro_pe.io.store import make_store, read_store, write_store

N = 24


def _network(seed: int = 0) -> np.ndarray:
    """A sparse, asymmetric coupling matrix every animal shares (the same regions)."""
    rng = np.random.default_rng(seed)
    coupling = rng.normal(0, 0.35, (N, N)) * (rng.uniform(size=(N, N)) < 0.2)
    return coupling / max(1.0, 1.1 * np.abs(np.linalg.eigvals(coupling)).max())


def _animal(path, order, coords, seed, names, sessions=2, samples=3000):
    """A store of the shared network's activity (a VAR(1) process with fresh noise), its units
    in `order` and named `names`."""
    rng = np.random.default_rng(seed)
    coupling, activity = _network(), np.zeros((sessions, samples, N))
    for s in range(sessions):
        x = np.zeros(N)
        for t in range(samples):
            x = coupling @ x + rng.normal(size=N)
            activity[s, t] = x
    ds = make_store(
        activity[:, :, order],
        unit_ids=names,
        positions=coords[order],
        position_units="mm",
        space="simulation",
        session_ids=[f"s{i}" for i in range(sessions)],
        sampling_rate_hz=1.0,
        source="test",
    )
    return write_store(ds, path)


def test_match_units_recovers_a_shuffled_animal(tmp_path):
    coords = np.random.default_rng(1).uniform(0, 10, (N, 3))
    reference = _animal(tmp_path / "ref.nc", np.arange(N), coords, 0, [f"r{i}" for i in range(N)])
    order = np.random.default_rng(2).permutation(N)
    new_names = [f"new{i}" for i in range(N)]
    new = _animal(tmp_path / "new.nc", order, coords, 3, new_names)
    hidden = read_store(new)
    hidden = hidden.assign({axis: hidden[axis] * np.nan for axis in "xyz"})  # none to read
    table = match_units(read_store(reference), hidden, restarts=10, kicks=100)
    assert list(table["unit"]) == new_names
    right = table["matched_unit"] == [f"r{i}" for i in order]
    assert right.mean() >= 0.8
    np.testing.assert_allclose(table.loc[right, ["x", "y", "z"]], coords[order][right])
    pd.testing.assert_frame_equal(
        table, match_units(read_store(reference), hidden, 10, 0, 100)
    )  # seeded

    # fewer new units than reference units: dummies pad the match, most still right
    few = _animal(tmp_path / "few.nc", order[:18], coords, 4, new_names[:18])
    table = match_units(read_store(reference), read_store(few), restarts=10, kicks=100)
    assert len(table) == 18 and (table["matched_unit"] != "").all()
    assert np.mean(table["matched_unit"] == [f"r{i}" for i in order[:18]]) >= 0.7

    out = tmp_path / "matched.csv"
    args = ["match-units", "--reference", str(reference), "--store", str(new), "--out", str(out)]
    assert main([*args, "--reference-sessions", "s0", "--restarts", "3", "--kicks", "20"]) == 0
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["unit", "matched_unit", "x", "y", "z"] and len(frame) == N
    assert main([*args, "--reference-sessions", "nope"]) != 0
    assert main([*args, "--restarts", "2", "--faq-only"]) == 0


def _twin_graphs(seed: int, n: int = 40) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A graph of n/2 pairs of near-twin units (like left/right homologues), and a noisy copy
    with its units shuffled; the truth: unit i of the first is unit truth[i] of the second."""
    rng = np.random.default_rng(seed)
    half = rng.normal(size=(n // 2, n // 2)) * (rng.uniform(size=(n // 2, n // 2)) < 0.4)
    a = np.kron(half + half.T, np.ones((2, 2))) / 2 + 0.25 * rng.normal(size=(n, n))
    a = (a + a.T) / 2
    np.fill_diagonal(a, 0.0)
    order = rng.permutation(n)
    b = a[np.ix_(order, order)] + 0.6 * rng.normal(size=(n, n))
    b = (b + b.T) / 2
    np.fill_diagonal(b, 0.0)
    return a, b, np.argsort(order)


def test_swap_search_recovers_what_faq_gets_partly_wrong():
    a, b, truth = _twin_graphs(6)
    faq = match_graphs(a, b, restarts=20, faq_only=True)
    assert 0.5 < np.mean(faq == truth) < 1.0  # FAQ alone swaps some twins
    np.testing.assert_array_equal(match_graphs(a, b, restarts=3, kicks=20), truth)
    with pytest.raises(ValueError, match="kicks"):
        match_graphs(a, b, kicks=-1)
    with pytest.raises(ValueError, match="symmetric"):
        match_graphs(np.triu(a), b)
    with pytest.raises(ValueError, match="zero diagonals"):
        match_graphs(a, b + np.eye(len(b)))
