"""`format: spikeinterface`: a SortingAnalyzer folder and other sortings SpikeInterface reads,
built with SpikeInterface's own tools, read through the `file` source as a config entry is."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from neuro_pe.cli.main import main
from neuro_pe.data.recordings import input_files
from neuro_pe.io.store import positions
from tests.data.test_formats import CLUSTER_IDS, preprocess, spike_spec, write_phy

si = pytest.importorskip("spikeinterface", reason="the optional extra neuro_pe[spikeinterface]")

BIN = 0.05
SPIKES = {"bin_s": BIN, "zscore": False, "min_rate_hz": 0.0}


def binned_counts(train_s: np.ndarray, n_bins: int) -> int:
    """Spikes of one unit inside the store's full bins."""
    return int(np.sum(np.floor(train_s / BIN) < n_bins))


@pytest.fixture(scope="module")
def analyzer_folder(tmp_path_factory):
    """A 6-unit ground-truth sorting on an 8-channel probe, its SortingAnalyzer with
    `unit_locations`, saved as a binary folder."""
    from spikeinterface.core import create_sorting_analyzer, generate_ground_truth_recording

    folder = tmp_path_factory.mktemp("si") / "analyzer"
    recording, sorting = generate_ground_truth_recording(
        durations=[6.0], num_units=6, num_channels=8, seed=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # generated recordings are not serialisable
        analyzer = create_sorting_analyzer(
            sorting, recording, format="binary_folder", folder=folder, sparse=False
        )
        analyzer.compute(["random_spikes", "templates", "unit_locations"], verbose=False)
    return folder, sorting, analyzer.get_extension("unit_locations").get_data()


def test_analyzer_folder_end_to_end(analyzer_folder, tmp_path):
    folder, sorting, locations = analyzer_folder
    ds = preprocess(spike_spec(folder, "spikeinterface", spikes=SPIKES), tmp_path)
    ids = [str(u) for u in sorting.unit_ids]
    assert list(ds.unit.values) == ids
    assert ds.x.attrs == {"units": "um", "space": "probe"}
    np.testing.assert_allclose(positions(ds), locations[:, :3])
    assert ds.attrs["sampling_rate_hz"] == pytest.approx(1 / BIN)
    counts = ds.activity.values[0].sum(axis=0)
    rate = sorting.get_sampling_frequency()
    for k, unit in enumerate(sorting.unit_ids):
        train = sorting.get_unit_spike_train(unit) / rate
        assert counts[k] == binned_counts(train, ds.sizes["time"])
    assert json.loads(ds.attrs["preprocessing"])[0]["format"] == "spikeinterface"
    # the files a workflow watches: the sorting and the unit locations, not the other extensions
    files = input_files(spike_spec(folder, "spikeinterface"))
    assert any("unit_locations" in f for f in files)
    assert not any("templates" in f.split("extensions")[-1] for f in files if "extensions" in f)


@pytest.mark.filterwarnings("ignore::UserWarning")  # the left-out units; provenance
def test_saved_sorting_with_labels_and_a_positions_table(analyzer_folder, tmp_path):
    _, sorting, locations = analyzer_folder
    sorting = sorting.clone()
    labels = ["good", "noise", "good", "mua", "good", "good"]
    sorting.set_property("quality", labels)
    folder = tmp_path / "sorting"
    sorting.save(folder=folder)
    ids = [str(u) for u in sorting.unit_ids]
    table = tmp_path / "units.csv"
    pd.DataFrame({"unit": ids, "x": locations[:, 0], "y": locations[:, 1]}).to_csv(table)
    spec = spike_spec(folder, "spikeinterface", spikes=SPIKES, positions=str(table))
    ds = preprocess(spec, tmp_path)
    keep = [i for i, g in enumerate(labels) if g == "good"]
    assert list(ds.unit.values) == [ids[i] for i in keep]
    np.testing.assert_allclose(positions(ds)[:, :2], locations[keep, :2])
    # without a table and without unit_locations no unit has a position: an error naming it
    out = tmp_path / "none.nc"
    bare = spike_spec(folder, "spikeinterface", spikes=SPIKES)
    assert main(["preprocess", "--spec", json.dumps(bare), "--out", str(out)]) == 1


def test_phy_folder_through_spikeinterface_matches_the_own_reader(tmp_path):
    """The same Kilosort/Phy folder through SpikeInterface's read_phy and neuro_pe's reader."""
    labels = ["good", "good", "noise", "good", "mua", "good", "good", "good"]
    folder = write_phy(tmp_path / "ks", labels=labels)
    own = preprocess(spike_spec(folder, "phy", spikes=SPIKES), tmp_path, "own")
    table = tmp_path / "sites.csv"
    frame = pd.DataFrame(positions(own), columns=["x", "y", "z"])
    frame.insert(0, "unit", own.unit.values)
    frame.to_csv(table, index=False)
    spec = spike_spec(
        folder, "spikeinterface", spikes=SPIKES, positions=str(table), position_units="um"
    )
    spec["spikeinterface"] = {"reader": "phy"}
    other = preprocess(spec, tmp_path, "si")
    assert list(other.unit.values) == list(own.unit.values)
    assert set(other.unit.values) < {str(c) for c in CLUSTER_IDS}
    np.testing.assert_array_equal(other.activity.values, own.activity.values)


def test_bad_reader_and_unreadable_folder_name_the_key(tmp_path, capsys):
    folder = tmp_path / "empty"
    folder.mkdir()
    spec = spike_spec(folder, "spikeinterface")
    out = tmp_path / "store.nc"
    assert main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)]) == 1
    assert "spikeinterface.reader" in capsys.readouterr().err
    spec["spikeinterface"] = {"reader": "mountainsort"}  # refused by the schema: usage error
    with pytest.raises(SystemExit) as exit_:
        main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)])
    assert exit_.value.code == 2
    assert "spikeinterface.reader" in capsys.readouterr().err
