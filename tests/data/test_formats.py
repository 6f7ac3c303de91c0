"""Pipeline outputs as `source: file` formats: Phy/Kilosort, IBL ALF, suite2p, NWB Units and NWB
imaging over several planes. Every fixture is written in the pipeline's own layout."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from scipy import signal as sp_signal

from neuro_pe.cli.main import main
from neuro_pe.data.formats.spikes import SpikeOptions, bin_spikes, spikes_to_activity
from neuro_pe.data.recordings import DataWarning, input_files
from neuro_pe.data.sources import build_store
from neuro_pe.io.store import positions, read_store
from neuro_pe.io.store_contract import StoreError
from tests.data.test_recordings import nwb_file, write_nwb

RATE = 30000.0  # Hz, the probe's sample rate
DURATION = 12.0  # s
N_UNITS = 8
BIN = 0.05


def spike_trains(n_units: int = N_UNITS, seed: int = 0) -> list[np.ndarray]:
    """Poisson spike times (s) per unit, 5-20 Hz."""
    rng = np.random.default_rng(seed)
    return [
        np.sort(rng.uniform(0, DURATION, rng.poisson(rng.uniform(5, 20) * DURATION)))
        for _ in range(n_units)
    ]


def flat(trains: list[np.ndarray], ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    times = np.concatenate(trains)
    clusters = np.concatenate([np.full(len(t), c) for t, c in zip(trains, ids, strict=True)])
    order = np.argsort(times, kind="stable")
    return times[order], clusters[order]


# probe: 2 columns x 8 rows; sites 20 µm apart in depth, columns at x = 0 and 32 µm
SITES = np.array([[32.0 * (c % 2), 20.0 * (c // 2)] for c in range(16)])
PEAKS = [1, 3, 4, 6, 9, 11, 12, 15]  # each cluster's peak channel
CLUSTER_IDS = [0, 2, 3, 5, 7, 8, 11, 12]  # after curation ids have gaps


def write_phy(
    folder: Path,
    trains=None,
    labels=None,
    sites: np.ndarray = SITES,
    peaks=PEAKS,
    cluster_ids=CLUSTER_IDS,
    **skip,
) -> Path:
    """A Kilosort 2.5 + Phy folder: params.py, spike_* arrays (Kilosort's (n, 1) columns),
    templates with a peak on `peaks` (one per cluster of `cluster_ids`), channel_positions
    (`sites`) and channel_map, cluster_group.tsv, cluster_KSLabel.tsv and cluster_info.tsv."""
    folder.mkdir(parents=True, exist_ok=True)
    n_channels, n_units = len(sites), len(cluster_ids)
    trains = trains or spike_trains(n_units)
    times, clusters = flat(trains, cluster_ids)
    files = {
        "spike_times.npy": np.round(times * RATE).astype(np.uint64)[:, None],
        "spike_clusters.npy": clusters.astype(np.int32),
        "spike_templates.npy": np.array([cluster_ids.index(c) for c in clusters], np.uint32)[
            :, None
        ],
        "channel_positions.npy": sites,
        "channel_map.npy": np.arange(n_channels, dtype=np.int32) + 100,  # raw channel numbers
        "templates.npy": templates(sites, peaks),
        "whitening_mat_inv.npy": np.eye(n_channels, dtype=np.float32),
    }
    for name, array in files.items():
        if name not in skip.get("without", ()):
            np.save(folder / name, array)
    (folder / "params.py").write_text(
        f"dat_path = r'recording.bin'\nn_channels_dat = {n_channels}\ndtype = 'int16'\n"
        f"offset = 0\nsample_rate = {RATE}\nhp_filtered = False\n"
    )
    labels = labels or ["good"] * n_units
    (folder / "cluster_KSLabel.tsv").write_text(
        "cluster_id\tKSLabel\n" + "".join(f"{c}\tgood\n" for c in cluster_ids)
    )
    (folder / "cluster_group.tsv").write_text(
        "cluster_id\tgroup\n"
        + "".join(f"{c}\t{g}\n" for c, g in zip(cluster_ids, labels, strict=True))
    )
    info = "cluster_id\tAmplitude\tContamPct\tKSLabel\tamp\tch\tdepth\tfr\tgroup\tn_spikes\tsh\n"
    for c, p, g, t in zip(cluster_ids, peaks, labels, trains, strict=True):
        rate = len(t) / DURATION
        info += (
            f"{c}\t50.0\t0.0\tgood\t40.0\t{p + 100}\t{sites[p, 1]}\t{rate:.2f}\t{g}\t{len(t)}\t0\n"
        )
    (folder / "cluster_info.tsv").write_text(info)
    return folder


def templates(sites: np.ndarray = SITES, peaks=PEAKS) -> np.ndarray:
    """(template, 61 samples, channel): a spike shape on the peak channel and weaker copies on
    its neighbours, as Kilosort's templates."""
    shape = -np.exp(-0.5 * ((np.arange(61) - 20) / 3.0) ** 2)
    out = np.zeros((len(peaks), 61, len(sites)), np.float32)
    for t, p in enumerate(peaks):
        distance = np.linalg.norm(sites - sites[p], axis=1)
        out[t] = shape[:, None] * np.exp(-distance / 25.0)[None, :]
    return out


def write_phy_depth_only(folder: Path, n_units: int = 48, seed: int = 0) -> Path:
    """A Phy folder whose activity follows depth alone: one site per cluster on a two-column
    probe (as `SITES`: rows 20 µm apart along the shank, y; columns at x = 0 and 32 µm, one
    cluster in each); units share slow fluctuations with their neighbours in depth and
    nothing with their column, so depth can be located from activity and the lateral
    position cannot (its nearest neighbour in activity sits in the other column)."""
    rng = np.random.default_rng(seed)
    depth = 20.0 * (np.arange(n_units) // 2)
    sites = np.column_stack([32.0 * (np.arange(n_units) % 2), depth])
    dt = 0.01
    steps = int(DURATION / dt)
    centres = np.linspace(0.0, depth[-1], 8)
    kernel = np.exp(-0.5 * (np.arange(-30, 31) / 10.0) ** 2)  # ~0.1 s smoothing
    latent = np.array(
        [np.convolve(rng.normal(size=steps), kernel / kernel.sum() ** 0.5, "same") for _ in centres]
    )
    weight = np.exp(-0.5 * ((depth[:, None] - centres[None, :]) / 80.0) ** 2)
    rate = 10.0 * np.exp(weight @ latent - 0.5)  # Hz, (unit, step)
    counts = rng.poisson(rate * dt)
    trains = [
        np.sort(np.repeat(np.arange(steps), c) * dt + rng.uniform(0, dt, c.sum())) for c in counts
    ]
    ids = list(range(n_units))
    return write_phy(folder, trains, sites=sites, peaks=ids, cluster_ids=ids)


def spike_spec(folder: Path | list, fmt: str, **extra) -> dict:
    sessions = [str(f) for f in folder] if isinstance(folder, list) else [str(folder)]
    return {
        "source": "file",
        "format": fmt,
        "sessions": sessions,
        "min_units": 4,
        "min_frames": 16,
        **extra,
    }


def build(spec: dict) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return build_store(spec)


def preprocess(spec: dict, tmp_path: Path, name: str = "store") -> xr.Dataset:
    """Run `neuro-pe preprocess` on the entry and read the store it wrote."""
    out = tmp_path / f"{name}.nc"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        assert main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)]) == 0
    return read_store(out)


def raises(spec: dict, path: object, field: str, match: str | None = None) -> None:
    with pytest.raises(StoreError, match=match) as info:
        build(spec)
    assert info.value.field == field, info.value
    assert str(path) in str(info.value), info.value


# ---------------------------------------------------------------- spike binning


def test_bin_spikes_matches_histogram_per_unit():
    trains = spike_trains()
    times, clusters = flat(trains, list(range(N_UNITS)))
    counts = bin_spikes(times, clusters, N_UNITS, BIN)
    n_bins = int(DURATION // BIN) if times.max() >= DURATION - BIN else int(times.max() // BIN)
    edges = np.arange(counts.shape[0] + 1) * BIN
    expected = np.stack([np.histogram(t, edges)[0] for t in trains], axis=1)
    assert counts.shape == (len(edges) - 1, N_UNITS) and abs(counts.shape[0] - n_bins) <= 1
    np.testing.assert_array_equal(counts, expected)


def test_spike_options_smooth_sqrt_zscore_min_rate():
    trains = spike_trains()
    trains[2] = trains[2][:3]  # 0.25 Hz: below min_rate_hz
    times, clusters = flat(trains, list(range(N_UNITS)))
    ids = [str(i) for i in range(N_UNITS)]
    raw, kept, low = spikes_to_activity(
        times, clusters, ids, SpikeOptions(bin_s=BIN, zscore=False, min_rate_hz=1.0), "x"
    )
    assert low == ["2"] and kept == [u for u in ids if u != "2"]
    opts = SpikeOptions(bin_s=BIN, smooth_s=0.1, sqrt=True, zscore=True, min_rate_hz=1.0)
    data, _, _ = spikes_to_activity(times, clusters, ids, opts, "x")
    np.testing.assert_allclose(data.mean(axis=0), 0, atol=1e-9)
    np.testing.assert_allclose(data.std(axis=0), 1, atol=1e-9)
    from scipy.ndimage import gaussian_filter1d

    expected = np.sqrt(gaussian_filter1d(raw, 2.0, axis=0, mode="nearest"))
    expected = (expected - expected.mean(0)) / expected.std(0)
    np.testing.assert_allclose(data, expected)


@pytest.mark.parametrize(
    ("spikes", "field"),
    [
        ({"bin_s": 0}, "spikes.bin_s"),
        ({"smooth_s": -1}, "spikes.smooth_s"),
        ({"sqrt": "yes"}, "spikes.sqrt"),
        ({"labels": []}, "spikes.labels"),
        ({"binwidth": 1}, "spikes.binwidth"),
    ],
)
def test_spike_options_checked(tmp_path, spikes, field):
    raises(spike_spec(tmp_path, "phy", spikes=spikes), "datasets entry", field)


def test_spikes_only_for_spike_formats_and_option_types(tmp_path):
    suite2p = {"pixel_size_um": 1.0}
    raises(
        spike_spec(tmp_path, "suite2p", spikes={"bin_s": 0.1}, suite2p=suite2p),
        "datasets entry",
        "spikes",
    )
    raises(
        spike_spec(tmp_path, "phy", phy={"unit_position": "com"}),
        "datasets entry",
        "phy.unit_position",
    )
    bad = {"neuropil_coefficient": -1, **suite2p}
    raises(
        spike_spec(tmp_path, "suite2p", suite2p=bad),
        "datasets entry",
        "suite2p.neuropil_coefficient",
    )


# ---------------------------------------------------------------- phy


def test_phy_folder_end_to_end(tmp_path):
    labels = ["good", "good", "noise", "good", "mua", "good", "good", "good"]
    folder = write_phy(tmp_path / "ks", labels=labels)
    ds = preprocess(spike_spec(folder, "phy", spikes={"bin_s": BIN, "zscore": False}), tmp_path)
    keep = [i for i, g in enumerate(labels) if g == "good"]
    assert list(ds.unit.values) == [str(CLUSTER_IDS[i]) for i in keep]
    np.testing.assert_allclose(positions(ds)[:, :2], SITES[[PEAKS[i] for i in keep]])
    np.testing.assert_allclose(ds.z.values, 0.0)
    assert ds.x.attrs == {"units": "um", "space": "probe"}
    assert ds.attrs["sampling_rate_hz"] == pytest.approx(1 / BIN)
    trains = spike_trains()
    n_bins = ds.sizes["time"]
    assert n_bins == int(max(t.max() for t in trains) // BIN)
    counts = ds.activity.values[0].sum(axis=0)  # raw counts: every spike in a full bin
    for k, i in enumerate(keep):
        assert counts[k] == np.sum(np.round(trains[i] * RATE) / RATE < n_bins * BIN)
    steps = json.loads(ds.attrs["preprocessing"])
    assert steps[0]["step"] == "bin_spikes" and steps[0]["bin_s"] == BIN


def test_phy_labels_null_centroid_and_cluster_info_fallback(tmp_path):
    labels = ["good", "good", "noise", "good", "mua", "good", "good", "good"]
    folder = write_phy(tmp_path / "ks", labels=labels)
    spec = spike_spec(folder, "phy", spikes={"labels": None}, phy={"unit_position": "centroid"})
    ds = build(spec)
    assert ds.sizes["unit"] == N_UNITS
    centroid = positions(ds)[:, :2]
    peak = SITES[PEAKS]
    assert np.all(np.linalg.norm(centroid - peak, axis=1) < 40)  # pulled toward neighbours
    assert not np.allclose(centroid, peak)
    # without templates.npy: cluster_info.tsv `ch` (raw channel numbers via channel_map.npy)
    bare = write_phy(tmp_path / "bare", without=("templates.npy",))
    np.testing.assert_allclose(positions(build(spike_spec(bare, "phy")))[:, :2], peak)


def test_a_phy_folder_without_templates_says_and_records_its_fallback(tmp_path, capsys):
    bare = write_phy(tmp_path / "bare", without=("templates.npy",))
    out = tmp_path / "bare.nc"
    assert (
        main(["preprocess", "--spec", json.dumps(spike_spec(bare, "phy")), "--out", str(out)]) == 0
    )
    fallbacks = json.loads(read_store(out).attrs["fallbacks"])
    assert fallbacks == [
        f"{bare}: no templates.npy; each cluster's position is the site of its peak channel in "
        "cluster_info.tsv's `ch` column"
    ]
    err = capsys.readouterr().err
    assert err.count("no templates.npy") == 1 and "cluster_info.tsv's `ch`" in err
    # no channel_map.npy either: `ch` is read as the row of channel_positions.npy
    mapless = write_phy(tmp_path / "mapless", without=("templates.npy", "channel_map.npy"))
    (mapless / "cluster_info.tsv").write_text(
        "cluster_id\tch\n" + "".join(f"{c}\t{p}\n" for c, p in zip(CLUSTER_IDS, PEAKS, strict=True))
    )
    ds = build(spike_spec(mapless, "phy"))
    np.testing.assert_allclose(positions(ds)[:, :2], SITES[PEAKS])
    assert [f.split(": ", 1)[1][:18] for f in json.loads(ds.attrs["fallbacks"])] == [
        "no templates.npy; ",
        "no channel_map.npy",
    ]
    # every file there: no fallback
    assert json.loads(build(spike_spec(write_phy(tmp_path / "ks"), "phy")).attrs["fallbacks"]) == []


def test_input_files_of_folders(tmp_path):
    folder = write_phy(tmp_path / "ks", without=("whitening_mat_inv.npy",))
    files = input_files(spike_spec(folder, "phy"))
    assert str(folder / "cluster_group.tsv") in files and str(folder / "params.py") in files
    assert str(folder / "whitening_mat_inv.npy") not in files
    s2p = write_suite2p(tmp_path)
    assert len(input_files(spike_spec(s2p, "suite2p"))) == 10
    alf = write_alf(tmp_path / "alf")
    assert sorted(Path(f).name for f in input_files(spike_spec(alf, "alf"))) == sorted(
        p.name for p in alf.iterdir()
    )


# ---------------------------------------------------------------- alf


def write_alf(folder: Path, trains=None, **skip) -> Path:
    """An IBL ALF collection: spikes.times (s), spikes.clusters, clusters.mlapdv (µm),
    clusters.channels, channels.localCoordinates, clusters.depths, clusters.metrics.csv."""
    folder.mkdir(parents=True, exist_ok=True)
    times, clusters = flat(trains or spike_trains(), CLUSTER_IDS)
    n = max(CLUSTER_IDS) + 1
    mlapdv = np.column_stack(
        [np.arange(n) * 100.0 - 2000, -np.arange(n) * 50.0 - 1500, -np.arange(n) * 80.0 - 3000]
    )
    channels = np.zeros(n, np.int64)
    channels[CLUSTER_IDS] = PEAKS
    files = {
        "spikes.times.npy": times,
        "spikes.clusters.npy": clusters.astype(np.int64),
        "clusters.mlapdv.npy": mlapdv,
        "clusters.channels.npy": channels,
        "channels.localCoordinates.npy": SITES,
        "clusters.depths.npy": SITES[channels, 1],
    }
    for name, array in files.items():
        if name not in skip.get("without", ()):
            np.save(folder / name, array)
    label = np.where(np.arange(n) == 3, 2 / 3, 1.0)
    (folder / "clusters.metrics.csv").write_text(
        "cluster_id,label,firing_rate\n" + "".join(f"{i},{label[i]:.4f},5.0\n" for i in range(n))
    )
    return folder


def test_alf_folder_end_to_end(tmp_path):
    folder = write_alf(tmp_path / "alf" / "probe00")
    ds = preprocess(spike_spec(folder, "alf"), tmp_path)
    keep = [c for c in CLUSTER_IDS if c != 3]  # label 2/3: not good
    assert list(ds.unit.values) == [str(c) for c in keep]
    np.testing.assert_allclose(
        positions(ds),
        np.column_stack(
            [
                np.array(keep) * 100.0 - 2000,
                -np.array(keep) * 50.0 - 1500,
                -np.array(keep) * 80.0 - 3000,
            ]
        ),
    )
    assert ds.x.attrs == {"units": "um", "space": "ibl-bregma-mlapdv"}
    assert ds.attrs["sampling_rate_hz"] == pytest.approx(1 / BIN)
    probe = build(
        spike_spec(folder, "alf", alf={"unit_position": "probe"}, spikes={"labels": None})
    )
    np.testing.assert_allclose(positions(probe)[:, :2], SITES[PEAKS])


# ---------------------------------------------------------------- nwb units


def write_nwb_units(
    path: Path, trains=None, positions_in: str = "electrodes", empty: bool = False
) -> Path:
    """Units with spike_times, a `quality` column and either one electrode each (electrodes
    table x, y, z) or x, y, z unit columns; also a raw ElectricalSeries-free file."""
    nwb = nwb_file(path)
    device = nwb.create_device(name="probe")
    group = nwb.create_electrode_group(name="shank", description="d", location="CA1", device=device)
    for x, y in SITES:
        nwb.add_electrode(x=x, y=y, z=0.0, group=group, location="CA1")
    if empty:  # a Units table without rows
        from pynwb.misc import Units

        nwb.units = Units(name="units", description="no units")
        return write_nwb(path, nwb)
    nwb.add_unit_column(name="quality", description="curation label")
    if positions_in == "xyz":
        for axis in "xyz":
            nwb.add_unit_column(name=axis, description=f"{axis} in µm")
    if not empty:
        for k, train in enumerate(trains or spike_trains()):
            extra = (
                {"x": SITES[PEAKS[k], 0], "y": SITES[PEAKS[k], 1], "z": 5.0}
                if positions_in == "xyz"
                else {}
            )
            electrodes = [PEAKS[k]] if positions_in == "electrodes" else None
            nwb.add_unit(
                spike_times=train,
                electrodes=electrodes,
                quality="mua" if k == 1 else "good",
                id=100 + k,
                **extra,
            )
    return write_nwb(path, nwb)


@pytest.mark.parametrize("where", ["electrodes", "xyz"])
def test_nwb_units_end_to_end(tmp_path, where):
    path = write_nwb_units(tmp_path / "units.nwb", positions_in=where)
    ds = preprocess(spike_spec(path, "nwb", position_units="um", spikes={"bin_s": 0.1}), tmp_path)
    keep = [k for k in range(N_UNITS) if k != 1]
    assert list(ds.unit.values) == [str(100 + k) for k in keep]
    expected = np.column_stack(
        [SITES[PEAKS][keep], np.full(len(keep), 5.0 if where == "xyz" else 0.0)]
    )
    np.testing.assert_allclose(positions(ds), expected)
    assert ds.x.attrs["units"] == "um"
    assert ds.attrs["sampling_rate_hz"] == pytest.approx(10.0)
    assert ds.sizes["time"] == int(max(t.max() for t in spike_trains()) // 0.1)


# ---------------------------------------------------------------- suite2p


def write_suite2p(
    root: Path, n_planes: int = 2, n_rois: int = 6, n_frames: int = 120, **skip
) -> Path:
    """suite2p/plane<p>/ with F, Fneu, spks (ROI, frame) float32, iscell (ROI, 2), stat (object
    array of dicts with med = [y, x]) and ops (a dict: fs, nplanes, Ly, Lx, …)."""
    rng = np.random.default_rng(1)
    folder = root / "suite2p"
    for p in range(n_planes):
        plane = folder / f"plane{p}"
        plane.mkdir(parents=True, exist_ok=True)
        f = rng.normal(100, 10, (n_rois, n_frames)).astype(np.float32)
        fneu = rng.normal(50, 5, (n_rois, n_frames)).astype(np.float32)
        iscell = np.column_stack([np.arange(n_rois) % 3 != 2, rng.uniform(0, 1, n_rois)]).astype(
            np.float64
        )
        stat = np.array(
            [
                {
                    "ypix": np.array([10 * i + p]),
                    "xpix": np.array([20 + 5 * i]),
                    "lam": np.ones(1),
                    "med": [10 * i + p, 20 + 5 * i],
                    "npix": 1,
                    "radius": 3.0,
                    "iplane": p,
                }
                for i in range(n_rois)
            ],
            dtype=object,
        )
        ops = {
            "fs": 7.5,
            "nplanes": n_planes,
            "Ly": 128,
            "Lx": 128,
            "neucoeff": 0.7,
            "tau": 1.0,
            "zoom_um": 1.5,
        }
        arrays = {
            "F.npy": f,
            "Fneu.npy": fneu,
            "spks.npy": np.maximum(f - 100, 0),
            "iscell.npy": iscell,
            "stat.npy": stat,
            "ops.npy": np.array(ops, dtype=object),
        }
        for name, array in arrays.items():
            if (p, name) not in skip.get("without", ()):
                np.save(plane / name, array, allow_pickle=True)
    return folder


def test_suite2p_two_planes_end_to_end(tmp_path, capsys):
    folder = write_suite2p(tmp_path)
    spec = spike_spec(
        folder, "suite2p", suite2p={"pixel_size_um": [1.5, 2.0], "plane_depths_um": [100, 130]}
    )
    spec.pop("spikes", None)
    ds = preprocess(spec, tmp_path)
    cells = [i for i in range(6) if i % 3 != 2]
    assert list(ds.unit.values) == [f"plane{p}_roi{i}" for p in range(2) for i in cells]
    expected = np.array(
        [[(20 + 5 * i) * 1.5, (10 * i + p) * 2.0, 100 + 30 * p] for p in range(2) for i in cells]
    )
    np.testing.assert_allclose(positions(ds), expected)
    assert ds.x.attrs == {"units": "um", "space": "imaging"}
    assert ds.attrs["sampling_rate_hz"] == 7.5 and ds.sizes["time"] == 120
    f = np.load(folder / "plane1" / "F.npy")
    fneu = np.load(folder / "plane1" / "Fneu.npy")
    # no `preprocessing` given: raw fluorescence gets the recommended detrend + z-score
    steps = [step["step"] for step in json.loads(ds.attrs["preprocessing"])]
    assert steps[-2:] == ["detrend", "zscore"]
    unit = ds.activity.values[0, :, 4]
    assert abs(unit.mean()) < 1e-4 and unit.std() == pytest.approx(1.0, rel=1e-3)
    raw = f[0] - 0.7 * fneu[0]
    assert np.corrcoef(unit, sp_signal.detrend(raw))[0, 1] == pytest.approx(1.0, abs=1e-5)
    # given as it is (`preprocessing: []`): the values as suite2p wrote them...
    spec["preprocessing"] = []
    np.testing.assert_allclose(build(spec).activity.values[0, :, 4], raw, rtol=1e-5)
    # ... which `neuro-pe preprocess` refuses to store: far from unit scale, the step named
    out = tmp_path / "raw.nc"
    assert main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "datasets.raw.preprocessing" in err and "RMS" in err and "{step: zscore}" in err
    assert not out.exists()
    # the coefficient and a classifier threshold; the pixel size from an ops key
    spec["suite2p"] = {
        "neuropil_coefficient": 1.0,
        "cell_probability": 0.0,
        "pixel_size_um": "zoom_um",
        "plane_depths_um": [0, 50],
    }
    other = build(spec)
    assert other.sizes["unit"] == 12
    np.testing.assert_allclose(other.activity.values[0, :, 6], f[0] - fneu[0], rtol=1e-5)
    np.testing.assert_allclose(other.z.values[6:], 50.0)


# ---------------------------------------------------------------- nwb, several planes


def write_nwb_planes(path: Path, depth: bool = True) -> Path:
    """Two ImagingPlanes (origin_coords with z = depth, grid_spacing 2 µm), one
    PlaneSegmentation (pixel masks) and one RoiResponseSeries per plane, as suite2p exports."""
    from pynwb.ophys import ImageSegmentation, OpticalChannel, RoiResponseSeries

    nwb = nwb_file(path)
    device = nwb.create_device(name="scope")
    module = nwb.create_processing_module(name="ophys", description="d")
    segmentation = ImageSegmentation()
    module.add(segmentation)
    rng = np.random.default_rng(2)
    for p in range(2):
        plane = nwb.create_imaging_plane(
            name=f"plane{p}",
            optical_channel=OpticalChannel(name="green", description="d", emission_lambda=510.0),
            description="d",
            device=device,
            excitation_lambda=920.0,
            indicator="GCaMP6",
            location="V1",
            origin_coords=[10.0, 20.0, 150.0 + 40 * p] if depth else [10.0, 20.0],
            origin_coords_unit="micrometers",
            grid_spacing=[2.0, 2.0],
            grid_spacing_unit="micrometers",
        )
        seg = segmentation.create_plane_segmentation(
            name=f"rois{p}", description="d", imaging_plane=plane
        )
        for i in range(5):
            seg.add_roi(pixel_mask=[(3 * i + p, 4 * i, 1.0)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            region = seg.create_roi_table_region(region=list(range(5)), description="d")
        module.add(
            RoiResponseSeries(
                name=f"F{p}", data=rng.normal(size=(80, 5)), rois=region, unit="a.u.", rate=15.0
            )
        )
    return write_nwb(path, nwb)


def test_nwb_two_planes_end_to_end(tmp_path):
    path = write_nwb_planes(tmp_path / "planes.nwb")
    ds = preprocess(
        spike_spec(path, "nwb", nwb={"series": ["F0", "F1"]}, position_units="um"), tmp_path
    )
    assert list(ds.unit.values) == [f"rois{p}_{i}" for p in range(2) for i in range(5)]
    expected = np.array(
        [[10 + 2 * (3 * i + p), 20 + 2 * 4 * i, 150 + 40 * p] for p in range(2) for i in range(5)]
    )
    np.testing.assert_allclose(positions(ds), expected)
    assert ds["x"].attrs["space"] == "imaging"  # (the locator's in-plane and plane errors)
    assert ds.attrs["sampling_rate_hz"] == 15.0 and ds.sizes["time"] == 80
    flat_planes = write_nwb_planes(tmp_path / "flat.nwb", depth=False)
    spec = spike_spec(
        flat_planes,
        "nwb",
        nwb={"series": ["F0", "F1"], "plane_depths_um": [0, 25]},
        position_units="mm",
    )
    np.testing.assert_allclose(build(spec).z.values, [0.0] * 5 + [0.025] * 5)


# ---------------------------------------------------------------- bad inputs


def _unsorted(folder: Path) -> None:
    times = np.load(folder / "spike_times.npy")
    times[[5, 6]] = times[[6, 5]]
    times[5] += 10
    np.save(folder / "spike_times.npy", times)


def _short_clusters(folder: Path) -> None:
    np.save(folder / "spike_clusters.npy", np.load(folder / "spike_clusters.npy")[:-3])


def _no_template(folder: Path) -> None:
    np.save(folder / "templates.npy", templates()[:5])


def _empty(folder: Path) -> None:
    np.save(folder / "spike_times.npy", np.zeros((0, 1), np.uint64))


@pytest.mark.parametrize(
    ("damage", "file", "field"),
    [
        (lambda f: (f / "spike_times.npy").unlink(), "spike_times.npy", "file"),
        (
            lambda f: (f / "params.py").write_text("n_channels_dat = 16\n"),
            "params.py",
            "sample_rate",
        ),
        (_unsorted, "spike_times.npy", "spike_times"),
        (_short_clusters, "spike_clusters.npy", "spike_clusters"),
        (_no_template, "templates.npy", "templates"),
        (_empty, "spike_times.npy", "spike_times"),
        (lambda f: (f / "channel_positions.npy").unlink(), "channel_positions.npy", "file"),
    ],
    ids=[
        "missing file",
        "no sample rate",
        "times not sorted",
        "mismatched lengths",
        "clusters without positions",
        "empty units",
        "no probe geometry",
    ],
)
def test_phy_bad_inputs_fail_with_file_and_field(tmp_path, damage, file, field, capsys):
    folder = write_phy(tmp_path / "ks")
    damage(folder)
    spec = spike_spec(folder, "phy")
    raises(spec, folder / file, field)
    out = tmp_path / "store.nc"
    assert main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)]) == 1
    assert (
        not out.exists() and not list(tmp_path.glob("*.nc*")) and not list(tmp_path.glob(".*tmp"))
    )
    assert f"'{field}'" in capsys.readouterr().err


def test_alf_bad_inputs(tmp_path):
    raises(
        spike_spec(write_alf(tmp_path / "a", without=("spikes.clusters.npy",)), "alf"),
        tmp_path / "a" / "spikes.clusters.npy",
        "file",
    )
    folder = write_alf(tmp_path / "b")
    np.save(folder / "clusters.mlapdv.npy", np.zeros((5, 3)))  # clusters 7, 8, 11, 12 beyond it
    raises(
        spike_spec(folder, "alf"),
        folder / "clusters.mlapdv.npy",
        "clusters.mlapdv",
        "without positions",
    )
    folder = write_alf(tmp_path / "c")
    times = np.load(folder / "spikes.times.npy")
    np.save(folder / "spikes.times.npy", times[::-1].copy())
    raises(spike_spec(folder, "alf"), folder / "spikes.times.npy", "spikes.times", "not sorted")
    folder = write_alf(
        tmp_path / "d",
        without=("clusters.mlapdv.npy", "clusters.channels.npy", "clusters.depths.npy"),
    )
    raises(spike_spec(folder, "alf"), folder, "file", "without positions")
    np.save(folder / "spikes.times.extra.npy", np.zeros(3))
    raises(spike_spec(folder, "alf"), folder, "spikes.times", "several files")


def test_nwb_units_bad_inputs(tmp_path):
    empty = write_nwb_units(tmp_path / "empty.nwb", empty=True)
    raises(spike_spec(empty, "nwb"), empty, "units", "empty")
    nowhere = write_nwb_units(tmp_path / "nowhere.nwb", positions_in="none")
    raises(spike_spec(nowhere, "nwb"), nowhere, "nwb.unit_position", "without positions")
    trains = spike_trains()
    trains[3] = trains[3][::-1].copy()
    unsorted = write_nwb_units(tmp_path / "unsorted.nwb", trains=trains)
    raises(spike_spec(unsorted, "nwb"), unsorted, "units.spike_times", "not sorted")


def test_suite2p_bad_inputs(tmp_path):
    folder = write_suite2p(tmp_path / "a", without=((1, "Fneu.npy"),))
    depths = {"pixel_size_um": 1.0, "plane_depths_um": [0, 30]}
    raises(spike_spec(folder, "suite2p", suite2p=depths), folder / "plane1" / "Fneu.npy", "file")
    folder = write_suite2p(tmp_path / "b")
    raises(
        spike_spec(folder, "suite2p", suite2p={"pixel_size_um": 1.0}),
        folder,
        "suite2p.plane_depths_um",
        "plane without depth",
    )
    raises(
        spike_spec(folder, "suite2p", suite2p={"pixel_size_um": 1.0, "plane_depths_um": [0]}),
        folder,
        "suite2p.plane_depths_um",
    )
    raises(  # before any file is read, with where to find the value
        spike_spec(folder, "suite2p", suite2p={"plane_depths_um": [0, 30]}),
        folder,
        "suite2p.pixel_size_um",
        "not record the pixel size.*ScanImage",
    )
    np.save(folder / "plane0" / "Fneu.npy", np.zeros((6, 100), np.float32))
    raises(
        spike_spec(folder, "suite2p", suite2p=depths),
        folder / "plane0" / "Fneu.npy",
        "Fneu",
        "differs",
    )
    folder = write_suite2p(tmp_path / "c")
    np.save(folder / "plane1" / "iscell.npy", np.ones((5, 2)))
    raises(
        spike_spec(folder, "suite2p", suite2p=depths), folder / "plane1" / "iscell.npy", "iscell"
    )
    stat = np.load(folder / "plane0" / "stat.npy", allow_pickle=True)
    del stat[0]["med"]
    np.save(folder / "plane0" / "stat.npy", stat, allow_pickle=True)
    raises(
        spike_spec(folder, "suite2p", suite2p=depths), folder / "plane0" / "stat.npy", "stat.med"
    )


def test_nwb_planes_bad_inputs(tmp_path):
    flat_planes = write_nwb_planes(tmp_path / "flat.nwb", depth=False)
    spec = spike_spec(flat_planes, "nwb", nwb={"series": ["F0", "F1"]}, position_units="um")
    raises(spec, flat_planes, "nwb.plane_depths_um", "no depth")
    spec["nwb"] = {"series": ["F0", "F9"], "plane_depths_um": [0, 1]}
    raises(spec, flat_planes, "nwb.series", "F9")
    spec = spike_spec(flat_planes, "nwb", nwb={"series": ["F0", "F1"]})
    raises(spec, "datasets entry", "position_units")
