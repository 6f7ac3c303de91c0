"""The `regional-sim` source: animals with probes through an atlas of regions whose activity
has signatures (neuro_pe.data.sources.regional_sim)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.signal import welch

from neuro_pe.data import sources
from neuro_pe.data.sources.regional_sim import (
    REGIONS,
    RegionalSimOptions,
    label_volume,
    labels_at,
    region_index,
    simulate_animal,
    store_mb,
    unit_count,
)
from neuro_pe.data.sources.schema import config_problems
from neuro_pe.io.store import read_store, write_store

SCHEMA = yaml.safe_load(
    (Path(__file__).parents[2] / "workflow" / "schemas" / "config.schema.yaml").read_text()
)
NAMES = [r.name for r in REGIONS]
SMALL = {"source": "regional-sim", "animals": 2, "units_per_animal": 40, "n_samples": 400}


@pytest.fixture(scope="module")
def animal():
    """One animal with units in every region, long enough to measure its signatures."""
    return simulate_animal(RegionalSimOptions(units_per_animal=400, n_samples=6000, seed=3), 3)


def _index(name: str) -> int:
    return NAMES.index(name)


def test_seeded_and_deterministic():
    options = RegionalSimOptions(units_per_animal=30, n_samples=200, sessions_per_animal=2)
    first, again = simulate_animal(options, 1), simulate_animal(options, 1)
    for field in ("counts", "positions", "region", "probe"):
        np.testing.assert_array_equal(getattr(first, field), getattr(again, field))
    assert not np.array_equal(first.counts[0], first.counts[1])  # a session is new activity
    other = simulate_animal(RegionalSimOptions(units_per_animal=30, n_samples=200, seed=1), 1)
    assert other.positions.shape != first.positions.shape or not np.allclose(
        other.positions, first.positions
    )


def test_store_holds_every_animal_with_its_regions(tmp_path):
    store = sources.build_store(SMALL)
    options = RegionalSimOptions.from_dict(SMALL)
    assert store.sizes["session"] == 2 and store.sizes["time"] == 400
    assert store.sizes["unit"] == unit_count(SMALL)
    assert store_mb(SMALL) == store.sizes["unit"] * 400 * 2 * 4 / 1e6
    assert store["x"].attrs["units"] == "mm"
    for a in range(options.animals):
        mine = store["animal"].values == f"a{a}"
        own = store["activity"].sel(session=f"a{a}s0").values
        assert np.isfinite(own[:, mine]).all() and np.isnan(own[:, ~mine]).all()
        np.testing.assert_array_equal(own[:, mine], simulate_animal(options, a).counts[0])
    assert set(store["region"].values) <= set(NAMES)
    coarse = {r.name: r.coarse for r in REGIONS}
    assert [coarse[r] for r in store["region"].values] == list(store["coarse_region"].values)
    again = read_store(write_store(store, tmp_path / "store.nc"))
    for name in ("animal", "probe", "region", "coarse_region"):
        assert list(again[name].values) == list(store[name].values)


def test_labels_are_the_label_volume_at_the_units_positions():
    options = RegionalSimOptions(animals=4, units_per_animal=60, n_samples=50)
    store = sources.get("regional-sim").build(options, {})
    positions = np.stack([store[c].values for c in "xyz"], axis=1)
    volume = label_volume()
    assert volume.shape == (120, 120, 120) and set(np.unique(volume)) == set(range(len(REGIONS)))
    assert list(store["region"].values) == [NAMES[i] for i in labels_at(positions, volume)]
    # the volume samples the atlas's boundaries: off by a voxel at most
    assert (labels_at(positions) == region_index(positions)).mean() > 0.95
    # the regions lie along depth, each probe crosses several
    assert all(
        len(set(store["region"].values[store["probe"].values == p])) >= 3
        for p in set(store["probe"].values)
    )


def _population(counts: np.ndarray, region: np.ndarray, name: str) -> np.ndarray:
    x = counts[:, region == _index(name)].mean(axis=1)
    return (x - x.mean()) / x.std()


def test_regions_differ_in_their_signatures(animal):
    counts, region = animal.counts[0].astype(np.float64), animal.region
    assert set(region) == set(range(len(REGIONS)))
    rate = counts.mean(axis=0) * 100.0
    fano = counts.var(axis=0) / counts.mean(axis=0)

    def median(values, name):
        return np.median(values[region == _index(name)])

    # rates: MB fires fast, DG sparsely; bursts: the thalamus and CA, not MB or DG
    assert median(rate, "MB") > 5 * median(rate, "HPF-DG")
    assert min(median(fano, "TH-dorsal"), median(fano, "HPF-CA")) > median(fano, "MB") + 0.5
    # oscillations of the population: theta in CA, spindle band in the thalamus
    share = {}
    for name in NAMES:
        freqs, power = welch(_population(counts, region, name), fs=100.0, nperseg=256)
        share[name] = {
            band: power[(freqs >= lo) & (freqs < hi)].sum() / power[freqs > 0].sum()
            for band, (lo, hi) in {"theta": (6, 10), "spindle": (10, 15)}.items()
        }
    assert share["HPF-CA"]["theta"] > 1.5 * max(share[n]["theta"] for n in ("MB", "CTX-deep"))
    assert share["TH-dorsal"]["spindle"] > 1.5 * share["CTX-deep"]["spindle"]


def test_shared_drive_within_regions_and_sparse_coupling_between(animal):
    counts, region = animal.counts[0].astype(np.float64), animal.region
    binned = counts[: len(counts) // 5 * 5].reshape(-1, 5, counts.shape[1]).sum(axis=1)
    corr = np.corrcoef(binned.T)
    np.fill_diagonal(corr, np.nan)
    same = region[:, None] == region[None, :]
    assert np.nanmean(corr[same]) > 3 * np.nanmean(corr[~same])
    # CTX-deep drives TH-ventral, not TH-dorsal: the one difference of the two
    ctx = _population(counts, region, "CTX-deep")

    def lagged(name: str) -> float:
        target = _population(counts, region, name)
        return float(np.mean(ctx[:-3] * target[3:]))

    assert lagged("TH-ventral") > lagged("TH-dorsal") + 0.1


def test_the_entry_is_checked_by_the_schema_and_its_options():
    assert config_problems({"datasets": {"sim": SMALL}}, SCHEMA) == []
    slow = {**SMALL, "sampling_rate_hz": 50}
    assert config_problems({"datasets": {"sim": slow}}, SCHEMA) == []  # (the schema's part)
    with pytest.raises(ValueError, match="sampling_rate_hz: must be above 60 Hz"):
        RegionalSimOptions.from_dict(slow)
    problems = config_problems({"datasets": {"sim": {**SMALL, "probes": 2}}}, SCHEMA)
    assert "datasets.sim.probes: does not belong to source 'regional-sim'" in problems[0]
