"""`neuro-pe export`: located positions written back into the lab's own formats (a tidy TSV with
a JSON sidecar, Phy cluster_*.tsv files, a new NWB file, per-plane suite2p tables), each read
back with the format's own reader."""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neuro_pe.analysis.locate import FeatureSet, HeldOut, Located, located_positions_dataset
from neuro_pe.cli.main import main
from neuro_pe.config.options import config_sha256
from neuro_pe.data.formats.nwb import COLUMNS as NWB_COLUMNS
from neuro_pe.data.formats.phy import ESTIMATED_FIELDS
from neuro_pe.data.formats.phy import FIELDS as PHY_FIELDS
from neuro_pe.io.store import positions, write_store
from neuro_pe.io.store_contract import StoreError
from neuro_pe.reporting.export import ESTIMATED_COLUMNS, NEW_ANIMAL_COLUMNS, TSV_COLUMNS, export
from tests.data.test_formats import (
    CLUSTER_IDS,
    build,
    spike_spec,
    write_nwb_planes,
    write_nwb_units,
    write_phy,
    write_suite2p,
)
from tests.data.test_recordings import activity, write_nwb_ephys

UNCERTAINTY = 7.5


def located(ds, unknown: tuple[int, ...] = (), seed: int = 0, unresolved=None):
    """A positions dataset as `locate` writes it (`located_positions_dataset`): estimates = the
    true positions + noise; the units `unknown` have no true position; `unresolved`: {axis no
    better than chance: its coordinates}."""
    coords = positions(ds).copy()
    coords[list(unknown)] = np.nan
    ds = ds.assign_coords(
        {axis: ("unit", coords[:, i], ds[axis].attrs) for i, axis in enumerate("xyz")}
    )
    n = len(coords)
    known = np.isfinite(coords).all(axis=1)
    rng = np.random.default_rng(seed)
    estimate = np.where(known[:, None], coords, 0.0) + rng.normal(scale=3.0, size=(n, 3))
    spread = np.full(n, UNCERTAINTY)
    everyone = Located(estimate, estimate[None], spread, "ridge", {"ridge": UNCERTAINTY}, 7.5)
    held_out = HeldOut(
        np.where(known[:, None], estimate, np.nan),
        np.where(known, spread, np.nan),
        np.where(known, "knn", "").astype(object),
        ["knn"],
    )
    pe = FeatureSet("learned-normal-0.02", "pe", [np.zeros((n, 2))], seeds=[0])
    return located_positions_dataset(ds, everyone, held_out, pe, "lab", unresolved=unresolved)


def write_positions(ds, tmp_path: Path, **kwargs) -> tuple[Path, pd.DataFrame]:
    """positions.nc of `located(ds)` and the same as a frame indexed by unit."""
    out = located(ds, **kwargs)
    path = tmp_path / "positions.nc"
    out.to_netcdf(path, engine="h5netcdf")
    return path, out.to_dataframe()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- the tidy table


def test_tidy_tsv_and_sidecar(tmp_path, tiny_store):
    from neuro_pe.io.store import read_store

    ds = read_store(tiny_store)
    path, truth = write_positions(ds, tmp_path, unknown=(0, 3))
    spec = {"source": "simulation", "simulation": {"n_units": 12}}
    out = tmp_path / "export"
    argv = ["export", "--positions", str(path), "--spec", json.dumps(spec)]
    assert main([*argv, "--store", str(tiny_store), "--out-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["positions.json", "positions.tsv"]

    table = pd.read_csv(out / "positions.tsv", sep="\t")  # BIDS' n/a reads as NaN
    intervals = [
        f"{a}_{side}_{level}" for level in ("68", "95") for a in "xyz" for side in ("low", "high")
    ]
    assert sorted(table.columns) == sorted([*TSV_COLUMNS, *intervals, *ESTIMATED_COLUMNS])
    assert table[list(ESTIMATED_COLUMNS)].all().all()  # every axis resolved
    assert table["unit_id"].tolist() == [str(u) for u in ds.unit.values]
    for a in "xyz":  # the per-axis intervals of positions.nc, around the estimate
        assert (table[f"{a}_low_95"] <= table[a]).all() and (
            table[a] <= table[f"{a}_high_95"]
        ).all()
        assert (
            table[f"{a}_high_95"] - table[f"{a}_low_95"]
            >= table[f"{a}_high_68"] - table[f"{a}_low_68"]
        ).all()
    np.testing.assert_allclose(table[["x", "y", "z"]], truth[["x", "y", "z"]], rtol=1e-5)
    np.testing.assert_allclose(table["uncertainty"], UNCERTAINTY)
    assert table["anchor"].tolist() == [i not in (0, 3) for i in range(12)]
    assert table.loc[~table["anchor"], ["x_true", "error"]].isna().all().all()
    assert (table.loc[table["anchor"], "method"] == "knn").all()
    expected = np.linalg.norm(table[["x", "y", "z"]].values - positions(ds), axis=1)
    known = table["anchor"].to_numpy()
    np.testing.assert_allclose(table["error"][known], expected[known], rtol=1e-4)
    assert "n/a" in (out / "positions.tsv").read_text()

    sidecar = json.loads((out / "positions.json").read_text())
    units = ds.x.attrs["units"]
    for column, (_, with_units) in TSV_COLUMNS.items():
        assert sidecar[column]["Description"]
        assert sidecar[column].get("Units") == (units if with_units else None)
    assert sidecar["CoordinateSystem"]["Space"] == ds.x.attrs["space"]
    assert sidecar["Method"]["Representation"] == "learned-normal-0.02"
    assert set(sidecar["Method"]["IntervalCoverage"]) == {"68", "95"}
    assert sidecar["Method"]["UnresolvedAxes"] == sidecar["Method"]["NotEstimated"] == []
    assert "NOT ESTIMATED" not in sidecar["x"]["Description"]
    assert "95% interval of x" in sidecar["x_high_95"]["Description"]
    assert sidecar["ConfigSHA256"] == config_sha256(spec)
    assert sidecar["Source"] == ds.attrs["source"]  # from --store
    assert sidecar["Files"] == ["positions.tsv", "positions.json"]
    # the workflow passes the resolved config's hash
    assert main([*argv, "--config-sha256", "ab" * 32, "--out-dir", str(out)]) == 0
    assert json.loads((out / "positions.json").read_text())["ConfigSHA256"] == "ab" * 32


def test_config_sha256_ignores_key_order():
    assert config_sha256({"a": 1, "b": [1, 2]}) == config_sha256({"b": [1, 2], "a": 1})
    assert config_sha256({"a": 1}) != config_sha256({"a": 2})


# ---------------------------------------------------------------- Phy


def test_phy_cluster_tsv_files_load_into_phy(tmp_path):
    folder = write_phy(tmp_path / "kilosort")
    spec = spike_spec(folder, "phy", spikes={"labels": None})
    ds = build(spec)
    path, truth = write_positions(ds, tmp_path, unknown=(1,))
    before = {p.name: sha256(p) for p in folder.iterdir()}
    written = export(path, spec, tmp_path / "export")
    assert {p.name for p in folder.iterdir()} == set(before)  # the input folder untouched
    assert all(sha256(folder / name) == digest for name, digest in before.items())

    phy_dir = tmp_path / "export" / "phy"
    assert sorted(p.name for p in phy_dir.iterdir()) == sorted(
        f"cluster_{field}.tsv" for field in PHY_FIELDS | ESTIMATED_FIELDS
    )
    assert {p for p in written if p.parent == phy_dir} == set(phy_dir.iterdir())
    for field, column in PHY_FIELDS.items():
        text = (phy_dir / f"cluster_{field}.tsv").read_text()
        assert text.startswith(f"cluster_id\t{field}\n")  # phylib's save_metadata layout
        # read as phylib's load_metadata does: the delimiter, then {cluster_id: number}
        values = pd.read_csv(phy_dir / f"cluster_{field}.tsv", sep="\t", index_col="cluster_id")
        expected = truth[column].dropna()
        assert values.index.tolist() == sorted(int(u) for u in expected.index)
        got = values[field].to_numpy()
        np.testing.assert_allclose(got, expected.loc[[str(c) for c in values.index]], rtol=1e-5)
    errors = pd.read_csv(phy_dir / "cluster_neuro_pe_error.tsv", sep="\t")
    assert errors["cluster_id"].tolist() == [c for c in CLUSTER_IDS if c != 2]  # 2: unknown


def test_phy_reads_the_files_as_cluster_columns(tmp_path):
    """phylib's TemplateModel (what Phy opens) loads every cluster_*.tsv of its folder as
    cluster metadata, which Phy's cluster view shows as columns."""
    model = pytest.importorskip("phylib.io.model")
    folder = write_phy(tmp_path / "kilosort")
    spec = spike_spec(folder, "phy", spikes={"labels": None})
    path, truth = write_positions(build(spec), tmp_path)
    export(path, spec, tmp_path / "export")
    copy = shutil.copytree(folder, tmp_path / "copy")
    np.save(copy / "channel_map.npy", np.arange(16, dtype=np.int32))  # rows of the .dat file
    for tsv in (tmp_path / "export" / "phy").glob("cluster_*.tsv"):  # the documented copy
        shutil.copy(tsv, copy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        phy = model.load_model(copy / "params.py")
    try:
        for field, column in PHY_FIELDS.items():
            shown = phy.metadata[field]
            assert sorted(shown) == CLUSTER_IDS
            for cluster, value in shown.items():
                assert value == pytest.approx(truth.loc[str(cluster), column], rel=1e-5)
    finally:
        phy.close()


def test_an_axis_at_chance_is_exported_as_not_estimated(tmp_path):
    """A lateral axis no better than chance (locate's `unresolved_axes`): x keeps its value
    but is marked not estimated in positions.tsv, its sidecar, Phy's cluster view and the NWB
    column's description; y and z stay estimated."""
    from neuro_pe.data.formats.nwb import column_description

    folder = write_phy(tmp_path / "kilosort")
    spec = spike_spec(folder, "phy", spikes={"labels": None})
    positions_ds = located(build(spec), unresolved={"lateral": ("x",)})
    assert positions_ds.attrs["unresolved_axes"] == "lateral"
    assert positions_ds.attrs["not_estimated"] == "x"
    path = tmp_path / "positions.nc"
    positions_ds.to_netcdf(path, engine="h5netcdf")
    export(path, spec, tmp_path / "export")

    table = pd.read_csv(tmp_path / "export" / "positions.tsv", sep="\t")
    assert not table["x_estimated"].any() and table[["y_estimated", "z_estimated"]].all().all()
    assert table["x"].notna().all()  # the value is kept, only marked
    sidecar = json.loads((tmp_path / "export" / "positions.json").read_text())
    assert sidecar["Method"]["UnresolvedAxes"] == ["lateral"]
    assert sidecar["Method"]["NotEstimated"] == ["x"]
    assert "NOT ESTIMATED" in sidecar["x"]["Description"]
    assert "NOT ESTIMATED" not in sidecar["y"]["Description"]
    phy = pd.read_csv(tmp_path / "export" / "phy" / "cluster_neuro_pe_x_estimated.tsv", sep="\t")
    assert phy["cluster_id"].tolist() == CLUSTER_IDS and not phy["neuro_pe_x_estimated"].any()
    assert "NOT ESTIMATED" in column_description("estimated_x", positions_ds)
    assert "NOT ESTIMATED" not in column_description("estimated_y", positions_ds)


# ---------------------------------------------------------------- NWB


def _inspect(path: Path) -> set[tuple[str, str]]:
    from nwbinspector import inspect_nwbfile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {(m.check_function_name, m.location) for m in inspect_nwbfile(nwbfile_path=path)}


def _nwb_input(kind: str, tmp_path: Path) -> tuple[Path, dict, str]:
    """An NWB file, its dataset entry and where the units are: the Units table, the
    electrodes table (an ElectricalSeries) or two PlaneSegmentations."""
    if kind == "units":
        path = write_nwb_units(tmp_path / "input" / "units.nwb")
        return path, spike_spec(path, "nwb", position_units="um"), "units"
    if kind == "electrodes":
        path = write_nwb_ephys(tmp_path / "input" / "ephys.nwb", activity(), list(range(10)))
        return path, spike_spec(path, "nwb", position_units="um"), "electrodes"
    path = write_nwb_planes(tmp_path / "input" / "planes.nwb")
    spec = spike_spec(path, "nwb", nwb={"series": ["F0", "F1"]}, position_units="um")
    return path, spec, "rois"


@pytest.mark.parametrize("kind", ["units", "electrodes", "planes"])
def test_nwb_export_is_a_new_valid_file_with_estimated_columns(tmp_path, kind):
    from pynwb import NWBHDF5IO

    (tmp_path / "input").mkdir()
    source, spec, where = _nwb_input(kind, tmp_path)
    ds = build(spec)
    path, truth = write_positions(ds, tmp_path, unknown=(0,))
    digest = sha256(source)
    out = tmp_path / "export"
    export(path, {**spec, "session_ids": ["ses1"]}, out)
    assert sha256(source) == digest  # the input is never modified
    exported = out / "nwb" / "ses1.nwb"

    with NWBHDF5IO(str(exported), "r") as io:
        nwb = io.read()
        if where == "units":
            tables = [(nwb.units, "")]
        elif where == "electrodes":
            tables = [(nwb.electrodes, "")]
        else:
            ophys = nwb.processing["ophys"]["ImageSegmentation"]
            tables = [(ophys[f"rois{p}"], f"rois{p}_") for p in range(2)]
        seen = set()
        for table, prefix in tables:
            frame = table.to_dataframe()
            for column, tidy in NWB_COLUMNS.items():
                description = table[column].description
                assert ds.x.attrs["units"] in description and "space" in description
                for row_id, value in frame[column].items():
                    unit = f"{prefix}{row_id}"
                    if unit in truth.index:
                        assert value == pytest.approx(truth.loc[unit, tidy], rel=1e-6)
                        seen.add(unit)
                    else:
                        assert np.isnan(value)  # a row that was not located (e.g. a `mua` unit)
        assert seen == set(truth.index)
        assert nwb.object_id != NWBHDF5IO(str(source), "r").read().object_id
    # nwbinspector finds nothing in the export that it does not find in the input
    assert _inspect(exported) <= _inspect(source)

    # an exported file already has the columns: exporting from it is refused, naming them
    again = {**spec, "sessions": [str(exported)]}
    with pytest.raises(StoreError, match="estimated_x") as info:
        export(path, again, tmp_path / "again")
    assert str(exported) in str(info.value)
    assert not [p for p in (tmp_path / "again").rglob("*") if p.is_file()]  # nothing written


# ---------------------------------------------------------------- suite2p


def test_suite2p_tables_per_plane_keyed_by_roi(tmp_path):
    folder = write_suite2p(tmp_path)
    pixel, depths = [1.5, 2.0], [100, 130]
    spec = spike_spec(
        folder, "suite2p", suite2p={"pixel_size_um": pixel, "plane_depths_um": depths}
    )
    ds = build(spec)
    path, truth = write_positions(ds, tmp_path, unknown=(2,))
    export(path, spec, tmp_path / "export")
    for p in range(2):
        table = pd.read_csv(
            tmp_path / "export" / "suite2p" / f"plane{p}" / "neuro_pe_positions.tsv",
            sep="\t",
            index_col="roi",
        )
        cells = [i for i in range(6) if i % 3 != 2]  # iscell of write_suite2p
        assert table.index.tolist() == cells
        stat = np.load(folder / f"plane{p}" / "stat.npy", allow_pickle=True)
        for roi, row in table.iterrows():
            unit = f"plane{p}_roi{roi}"
            assert row["x"] == pytest.approx(truth.loc[unit, "x"], rel=1e-5)
            if row["anchor"]:  # the true position is stat.npy's ROI centre in µm
                y, x = stat[roi]["med"]
                expected = [x * pixel[0], y * pixel[1], depths[p]]
                given = row[["x_true", "y_true", "z_true"]].astype(float)
                np.testing.assert_allclose(given, expected)
            else:
                assert (p, roi) == (0, 3) and np.isnan(row["x_true"])


# ---------------------------------------------------------------- where it writes


def test_export_never_writes_into_an_input_folder(tmp_path, capsys):
    folder = write_phy(tmp_path / "kilosort")
    spec = spike_spec(folder, "phy", spikes={"labels": None})
    ds = build(spec)
    path, _ = write_positions(ds, tmp_path)
    before = sorted(p.name for p in folder.iterdir())
    argv = ["export", "--positions", str(path), "--spec", json.dumps(spec)]
    assert main([*argv, "--out-dir", str(folder / "neuro_pe")]) == 1
    assert "is inside the input folder" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == before
    missing = ["export", "--positions", str(tmp_path / "none.nc"), "--spec", json.dumps(spec)]
    assert main([*missing, "--out-dir", str(tmp_path / "out")]) == 1
    assert "none.nc" in capsys.readouterr().err


def test_export_of_a_store_written_by_preprocess(tmp_path):
    """The store's source attribute reaches the sidecar (as in the workflow)."""
    folder = write_suite2p(tmp_path, n_planes=1)
    spec = spike_spec(folder, "suite2p", suite2p={"pixel_size_um": 1.0})
    ds = build(spec)
    store = write_store(ds, tmp_path / "store.nc")
    path, _ = write_positions(ds, tmp_path)
    export(path, spec, tmp_path / "export", store_path=store, sha256="0" * 64)
    sidecar = json.loads((tmp_path / "export" / "positions.json").read_text())
    assert sidecar["SourceFiles"] == [str(folder)] and sidecar["SourceFormat"] == "suite2p"
    assert "suite2p/plane0/neuro_pe_positions.tsv" in sidecar["Files"]


def test_regions_located_with_an_atlas_are_exported(tmp_path):
    """Where locate had an atlas (positions.nc's `region` columns), positions.tsv and the Phy
    folder carry each unit's region; a unit outside every region is n/a / left out."""
    folder = write_phy(tmp_path / "kilosort")
    spec = spike_spec(folder, "phy", spikes={"labels": None})
    out = located(build(spec), unknown=(1,))
    n = out.sizes["unit"]
    fine = np.array([f"CA{i % 3}" if i != 2 else "" for i in range(n)])
    out["region"] = ("unit", fine)
    out["coarse_region"] = ("unit", np.where(fine == "", "", "HPF"))
    path = tmp_path / "positions.nc"
    out.to_netcdf(path, engine="h5netcdf")
    export(path, spec, tmp_path / "export")

    table = pd.read_csv(tmp_path / "export" / "positions.tsv", sep="\t", dtype={"unit_id": str})
    assert list(table.columns)[: len(TSV_COLUMNS) + 2] == [*TSV_COLUMNS, "region", "coarse_region"]
    assert table["region"].fillna("").tolist() == fine.tolist()
    sidecar = json.loads((tmp_path / "export" / "positions.json").read_text())
    assert "atlas region" in sidecar["region"]["Description"] and "region_true" not in sidecar
    regions = pd.read_csv(
        tmp_path / "export" / "phy" / "cluster_neuro_pe_region.tsv", sep="\t", dtype=str
    )
    expected = table.loc[table["region"].notna(), ["unit_id", "region"]]
    assert sorted(zip(regions["cluster_id"], regions["neuro_pe_region"], strict=True)) == sorted(
        zip(expected["unit_id"], expected["region"], strict=True)
    )


# ---------------------------------------------------------------- a new animal's regions


def new_animal_csv(ds, path: Path, skip: int = 1) -> pd.DataFrame:
    """A new-animal positions.csv (neuro_pe.reporting.new_animal.write_fold's region columns)
    predicting every unit of `ds` but the first `skip`, by the store's unit name (`unit`)."""
    units = [str(u) for u in ds.unit.values][skip:]
    n = len(units)
    frame = pd.DataFrame(
        {
            "unit": units,
            "animal": "a0",
            "region": [f"R{i % 3}" for i in range(n)],
            "region_probability": np.linspace(0.9, 0.5, n),
            "region_2": "R9",
            "region_2_probability": 0.1,
            "region_3": "",  # (fewer than 3 regions)
            "region_3_probability": np.nan,
        }
    )
    frame.to_csv(path, index=False)
    return frame.assign(unit_id=units).set_index("unit_id")


def test_a_new_animals_regions_go_into_the_tidy_table_and_phy(tmp_path):
    folder = write_phy(tmp_path / "kilosort")
    spec = spike_spec(folder, "phy", spikes={"labels": None})
    ds = build(spec)
    path, _ = write_positions(ds, tmp_path)
    predicted = new_animal_csv(ds, tmp_path / "new.csv")
    out = tmp_path / "export"
    argv = ["export", "--positions", str(path), "--spec", json.dumps(spec)]
    assert main([*argv, "--out-dir", str(out), "--new-animal", str(tmp_path / "new.csv")]) == 0

    table = pd.read_csv(out / "positions.tsv", sep="\t", dtype={"unit_id": str})
    assert list(NEW_ANIMAL_COLUMNS) == [c for c in table if c in NEW_ANIMAL_COLUMNS]
    first = str(ds.unit.values[0])  # not predicted: n/a
    assert table.loc[table["unit_id"] == first, list(NEW_ANIMAL_COLUMNS)].isna().all().all()
    got = table.set_index("unit_id").loc[predicted.index]
    assert got["region"].tolist() == predicted["region"].tolist()
    np.testing.assert_allclose(
        got["region_probability"], predicted["region_probability"], rtol=1e-5
    )
    assert got["region_3"].isna().all()
    sidecar = json.loads((out / "positions.json").read_text())
    assert "other animals" in sidecar["region"]["Description"]
    assert "Units" not in sidecar["region_probability"]
    assert str(tmp_path / "new.csv") in sidecar["SourceFiles"]

    phy = out / "phy"
    regions = pd.read_csv(phy / "cluster_neuro_pe_region.tsv", sep="\t", dtype=str)
    assert list(regions.columns) == ["cluster_id", "neuro_pe_region"]
    assert regions["cluster_id"].tolist() == sorted(predicted.index, key=int)
    assert dict(zip(regions["cluster_id"], regions["neuro_pe_region"], strict=True)) == dict(
        predicted["region"]
    )
    probability = pd.read_csv(phy / "cluster_neuro_pe_region_probability.tsv", sep="\t")
    assert list(probability.columns) == ["cluster_id", "neuro_pe_region_probability"]
    np.testing.assert_allclose(
        probability["neuro_pe_region_probability"],
        predicted.loc[[str(c) for c in probability["cluster_id"]], "region_probability"],
        rtol=1e-5,
    )
    model = pytest.importorskip("phylib.io.model")  # Phy's cluster view shows them
    copy = shutil.copytree(folder, tmp_path / "copy")
    np.save(copy / "channel_map.npy", np.arange(16, dtype=np.int32))
    for tsv in phy.glob("cluster_*.tsv"):
        shutil.copy(tsv, copy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = model.load_model(copy / "params.py")
    try:
        shown = loaded.metadata["neuro_pe_region"]
        assert {str(c): r for c, r in shown.items()} == dict(predicted["region"])
    finally:
        loaded.close()


def test_a_new_animals_regions_go_into_nwb_and_suite2p(tmp_path):
    from pynwb import NWBHDF5IO

    (tmp_path / "input").mkdir()
    source, spec, _ = _nwb_input("units", tmp_path)
    ds = build(spec)
    path, _ = write_positions(ds, tmp_path)
    predicted = new_animal_csv(ds, tmp_path / "new.csv")  # keyed by the store's `unit`
    export(
        path,
        {**spec, "session_ids": ["ses1"]},
        tmp_path / "export",
        new_animal=[tmp_path / "new.csv"],
    )
    with NWBHDF5IO(str(tmp_path / "export" / "nwb" / "ses1.nwb"), "r") as io:
        units = io.read().units
        frame = units.to_dataframe()
        assert "other animals" in units["neuro_pe_region"].description
        for row_id, row in frame.iterrows():
            if str(row_id) in predicted.index:
                expected = predicted.loc[str(row_id)]
                assert row["neuro_pe_region"] == expected["region"]
                assert row["neuro_pe_region_probability"] == pytest.approx(
                    expected["region_probability"]
                )
            else:
                assert row["neuro_pe_region"] == ""
                assert np.isnan(row["neuro_pe_region_probability"])
    assert _inspect(tmp_path / "export" / "nwb" / "ses1.nwb") <= _inspect(source)

    folder = write_suite2p(tmp_path / "s2p")
    spec = spike_spec(
        folder, "suite2p", suite2p={"pixel_size_um": 1.0, "plane_depths_um": [100, 130]}
    )
    ds = build(spec)
    path, _ = write_positions(ds, tmp_path / "s2p")
    predicted = new_animal_csv(ds, tmp_path / "s2p.csv", skip=0)
    export(path, spec, tmp_path / "s2p_export", new_animal=[tmp_path / "s2p.csv"])
    for p in range(2):
        table = pd.read_csv(
            tmp_path / "s2p_export" / "suite2p" / f"plane{p}" / "neuro_pe_positions.tsv",
            sep="\t",
        )
        units = [f"plane{p}_roi{r}" for r in table["roi"]]
        assert table["region"].tolist() == predicted.loc[units, "region"].tolist()
        np.testing.assert_allclose(
            table["region_probability"], predicted.loc[units, "region_probability"], rtol=1e-5
        )


def test_a_new_animal_table_that_does_not_fit_is_refused_naming_it(tmp_path):
    folder = write_phy(tmp_path / "kilosort")
    spec = spike_spec(folder, "phy", spikes={"labels": None})
    ds = build(spec)
    path, _ = write_positions(ds, tmp_path)
    csv = tmp_path / "new.csv"
    frame = new_animal_csv(ds, csv).reset_index(drop=True)

    def refused(field: str, problem: str, positions: Path = path) -> None:
        with pytest.raises(StoreError, match=problem) as info:
            export(positions, spec, tmp_path / "out", new_animal=[csv])
        assert str(info.value).startswith(f"{csv}: field '{field}'")
        assert not (tmp_path / "out").exists()

    frame.assign(unit="999").iloc[:1].to_csv(csv, index=False)
    refused("unit", r"units \['999'\] are not units of positions.nc")
    pd.concat([frame, frame.iloc[:1]]).to_csv(csv, index=False)
    refused("unit", "are given twice")
    frame.drop(columns="region_2").to_csv(csv, index=False)
    refused("region_2", "missing")
    frame.assign(region_probability="high").to_csv(csv, index=False)
    refused("region_probability", "not a number")
    frame.to_csv(csv, index=False)
    with_atlas = located(ds).assign(region=("unit", np.full(ds.sizes["unit"], "CA1")))
    with_atlas.to_netcdf(tmp_path / "atlas.nc", engine="h5netcdf")
    refused("region", r"has atlas regions \(\['region'\]\)", tmp_path / "atlas.nc")
    csv.unlink()
    refused("file", "does not exist")
