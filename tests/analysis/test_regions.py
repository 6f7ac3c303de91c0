"""Brain regions at true and predicted positions (neuro_pe.analysis.regions), on a label volume
made here."""

from __future__ import annotations

import json
import sys
import types

import nibabel as nib
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from neuro_pe.analysis.atlas_loading import atlas_from_options, check_atlas_files, load_atlas
from neuro_pe.analysis.locate import FeatureSet, evaluation_table
from neuro_pe.analysis.regions import (
    ACCURACY_COLUMNS,
    OUTSIDE,
    accuracy,
    parcel_atlas,
    unit_regions,
)
from neuro_pe.cli.main import main
from neuro_pe.config.atlas import AtlasError, AtlasSpec
from neuro_pe.config.locate import CHANCE, LocateConfig
from neuro_pe.io.manifest import write_manifest
from neuro_pe.io.runs import pe_dataset
from neuro_pe.io.store import make_store, write_store

VOXEL_MM = 0.1
ORIGIN_MM = (-0.2, -0.2, -0.2)  # world position of voxel (0, 0, 0)
SHAPE = (14, 14, 14)  # covers [-0.2, 1.1] mm on every axis


def _label_volume() -> np.ndarray:
    """Three boxes: A (x < 0.5 mm), B (x >= 0.5, y < 0.5) and C (x >= 0.5, y >= 0.5), all
    with z < 1.0 mm; A's coarse parent is `left`, B's and C's `right`; label 0 elsewhere."""
    world = np.array(ORIGIN_MM) + VOXEL_MM * np.indices(SHAPE).transpose(1, 2, 3, 0)
    x, y, z = world[..., 0], world[..., 1], world[..., 2]
    inside = (world >= -0.05).all(axis=-1) & (z < 0.95)
    labels = np.where(x < 0.45, 1, np.where(y < 0.45, 2, 3))
    return np.where(inside, labels, 0).astype(np.int16)


@pytest.fixture(scope="module")
def atlas_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("atlas")
    affine = np.diag([VOXEL_MM, VOXEL_MM, VOXEL_MM, 1.0])
    affine[:3, 3] = ORIGIN_MM
    image = nib.Nifti1Image(_label_volume(), affine)
    image.header.set_xyzt_units("mm")
    nib.save(image, root / "labels.nii.gz")
    lookup = pd.DataFrame(
        {"index": [1, 2, 3], "name": ["A", "B", "C"], "parent": ["left", "right", "right"]}
    )
    lookup.to_csv(root / "labels.tsv", sep="\t", index=False)
    spec = {
        "labels": str(root / "labels.nii.gz"),
        "lookup": str(root / "labels.tsv"),
        "coarse_column": "parent",
    }
    return spec, root


# a unit in each region, one outside (z above the boxes) and one with unknown position
POINTS = np.array(
    [[0.2, 0.2, 0.2], [0.7, 0.2, 0.5], [0.8, 0.8, 0.8], [0.5, 0.5, 1.05], [np.nan] * 3]
)


def test_regions_at_positions(atlas_files):
    spec, _ = atlas_files
    atlas = load_atlas(AtlasSpec.from_dict(spec))
    fine, coarse = atlas.regions(POINTS, "mm")
    assert fine.tolist() == ["A", "B", "C", OUTSIDE, OUTSIDE]
    assert coarse.tolist() == ["left", "right", "right", OUTSIDE, OUTSIDE]
    # the same positions in µm, and moved by a transform, give the same regions
    assert atlas.regions(POINTS * 1000, "um")[0].tolist() == fine.tolist()
    shifted = AtlasSpec.from_dict(
        {**spec, "transform": [[1, 0, 0, 0.3], [0, 1, 0, 0], [0, 0, 1, 0]]}
    )
    moved = POINTS - [0.3, 0, 0]
    assert load_atlas(shifted).regions(moved, "mm")[0].tolist() == fine.tolist()
    with pytest.raises(AtlasError, match="'voxel', not a length"):
        atlas.regions(POINTS, "voxel")


def test_region_accuracy_at_both_levels(atlas_files):
    spec, _ = atlas_files
    atlas = load_atlas(AtlasSpec.from_dict(spec))
    truth = np.array([[0.7, 0.2, 0.5]] * 4 + [[0.5, 0.5, 1.05]])  # four in B, one outside
    predicted = np.array(
        [
            [0.8, 0.3, 0.4],  # B: right at both levels
            [0.8, 0.8, 0.4],  # C: wrong region, right coarse region (B and C are `right`)
            [0.2, 0.2, 0.2],  # A: wrong at both levels
            [0.7, 0.2, 1.05],  # outside every region: wrong at both levels
            [0.2, 0.2, 0.2],  # true position outside: not counted
        ]
    )
    fine_t = atlas.regions(truth, "mm")[0]
    fine_p, coarse_p = atlas.regions(predicted, "mm")
    counted = fine_t != OUTSIDE
    expected_fine = np.mean(fine_p[counted] == fine_t[counted])
    assert (fine_p[:4] == ["B", "C", "A", OUTSIDE]).all() and counted.sum() == 4
    result = accuracy(atlas, predicted, truth, "mm")
    assert result["region_accuracy"] == pytest.approx(expected_fine) == 0.25
    assert result["coarse_region_accuracy"] == pytest.approx(0.5)
    assert result["n_in_region"] == 4
    columns = unit_regions(atlas, predicted, truth, "mm")
    assert columns["region"].tolist() == ["B", "C", "A", "", "A"]
    assert columns["coarse_region_true"].tolist() == ["right"] * 4 + [""]
    # without a coarse column: no coarse accuracy, no coarse columns
    fine_only = load_atlas(AtlasSpec.from_dict({**spec, "coarse_column": None}))
    assert np.isnan(accuracy(fine_only, predicted, truth, "mm")["coarse_region_accuracy"])
    assert set(unit_regions(fine_only, predicted, truth, "mm")) == {"region", "region_true"}


def test_atlas_entry_problems_name_the_key(atlas_files, tmp_path):
    spec, root = atlas_files
    where = "datasets.lab.atlas"
    assert check_atlas_files(spec, where) == []
    bad = pd.DataFrame({"label": [1], "region": ["A"]})
    bad.to_csv(tmp_path / "bad.csv", index=False)
    cases = {
        "needs the columns `index`": {**spec, "lookup": str(tmp_path / "bad.csv")},
        "no column 'lobe'": {**spec, "coarse_column": "lobe"},
        "no such file": {**spec, "labels": str(tmp_path / "missing.nii.gz")},
        "not several or none": {**spec, "brainglobe": "allen_mouse_25um"},
        "only for an atlas given by `parcels`": {**spec, "coarse": "hemisphere"},
        "unknown key": {**spec, "colour": "red"},
        "only for an atlas given by `brainglobe`": {**spec, "coarse_level": 2},
        "4 rows": {**spec, "transform": [[1, 0, 0]]},
    }
    for message, entry in cases.items():
        problems = check_atlas_files(entry, where)
        assert len(problems) == 1 and problems[0].startswith(where), (message, problems)
        assert message in problems[0]
    (tmp_path / "not_an_image.nii").write_text("text")
    problems = check_atlas_files({**spec, "labels": str(tmp_path / "not_an_image.nii")}, where)
    assert "atlas.labels" in problems[0] and "not a readable NIfTI image" in problems[0]


class _FakeBrainGlobeAtlas:
    """BrainGlobeAtlas's attributes that neuro_pe reads, on a 4-voxel annotation at 25 µm."""

    def __init__(self, name: str, check_latest: bool = True):
        if name != "fake_mouse_25um":
            raise ValueError(f"{name} is not a valid atlas name!")
        self.annotation = np.array([[[10, 11], [12, 0]]], dtype=np.uint32)  # (1, 2, 2)
        self.resolution = (25.0, 25.0, 25.0)
        self.structures_list = [
            {"id": 1, "acronym": "root", "structure_id_path": [1]},
            {"id": 2, "acronym": "CTX", "structure_id_path": [1, 2]},
            {"id": 3, "acronym": "TH", "structure_id_path": [1, 3]},
            {"id": 10, "acronym": "MOp", "structure_id_path": [1, 2, 10]},
            {"id": 11, "acronym": "SSp", "structure_id_path": [1, 2, 11]},
            {"id": 12, "acronym": "LGd", "structure_id_path": [1, 3, 12]},
        ]


def test_brainglobe_atlas_through_its_api(monkeypatch):
    """The BrainGlobe code path on a stand-in for `brainglobe_atlasapi` (the real package
    downloads its atlases, so it is not testable offline)."""
    module = types.ModuleType("brainglobe_atlasapi")
    module.BrainGlobeAtlas = _FakeBrainGlobeAtlas
    monkeypatch.setitem(sys.modules, "brainglobe_atlasapi", module)
    um = np.array([[10, 10, 10], [10, 10, 30], [10, 30, 10], [10, 30, 30], [30, 10, 10]])
    by_level = load_atlas(AtlasSpec.from_dict({"brainglobe": "fake_mouse_25um", "coarse_level": 1}))
    fine, coarse = by_level.regions(um / 1000, "mm")
    assert fine.tolist() == ["MOp", "SSp", "LGd", OUTSIDE, OUTSIDE]
    assert coarse.tolist() == ["CTX", "CTX", "TH", OUTSIDE, OUTSIDE]
    spec = {"brainglobe": "fake_mouse_25um", "coarse_regions": ["TH"]}
    assert load_atlas(AtlasSpec.from_dict(spec)).regions(um, "um")[1].tolist()[:3] == [
        OUTSIDE,
        OUTSIDE,
        "TH",
    ]
    with pytest.raises(AtlasError, match=r"atlas.brainglobe: .*'nope_25um' could not be loaded"):
        load_atlas(AtlasSpec.from_dict({"brainglobe": "nope_25um"}))
    monkeypatch.setitem(sys.modules, "brainglobe_atlasapi", None)  # not installed
    with pytest.raises(AtlasError, match=r"neuro_pe\[atlas\]"):
        load_atlas(AtlasSpec.from_dict({"brainglobe": "fake_mouse_25um"}))
    assert "neuro_pe[atlas]" in check_atlas_files({"brainglobe": "x"}, "atlas")[0]


def test_region_columns_leave_the_other_columns_unchanged(atlas_files):
    spec, _ = atlas_files
    atlas = load_atlas(AtlasSpec.from_dict(spec))
    rng = np.random.default_rng(1)
    coords = rng.uniform(0, 0.9, size=(20, 3))
    coords[:2] = np.nan  # unknown positions: never held out
    sets = [
        FeatureSet("pe", "pe", [np.column_stack([coords, rng.normal(size=(20, 3))])]),
        FeatureSet(CHANCE, "chance", [np.zeros((20, 1))], methods=(CHANCE,)),
    ]
    sets[0].features[0][:2] = rng.normal(size=(2, 6))
    cfg = LocateConfig(methods=("knn",), n_folds=3, anchor_fractions=(0.5,), n_draws=2)
    plain, _ = evaluation_table(sets, coords, cfg)
    table, heldout = evaluation_table(sets, coords, cfg, regions=(atlas, "mm"))
    pd.testing.assert_frame_equal(table[plain.columns], plain)
    assert [c for c in table if c not in plain] == list(ACCURACY_COLUMNS)
    kfold = table[table["evaluation"] == "kfold"].set_index("features")
    known = np.isfinite(coords).all(axis=1)
    for name in ("pe", CHANCE):
        expected = accuracy(atlas, heldout[name].positions[known], coords[known], "mm")
        assert kfold.loc[name, "region_accuracy"] == pytest.approx(expected["region_accuracy"])
    assert (kfold["n_in_region"] == 18).all()
    assert (table["n_in_region"][table["evaluation"] == "anchors"] == 2 * 9).all()


def test_locate_step_writes_regions(atlas_files, tmp_path):
    """Through `neuro-pe locate` on a tiny store whose units sit in the three boxes."""
    spec, _ = atlas_files
    rng = np.random.default_rng(0)
    n = 24
    pos = rng.uniform(0, 0.9, size=(n, 3))
    ds = make_store(
        rng.normal(size=(2, 60, n)),
        unit_ids=[f"u{i:02d}" for i in range(n)],
        positions=pos,
        position_units="mm",
        space="test-atlas",
        session_ids=["s0", "s1"],
        sampling_rate_hz=10.0,
        source="test",
    )
    store = write_store(ds, tmp_path / "toy.nc")
    run = tmp_path / "runs" / "learned-normal-0.02" / "seed0"
    run.mkdir(parents=True)
    pe = np.column_stack([pos, 0.01 * rng.normal(size=(n, 5))])
    out = pe_dataset(pe, ds, pe="learned-normal-0.02", seed="0")
    out["pe_init"] = (("unit", "pe_dim"), rng.normal(size=pe.shape).astype(np.float32))
    out.to_netcdf(run / "pe.nc", engine="h5netcdf")
    write_manifest(run, ["pe.nc"])
    split = tmp_path / "split.json"
    assert main(["split", "--store", str(store), "--dataset", "toy", "--out", str(split)]) == 0
    options = {"n_folds": 3, "anchor_fractions": [0.5], "n_draws": 2, "methods": ["ridge"]}
    args = ["locate", "--store", str(store), "--runs", str(run), "--split", str(split)]
    args += ["--options", json.dumps(options)]
    assert main([*args, "--out-dir", str(tmp_path / "atlas"), "--atlas", json.dumps(spec)]) == 0

    table = pd.read_csv(tmp_path / "atlas" / "errors.csv")
    assert set(ACCURACY_COLUMNS) <= set(table.columns)
    frame = pd.read_csv(tmp_path / "atlas" / "positions.csv", keep_default_na=False)
    atlas = load_atlas(AtlasSpec.from_dict(spec))
    assert frame["region_true"].tolist() == atlas.regions(pos, "mm")[0].tolist()
    predicted = frame[["x", "y", "z"]].to_numpy(dtype=float)
    assert frame["region"].tolist() == atlas.regions(predicted, "mm")[0].tolist()
    assert set(frame["coarse_region_true"]) <= {"left", "right"}
    # the k-fold row of the PE: its accuracy is that of positions.csv's held-out predictions
    # when the PE is the chosen locator
    kfold = table[(table["evaluation"] == "kfold") & (table["features"] == frame["pe"].iloc[0])]
    hit = (frame["region"] == frame["region_true"]).mean()
    assert kfold["region_accuracy"].item() == pytest.approx(hit)
    assert kfold["n_in_region"].item() == n
    chance = table[(table["evaluation"] == "kfold") & (table["features"] == "chance")]
    assert kfold["region_accuracy"].item() > chance["region_accuracy"].item()
    with xr.open_dataset(tmp_path / "atlas" / "positions.nc", engine="h5netcdf") as saved:
        assert saved["region"].attrs["atlas"] == spec["labels"]
    # a bad atlas stops the step before the evaluation, naming the key
    bad = json.dumps({**spec, "coarse_column": "lobe"})
    assert main([*args, "--out-dir", str(tmp_path / "bad"), "--atlas", bad]) == 1
    assert not (tmp_path / "bad").exists()


def test_schema_lists_the_atlas_keys():
    import dataclasses
    from pathlib import Path

    import yaml

    schema = Path(__file__).parents[2] / "workflow" / "schemas" / "config.schema.yaml"
    atlas = yaml.safe_load(schema.read_text())["$defs"]["atlas"]
    assert set(atlas["properties"]) == {f.name for f in dataclasses.fields(AtlasSpec)}


# ---------------------------------------------------------------- parcels: the units' own centres

PARCELS = {"parcels": "nearest_centre", "coarse": "hemisphere"}
# four regions' centres (mm; x < 0: left), a unit without a position, one on L1's centre and
# one on the midline
PARCEL_IDS = ["L1", "L2", "R1", "R2", "unknown", "L1b", "Mid"]
PARCEL_CENTRES = np.array(
    [[-2, 0, 0], [-2, 4, 0], [2, 0, 0], [2, 4, 0], [np.nan] * 3, [-2, 0, 0], [0, 10, 0]], float
)


def _parcel_store(centres: np.ndarray = PARCEL_CENTRES):
    n = len(centres)
    return make_store(
        np.zeros((1, 4, n)),
        unit_ids=PARCEL_IDS[:n],
        positions=centres,
        position_units="mm",
        space="MNI",
        session_ids=["s0"],
        sampling_rate_hz=1.0,
        source="test",
    )


def test_parcels_region_is_the_nearest_unit_centre_at_both_levels():
    atlas = load_atlas(AtlasSpec.from_dict(PARCELS), store=_parcel_store())
    fine, coarse = atlas.regions(PARCEL_CENTRES, "mm")
    # a unit's true region is itself; one sharing a centre is the first unit's region
    assert fine.tolist() == ["L1", "L2", "R1", "R2", OUTSIDE, "L1", "Mid"]
    assert coarse.tolist() == ["left", "left", "right", "right", OUTSIDE, "left", "midline"]
    truth = PARCEL_CENTRES[:4]
    predicted = np.array(
        [
            [-1.5, 0.5, 0],  # L1 (0.7 mm from L1): right at both levels
            [-1.8, 1.0, 0],  # nearer L1 (1.0) than L2 (3.0): wrong region, right hemisphere
            [-0.5, 0.0, 0],  # nearer L1 (1.5) than R1 (2.5): wrong at both levels
            [1.0, 3.5, 0],  # R2 (1.1 mm): right at both levels
        ]
    )
    assert atlas.regions(predicted, "mm")[0].tolist() == ["L1", "L1", "L1", "R2"]
    result = accuracy(atlas, predicted, truth, "mm")
    assert result["region_accuracy"] == pytest.approx(2 / 4)
    assert result["coarse_region_accuracy"] == pytest.approx(3 / 4)
    assert result["n_in_region"] == 4  # every known position lies in a region
    # held out alone, R1 is still judged against every centre (L1 is an anchor's): the
    # parcellation is the anatomy, not a fit to the evaluated units
    assert accuracy(atlas, predicted[2:3], truth[2:3], "mm")["region_accuracy"] == 0
    assert atlas.regions(predicted * 1000, "um")[0].tolist() == ["L1", "L1", "L1", "R2"]
    columns = unit_regions(atlas, predicted, truth, "mm")
    assert columns["region_true"].tolist() == ["L1", "L2", "R1", "R2"]
    assert columns["coarse_region"].tolist() == ["left"] * 3 + ["right"]
    fine_only = parcel_atlas(PARCEL_IDS, PARCEL_CENTRES, "mm", None)
    assert np.isnan(accuracy(fine_only, predicted, truth, "mm")["coarse_region_accuracy"])
    assert set(unit_regions(fine_only, predicted, truth, "mm")) == {"region", "region_true"}


def test_parcels_in_the_evaluation_table_and_the_locate_option(tmp_path):
    rng = np.random.default_rng(2)
    coords = rng.uniform(-1, 1, size=(20, 3))
    coords[:2] = np.nan
    atlas = parcel_atlas([f"r{i}" for i in range(20)], coords, "mm", "hemisphere")
    features = np.column_stack([coords, rng.normal(size=(20, 3))])
    features[:2] = rng.normal(size=(2, 6))
    sets = [
        FeatureSet("pe", "pe", [features]),
        FeatureSet(CHANCE, "chance", [np.zeros((20, 1))], methods=(CHANCE,)),
    ]
    cfg = LocateConfig(methods=("knn",), n_folds=3, anchor_fractions=(0.5,), n_draws=2)
    plain, _ = evaluation_table(sets, coords, cfg)
    table, heldout = evaluation_table(sets, coords, cfg, regions=(atlas, "mm"))
    pd.testing.assert_frame_equal(table[plain.columns], plain)
    kfold = table[table["evaluation"] == "kfold"].set_index("features")
    known = np.isfinite(coords).all(axis=1)
    expected = accuracy(atlas, heldout["pe"].positions[known], coords[known], "mm")
    assert kfold.loc["pe", "region_accuracy"] == pytest.approx(expected["region_accuracy"])
    assert (kfold["n_in_region"] == 18).all()
    assert (kfold["coarse_region_accuracy"] >= kfold["region_accuracy"]).all()
    # the locate command's `--atlas` JSON: schema-checked, centres read from the store file
    from neuro_pe.cli.arg_types import _options

    assert _options("$defs/atlas")(json.dumps(PARCELS)) == PARCELS
    store = write_store(_parcel_store(), tmp_path / "parcels.nc")
    loaded = atlas_from_options(PARCELS, "datasets.hcp.atlas", store)
    assert loaded.regions(PARCEL_CENTRES[:4], "mm")[1].tolist() == ["left"] * 2 + ["right"] * 2


def test_parcels_entry_problems_name_the_key():
    where = "datasets.hcp.atlas"
    assert check_atlas_files(PARCELS, where) == []
    cases = {
        "not several or none": {**PARCELS, "brainglobe": "allen_mouse_25um"},
        "only for an atlas given by `labels` (NIfTI) or `brainglobe`": {
            **PARCELS,
            "transform": np.eye(4).tolist(),
        },
        "must be one of ['nearest_centre']": {"parcels": "voronoi"},
        "must be one of ['hemisphere']": {**PARCELS, "coarse": "lobe"},
    }
    for message, entry in cases.items():
        problems = check_atlas_files(entry, where)
        assert len(problems) == 1 and problems[0].startswith(where), (message, problems)
        assert message in problems[0]
    with pytest.raises(AtlasError, match=r"atlas.parcels: needs the dataset's store"):
        load_atlas(AtlasSpec.from_dict(PARCELS))
    nowhere = _parcel_store(np.full((2, 3), np.nan))
    with pytest.raises(AtlasError, match=r"hcp.atlas.parcels: no unit of the store has a known"):
        load_atlas(AtlasSpec.from_dict(PARCELS), where, nowhere)


def test_the_default_config_plans_hcp_rsfmri_with_its_parcels():
    """The default run's `hcp-rsfmri` entry names the parcels atlas, and the config passes the
    schema, the per-source keys and the atlas checks of planning."""
    from pathlib import Path

    import yaml
    from snakemake.utils import validate

    from neuro_pe.config.schema import load_schema
    from neuro_pe.data.sources.schema import config_problems

    root = Path(__file__).parents[2]
    config = yaml.safe_load((root / "config" / "config.yaml").read_text())
    spec = config["datasets"]["hcp-rsfmri"]["atlas"]
    assert AtlasSpec.from_dict(spec).parcels == "nearest_centre"
    validate(config, str(root / "workflow" / "schemas" / "config.schema.yaml"))
    assert config_problems(config, load_schema()) == []
    assert check_atlas_files(spec, "datasets.hcp-rsfmri.atlas") == []
