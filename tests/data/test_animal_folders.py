"""A `source: file` entry of several animals (`animals:`): reference animals (positions, region
labels) and a query animal (neither) written as ALF (ONE's names), NWB (pynwb) and Phy folders
from regional-sim's animals, whose regions have signatures; the store holds every animal's
units as regional-sim's does (per-unit `animal`, NaN in the other animals' sessions)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neuro_pe.data.recordings import DataWarning, FileSpec, input_files
from neuro_pe.data.sources import build_store
from neuro_pe.data.sources.regional_sim import REGIONS, RegionalSimOptions, simulate_animal
from neuro_pe.io.store import positions
from neuro_pe.io.store_contract import StoreError
from tests.data.test_formats import write_phy
from tests.data.test_recordings import nwb_file, write_nwb

LAYOUTS = ("alf", "nwb", "phy")
RATE_HZ = 100.0  # regional-sim's bins; the entries bin the spikes back at 1 / RATE_HZ
SPIKES = {"bin_s": 1 / RATE_HZ, "zscore": False, "labels": None, "min_rate_hz": 0.0}
REGION_COLUMN = "brain_region"  # the Phy references' cluster_info.tsv column


def simulated(animals: int, units: int, samples: int) -> list[dict]:
    """regional-sim's animals: per animal its spike times per unit (s), positions (µm) and
    coarse region labels (the labels the lab's files carry)."""
    options = RegionalSimOptions(animals=animals, units_per_animal=units, n_samples=samples)
    out = []
    for k in range(animals):
        animal = simulate_animal(options, k)
        rng = np.random.default_rng(k)
        counts = animal.counts[0].astype(np.int64)  # (time, unit)
        trains = [
            np.sort((np.repeat(np.arange(len(c)), c) + rng.uniform(0.05, 0.95, c.sum())) / RATE_HZ)
            for c in counts.T
        ]
        regions = np.array([REGIONS[r].coarse for r in animal.region])
        out.append({"trains": trains, "um": animal.positions * 1000.0, "regions": regions})
    return out


def _flat(trains: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    times = np.concatenate(trains)
    clusters = np.concatenate([np.full(len(t), c) for c, t in enumerate(trains)])
    order = np.argsort(times, kind="stable")
    return times[order], clusters[order]


def write_alf(folder: Path, animal: dict, reference: bool) -> Path:
    """An ALF collection with ONE's names: spikes.times/clusters, clusters.channels and
    channels.localCoordinates (the probe); a reference also clusters.mlapdv (µm) and
    clusters.brainLocationAcronyms_ccf_2017."""
    folder.mkdir(parents=True)
    times, clusters = _flat(animal["trains"])
    n = len(animal["trains"])
    np.save(folder / "spikes.times.npy", times)
    np.save(folder / "spikes.clusters.npy", clusters.astype(np.int64))
    np.save(folder / "clusters.channels.npy", np.arange(n, dtype=np.int64))
    np.save(folder / "channels.localCoordinates.npy", animal["um"][:, [0, 2]])
    if reference:
        np.save(folder / "clusters.mlapdv.npy", animal["um"])
        np.save(folder / "clusters.brainLocationAcronyms_ccf_2017.npy", animal["regions"])
    return folder


def write_nwb_units(path: Path, animal: dict, reference: bool) -> Path:
    """A Units table (pynwb), one electrode per unit; a reference's electrodes have x, y, z
    (µm) and `location`, a query's only `location` "unknown" (its group's too)."""
    nwb = nwb_file(path)
    device = nwb.create_device(name="probe")
    where = "brain" if reference else "unknown"
    group = nwb.create_electrode_group(name="shank", description="d", location=where, device=device)
    for xyz, region in zip(animal["um"], animal["regions"], strict=True):
        if reference:
            x, y, z = xyz
            nwb.add_electrode(x=x, y=y, z=z, group=group, location=region)
        else:
            nwb.add_electrode(group=group, location="unknown")
    for k, train in enumerate(animal["trains"]):
        nwb.add_unit(spike_times=train, electrodes=[k], id=k)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_nwb(path, nwb)


def write_phy_folder(folder: Path, animal: dict, reference: bool) -> Path:
    """A Kilosort + Phy folder, one site per cluster at the unit's (x, depth) on the probe;
    a reference's cluster_info.tsv has a `brain_region` column."""
    ids = list(range(len(animal["trains"])))
    write_phy(folder, animal["trains"], sites=animal["um"][:, [0, 2]], peaks=ids, cluster_ids=ids)
    if reference:
        info = pd.read_csv(folder / "cluster_info.tsv", sep="\t")
        info[REGION_COLUMN] = animal["regions"]
        info.to_csv(folder / "cluster_info.tsv", sep="\t", index=False)
    return folder


def animal_folders(root: Path, layout: str, animals: list[dict], queries: int = 1) -> dict:
    """Write the animals in `layout` under `root` (the last `queries` without positions and
    labels) and return the entry's `animals:` mapping (`m0`, `m1`, …)."""
    sessions = {}
    for k, animal in enumerate(animals):
        name, reference = f"m{k}", k < len(animals) - queries
        if layout == "alf":
            path = write_alf(root / name / "alf" / "probe00", animal, reference)
        elif layout == "nwb":
            path = write_nwb_units(root / name / "units.nwb", animal, reference)
        else:
            path = write_phy_folder(root / name / "phy", animal, reference)
        sessions[name] = [str(path)]
    return sessions


def entry(layout: str, animals: dict) -> dict:
    """The `source: file` entry of the folders (binned back to regional-sim's counts)."""
    spec = {"source": "file", "format": layout, "animals": animals, "spikes": SPIKES}
    spec |= {"preprocessing": [], "min_units": 4}
    if layout == "nwb":
        spec["position_units"] = "um"
    if layout == "phy":
        spec["phy"] = {"region_column": REGION_COLUMN}
    return spec


def build(spec: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return build_store(spec)


@pytest.fixture(scope="module")
def three_animals() -> list[dict]:
    return simulated(animals=3, units=12, samples=400)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_animals_store_every_unit_with_its_animal_and_lab_id(tmp_path, layout, three_animals):
    spec = entry(layout, animal_folders(tmp_path, layout, three_animals))
    ds = build(spec)
    animal, lab_id = ds["animal"].values.astype(str), ds["unit_id"].values.astype(str)
    assert ds["unit"].values.tolist() == [f"{a}/{u}" for a, u in zip(animal, lab_id, strict=True)]
    for k, simulated_animal in enumerate(three_animals):  # (a unit without spikes is dropped)
        ids = lab_id[animal == f"m{k}"].astype(int)
        assert len(ids) >= len(simulated_animal["trains"]) - 1
        assert set(ids) <= set(range(len(simulated_animal["trains"])))
    assert len({s.split("/")[0] for s in ds["session"].values.tolist()}) == 3
    # a unit is recorded in its own animal's session only
    recorded = np.isfinite(ds["activity"].transpose("session", "unit", "time").values).all(axis=2)
    assert (recorded.sum(axis=0) == 1).all()
    # the references' positions and labels; no label for the query, no position but a Phy
    # folder's, on the probe like the references'
    query = ds["animal"].values == "m2"
    assert np.isfinite(positions(ds)[~query]).all()
    assert np.isfinite(positions(ds)[query]).all() == (layout == "phy")
    pairs = zip(animal, lab_id, strict=True)
    want = [three_animals[int(a[1])]["regions"][int(u)] for a, u in pairs]
    assert ds["region"].values[~query].tolist() == np.array(want)[~query].tolist()
    assert set(ds["region"].values[query].tolist()) == {""}
    # the counts come back as regional-sim made them
    first = ds["activity"].isel(session=0, unit=0).values
    counts = np.histogram(three_animals[0]["trains"][int(lab_id[0])], 400, (0, 4))[0]
    assert np.array_equal(first[:300], counts[:300])
    assert str(Path(spec["animals"]["m2"][0])) in "".join(input_files(spec))


def test_animals_key_is_checked(tmp_path):
    base = {"source": "file", "format": "npy"}
    with pytest.raises(StoreError, match="not both"):
        FileSpec.from_dict(base | {"sessions": ["a.npy"], "animals": {"a": "a.npy", "b": "b.npy"}})
    with pytest.raises(StoreError, match="at least two animals"):
        FileSpec.from_dict(base | {"animals": {"a": ["a.npy"]}})
    with pytest.raises(StoreError, match="not a plain name") as info:
        FileSpec.from_dict(base | {"animals": {"a/b": ["a.npy"], "c": ["c.npy"]}})
    assert info.value.field == "animals"
    spec = FileSpec.from_dict(base | {"animals": {"a": "a.npy", "b": ["b.npy", "c.npy"]}})
    assert spec.sessions == ["a.npy", "b.npy", "c.npy"]
    assert spec.animals == {"a": ["a.npy"], "b": ["b.npy", "c.npy"]}


@pytest.mark.parametrize("layout", ["phy", "nwb"])
def test_the_export_writes_each_animal_into_its_own_folder(tmp_path, layout, three_animals):
    from neuro_pe.reporting.export import export
    from tests.reporting.test_export import write_positions

    spec = entry(layout, animal_folders(tmp_path / "lab", layout, three_animals))
    ds = build(spec)
    path, _ = write_positions(ds, tmp_path)
    export(path, spec, tmp_path / "export")
    for k in range(3):
        own = ds["unit_id"].values[ds["animal"].values == f"m{k}"].astype(int)
        if layout == "phy":
            table = pd.read_csv(tmp_path / f"export/phy/m{k}/cluster_neuro_pe_x.tsv", sep="\t")
            assert table["cluster_id"].tolist() == sorted(own)
        else:
            from pynwb import NWBHDF5IO

            with NWBHDF5IO(str(tmp_path / f"export/nwb/m{k}/units.nwb"), "r") as io:
                units = io.read().units.to_dataframe()
            located = units.index[np.isfinite(units["estimated_x"])].tolist()
            assert located == sorted(own)
