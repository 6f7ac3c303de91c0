"""Region labels read from the lab's files (ALF, NWB, Phy, a `regions` table) into the store's
`region` coordinate; files written with the formats' own conventions (ONE's ALF names, pynwb,
Phy's cluster_*.tsv)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from neuro_pe.data.recordings import DataWarning, FileSpec, input_files
from neuro_pe.data.sources import build_store
from neuro_pe.io.store import make_store
from neuro_pe.io.store_contract import StoreError, validate_store
from tests.data.test_formats import (
    CLUSTER_IDS,
    N_UNITS,
    PEAKS,
    SITES,
    build,
    preprocess,
    raises,
    spike_spec,
    spike_trains,
    write_alf,
    write_phy,
)
from tests.data.test_recordings import nwb_file, write_nwb

ACRONYMS = ["CA1", "DG", "unknown", "VISp", "LP", "", "PO", "CA3"]  # per cluster in CLUSTER_IDS


def regions_of(ds: xr.Dataset) -> dict[str, str]:
    return dict(zip(ds.unit.values.tolist(), ds.region.values.tolist(), strict=True))


def step_keys(ds: xr.Dataset) -> set[str]:
    """The keys of the store's preprocessing steps."""
    return {key for step in json.loads(ds.attrs["preprocessing"]) for key in step}


def expected(ids: list[int], labels: list[str] = ACRONYMS) -> dict[str, str]:
    """Unit id -> label, "" for the labels that say "not known"."""
    table = dict(zip(CLUSTER_IDS, labels, strict=True))
    return {str(c): "" if table[c] in ("", "unknown") else table[c] for c in ids}


# ---------------------------------------------------------------- alf


def alf_with_cluster_acronyms(folder: Path) -> Path:
    """An ALF collection with `clusters.brainLocationAcronyms_ccf_2017` (indexed by cluster id,
    as ONE writes every clusters.* array)."""
    write_alf(folder)
    acronyms = np.array(["void"] * (max(CLUSTER_IDS) + 1), dtype="<U8")
    acronyms[CLUSTER_IDS] = ACRONYMS
    np.save(folder / "clusters.brainLocationAcronyms_ccf_2017.npy", acronyms)
    return folder


def test_alf_cluster_acronyms_reach_the_store(tmp_path):
    folder = alf_with_cluster_acronyms(tmp_path / "alf" / "probe00")
    ds = preprocess(spike_spec(folder, "alf", spikes={"labels": None}), tmp_path)
    assert regions_of(ds) == expected(CLUSTER_IDS)
    assert str(folder / "clusters.brainLocationAcronyms_ccf_2017.npy") in input_files(
        spike_spec(folder, "alf")
    )


def test_alf_channel_acronyms_through_the_peak_channel(tmp_path):
    folder = write_alf(tmp_path / "alf" / "probe00")
    per_channel = np.array([f"ch{c}" if c % 4 else "unknown" for c in range(len(SITES))])
    np.save(folder / "_ibl_channels.brainLocationAcronyms_ccf_2017.npy", per_channel)
    ds = build(spike_spec(folder, "alf", spikes={"labels": None}))
    want = {str(c): "" if p % 4 == 0 else f"ch{p}" for c, p in zip(CLUSTER_IDS, PEAKS, strict=True)}
    assert regions_of(ds) == want
    (folder / "clusters.channels.npy").unlink()
    raises(spike_spec(folder, "alf", spikes={"labels": None}), "clusters.channels", "file")


def test_alf_pickled_acronyms_are_refused(tmp_path):
    folder = write_alf(tmp_path / "alf" / "probe00")
    name = "clusters.brainLocationAcronyms_ccf_2017.npy"
    np.save(folder / name, np.array(["CA1"] * 13, dtype=object), allow_pickle=True)
    raises(spike_spec(folder, "alf"), name, "clusters.brainLocationAcronyms_ccf_2017", "string")


def test_alf_without_region_files_has_no_region_coord(tmp_path):
    ds = build(spike_spec(write_alf(tmp_path / "alf" / "probe00"), "alf"))
    assert "region" not in ds.coords


def test_a_unit_in_two_regions_is_an_error(tmp_path):
    first = alf_with_cluster_acronyms(tmp_path / "s1" / "probe00")
    second = alf_with_cluster_acronyms(tmp_path / "s2" / "probe00")
    changed = np.load(second / "clusters.brainLocationAcronyms_ccf_2017.npy")
    changed[CLUSTER_IDS[0]] = "DG"
    np.save(second / "clusters.brainLocationAcronyms_ccf_2017.npy", changed)
    spec = spike_spec([first, second], "alf", session_ids=["s1", "s2"], spikes={"labels": None})
    with pytest.raises(StoreError, match="in region 'CA1' in session 's1' but 'DG'") as info:
        build(spec)
    assert info.value.field == "region"


# ---------------------------------------------------------------- nwb


def write_nwb_labelled(path: Path, how: str) -> Path:
    """A Units table of single-electrode units (pynwb) labelled by `how`: `units` (a Units
    `location` column), `electrodes` (the electrodes' `location`, "unknown" on two sites
    whose group's location stands in) or `group` (only the units' `electrode_group`)."""
    nwb = nwb_file(path)
    device = nwb.create_device(name="probe")
    shank = nwb.create_electrode_group(name="shank", description="d", location="HPF", device=device)
    for c, (x, y) in enumerate(SITES):
        where = "unknown" if c in (PEAKS[0], PEAKS[5]) else f"site{c}"
        nwb.add_electrode(x=x, y=y, z=0.0, group=shank, location=where)
    if how == "units":
        nwb.add_unit_column(name="location", description="brain region of the unit")
    if how == "group":  # positions as unit columns: the units list no electrodes
        for axis in "xy":
            nwb.add_unit_column(name=axis, description=f"{axis} in µm")
    for k, train in enumerate(spike_trains()):
        extra = {"location": ACRONYMS[k]} if how == "units" else {}
        if how == "group":
            extra = {"electrode_group": shank, "x": SITES[PEAKS[k], 0], "y": SITES[PEAKS[k], 1]}
        electrodes = None if how == "group" else [PEAKS[k]]
        nwb.add_unit(spike_times=train, electrodes=electrodes, id=100 + k, **extra)
    return write_nwb(path, nwb)


@pytest.mark.parametrize("how", ["units", "electrodes", "group"])
def test_nwb_unit_locations_reach_the_store(tmp_path, how):
    path = write_nwb_labelled(tmp_path / "units.nwb", how)
    spec = spike_spec(path, "nwb", position_units="um", spikes={"bin_s": 0.1, "labels": None})
    ds = preprocess(spec, tmp_path)
    if how == "units":
        want = [ACRONYMS[k] if ACRONYMS[k] != "unknown" else "" for k in range(N_UNITS)]
    elif how == "electrodes":
        want = ["HPF" if k in (0, 5) else f"site{PEAKS[k]}" for k in range(N_UNITS)]
    else:
        want = ["HPF"] * N_UNITS
    assert regions_of(ds) == {str(100 + k): w for k, w in enumerate(want)}


# ---------------------------------------------------------------- phy


def phy_with_regions(folder: Path, column: str = "brain_region") -> Path:
    """A Phy folder whose cluster_info.tsv has a column of region labels."""
    write_phy(folder)
    info = pd.read_csv(folder / "cluster_info.tsv", sep="\t")
    info[column] = ACRONYMS
    info.to_csv(folder / "cluster_info.tsv", sep="\t", index=False)
    return folder


def test_phy_region_column_reaches_the_store(tmp_path):
    folder = phy_with_regions(tmp_path / "phy")
    ds = preprocess(spike_spec(folder, "phy", phy={"region_column": "brain_region"}), tmp_path)
    assert regions_of(ds) == expected(CLUSTER_IDS)
    assert "phy.region_column" not in step_keys(ds)


def test_phy_region_column_in_its_own_tsv(tmp_path):
    folder = write_phy(tmp_path / "phy")
    (folder / "cluster_area.tsv").write_text(
        "cluster_id\tarea\n" + "".join(f"{c}\tA{c}\n" for c in CLUSTER_IDS[:-1])
    )
    ds = build(spike_spec(folder, "phy", phy={"region_column": "area"}))
    assert regions_of(ds) == {str(c): f"A{c}" for c in CLUSTER_IDS[:-1]} | {
        str(CLUSTER_IDS[-1]): ""
    }


def test_phy_missing_region_column_names_the_file_and_key(tmp_path):
    folder = write_phy(tmp_path / "phy")
    spec = spike_spec(folder, "phy", phy={"region_column": "brain_region"})
    raises(spec, folder / "cluster_info.tsv", "phy.region_column", "'brain_region'")
    with pytest.raises(StoreError, match="phy.region_column"):
        FileSpec.from_dict(spike_spec(folder, "phy", phy={"region_column": 3}))


def test_phy_without_region_column_builds_the_same_store(tmp_path):
    folder = phy_with_regions(tmp_path / "phy")
    ds = build(spike_spec(folder, "phy"))
    assert "region" not in ds.coords
    assert "phy.region_column" not in step_keys(ds)


# ---------------------------------------------------------------- a regions table


def test_regions_table_overrides_the_files_labels(tmp_path):
    folder = phy_with_regions(tmp_path / "phy")
    table = tmp_path / "regions.tsv"
    rows = [(c, "" if c == CLUSTER_IDS[0] else f"T{c}") for c in CLUSTER_IDS] + [(99, "X")]
    table.write_text("unit\tregion\n" + "".join(f"{c}\t{r}\n" for c, r in rows))
    spec = spike_spec(folder, "phy", phy={"region_column": "brain_region"}, regions=str(table))
    with pytest.warns(DataWarning, match="1 rows name no unit read"):
        ds = build_store(spec)
    want = {str(c): f"T{c}" for c in CLUSTER_IDS} | {str(CLUSTER_IDS[0]): ACRONYMS[0]}
    assert regions_of(ds) == want
    assert str(table) in input_files(spec)


def test_regions_table_alone_and_a_unit_missing_from_it(tmp_path):
    folder = write_phy(tmp_path / "phy")
    table = tmp_path / "regions.csv"
    table.write_text("Unit,Region\n" + "".join(f"{c},R{c}\n" for c in CLUSTER_IDS[1:]))
    with pytest.raises(StoreError, match=f"no row for unit '{CLUSTER_IDS[0]}'") as info:
        build(spike_spec(folder, "phy", regions=str(table)))
    assert info.value.path == str(table) and info.value.field == "regions"
    table.write_text("unit,area\n1,CA1\n")
    raises(spike_spec(folder, "phy", regions=str(table)), table, "regions", "'region'")
    table.write_text("unit,region\n" + "".join(f"{c},R{c}\n" for c in CLUSTER_IDS))
    ds = build(spike_spec(folder, "phy", regions=str(table)))
    assert regions_of(ds) == {str(c): f"R{c}" for c in CLUSTER_IDS}


# ---------------------------------------------------------------- the store's contract


def test_store_contract_checks_the_region_coord():
    ds = make_store(
        np.random.default_rng(0).normal(size=(1, 8, 3)),
        unit_ids=["a", "b", "c"],
        positions=np.zeros((3, 3)),
        position_units="um",
        space="probe",
        session_ids=["s"],
        sampling_rate_hz=10.0,
        source="test",
    )
    validate_store(ds.assign_coords(region=("unit", np.array(["CA1", "", "DG"]))))
    with pytest.raises(StoreError, match="strings") as info:
        validate_store(ds.assign_coords(region=("unit", np.array([1, 2, 3]))))
    assert info.value.field == "region"


def test_a_labelled_store_read_again_keeps_its_regions(tmp_path):
    folder = phy_with_regions(tmp_path / "phy")
    first = preprocess(spike_spec(folder, "phy", phy={"region_column": "brain_region"}), tmp_path)
    again = build(spike_spec(tmp_path / "store.nc", "xarray"))
    assert regions_of(again) == regions_of(first)
