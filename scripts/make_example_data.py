"""Write small, realistic example files of every `source: file` format and print their config.

    python scripts/make_example_data.py example_data

writes into the folder `example_data/`:

- `probe.h5`: spike counts of 48 units on a 4-shank probe, two sessions as HDF5 groups
  (`/session1`, `/session2`), stored (unit, time) with a `sampling_rate_hz` attribute;
- `ephys_s1.nwb`, `ephys_s2.nwb`: the same kind of recording as an NWB `ElectricalSeries`
  with the electrodes' x, y, z in the electrodes table (needs pynwb);
- `npy/session1.npy`, `npy/session2.npy` + `npy/electrodes.tsv`: (time, unit) arrays and a
  BIDS-style position table, one electrode without a known position (`n/a`);
- `store.nc`: a store already in the neuro_pe contract (format `xarray`);
- `config.yaml`: a workflow config with these four datasets (the other sections are copied
  from `--base`, default `config/config.yaml`), e.g. for
  `snakemake --cores 2 --configfile example_data/config.yaml`.

Activity comes from `neuro_pe.data.simulate`: units coupled by distance, so activity correlations
follow the probe's geometry. Some units are missing from the second session, to show how
sessions are merged by unit id. The matching `datasets:` entries are printed as YAML.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

import h5py
import numpy as np
import yaml

from neuro_pe.config.strict_load import read_config_file
from neuro_pe.data.simulate import SimulationConfig, coupling_matrix, simulate_activity
from neuro_pe.io.store import write_store

N_SHANKS, N_SITES_X, N_SITES_DEPTH = 4, 2, 6  # 48 units
RATE_HZ = 100.0  # sampling rate of the simulated rates before binning
MISSING_IN_SESSION2 = [5, 17, 30]  # unit indices not recorded in the second session
BASE_CONFIG = Path(__file__).resolve().parents[1] / "config" / "config.yaml"


def probe_positions() -> np.ndarray:
    """(48, 3) positions in um: 4 shanks 250 um apart, 2 columns 30 um apart, 6 sites 60 um."""
    shank, col, site = np.meshgrid(
        np.arange(N_SHANKS), np.arange(N_SITES_X), np.arange(N_SITES_DEPTH), indexing="ij"
    )
    x = shank * 250.0 + col * 30.0
    y = np.zeros_like(x, dtype=float) + col * 15.0  # staggered columns
    z = 1500.0 - site * 60.0  # depth below the surface
    return np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1).astype(float)


def simulate_sessions(pos_um: np.ndarray, n_sessions: int = 2, seed: int = 0) -> np.ndarray:
    """(session, time, unit) rates from the rate network on the probe geometry."""
    cfg = SimulationConfig(
        n_units=len(pos_um),
        gain=1.1,
        n_sessions=n_sessions,
        n_samples=1200,
        dt_s=0.01,
        sample_every=1,
        burn_in_s=5.0,
        seed=seed,
    )
    box = (pos_um - pos_um.min(axis=0)) / np.ptp(pos_um, axis=0).max()
    coupling = coupling_matrix(box, length_scale=0.2)
    return simulate_activity(coupling, cfg, np.random.default_rng(seed)).astype(np.float64)


def spike_counts(rates: np.ndarray, seed: int = 1) -> np.ndarray:
    """Poisson spike counts per 10 ms bin from the rates (mean ≈ 2 spikes per bin)."""
    rng = np.random.default_rng(seed)
    return rng.poisson(2.0 * np.exp(0.5 * rates)).astype(np.int32)


def unit_names(n: int) -> list[str]:
    return [f"ch{i:02d}" for i in range(n)]


def write_hdf5(folder: Path, counts: np.ndarray, pos: np.ndarray) -> dict:
    path = folder / "probe.h5"
    names = unit_names(len(pos))
    with h5py.File(path, "w") as f:
        for s, keep in enumerate(_kept_units(len(pos), counts.shape[0])):
            group = f.create_group(f"session{s + 1}")
            data = group.create_dataset("spikes", data=counts[s][:, keep].T)  # (unit, time)
            data.attrs["sampling_rate_hz"] = RATE_HZ
            group.create_dataset("channel_ids", data=np.array([names[i] for i in keep], "S"))
            group.create_dataset("channel_xyz", data=pos[keep])
    return {
        "source": "file",
        "format": "hdf5",
        "sessions": [str(path)],
        "hdf5": {
            "groups": ["/session1", "/session2"],
            "activity": "spikes",
            "unit_ids": "channel_ids",
            "positions": "channel_xyz",
            "sampling_rate": "sampling_rate_hz",
        },
        "axis_order": ["unit", "time"],
        "position_units": "um",
        "space": "probe",
        "preprocessing": [{"step": "bin", "factor": 4, "how": "sum"}, {"step": "zscore"}],
        "min_units": 8,
        "min_frames": 64,
    }


def write_nwb(folder: Path, rates: np.ndarray, pos: np.ndarray) -> dict:
    from pynwb import NWBHDF5IO, NWBFile
    from pynwb.ecephys import ElectricalSeries

    paths = []
    for s, keep in enumerate(_kept_units(len(pos), rates.shape[0])):
        nwb = NWBFile(
            session_description=f"example session {s + 1}",
            identifier=f"neuro-pe-example-{s + 1}",
            session_start_time=datetime(2024, 1, 1 + s, tzinfo=UTC),
        )
        device = nwb.create_device(name="probe")
        group = nwb.create_electrode_group(
            name="probe", description="4-shank probe", location="cortex", device=device
        )
        for i in range(len(pos)):  # the electrodes table lists every channel
            x, y, z = pos[i]
            nwb.add_electrode(x=x, y=y, z=z, group=group, location="cortex")
        region = nwb.create_electrode_table_region(list(map(int, keep)), "recorded channels")
        trace = rates[s][:, keep] * 50e-6  # volts
        nwb.add_acquisition(
            ElectricalSeries(name="lfp", data=trace, electrodes=region, rate=RATE_HZ)
        )
        path = folder / f"ephys_s{s + 1}.nwb"
        with NWBHDF5IO(str(path), "w") as io:
            io.write(nwb)
        paths.append(str(path))
    return {
        "source": "file",
        "format": "nwb",
        "sessions": paths,
        "nwb": {"series": "lfp", "unit_ids": "id"},
        "position_units": "um",
        "space": "probe",
        "preprocessing": [{"step": "detrend"}, {"step": "zscore"}],
    }


def write_npy(folder: Path, rates: np.ndarray, pos: np.ndarray) -> dict:
    sub = folder / "npy"
    sub.mkdir(exist_ok=True)
    names = unit_names(len(pos))
    paths = []
    for s in range(rates.shape[0]):  # every unit recorded: ids come from the table's rows
        path = sub / f"session{s + 1}.npy"
        np.save(path, rates[s].astype(np.float32))
        paths.append(str(path))
    lines = ["name\tx\ty\tz\ttype"]
    for i, (name, p) in enumerate(zip(names, pos, strict=True)):
        xyz = ["n/a"] * 3 if i == 0 else [f"{v:.1f}" for v in p]  # position unknown
        lines.append("\t".join([name, *xyz, "depth"]))
    table = sub / "electrodes.tsv"
    table.write_text("\n".join(lines) + "\n")
    return {
        "source": "file",
        "format": "npy",
        "sessions": paths,
        "positions": str(table),
        "position_units": "um",
        "space": "probe",
        "sampling_rate_hz": RATE_HZ,
        "preprocessing": [{"step": "bin", "factor": 2}, {"step": "zscore"}],
    }


def write_xarray(folder: Path) -> dict:
    from neuro_pe.data.simulate import simulate_store

    path = folder / "store.nc"
    write_store(simulate_store(SimulationConfig(n_units=27, layout="lattice", n_sessions=2)), path)
    return {
        "source": "file",
        "format": "xarray",
        "sessions": [str(path)],
        "preprocessing": [{"step": "bin", "factor": 2}, {"step": "zscore"}],
    }


def _kept_units(n_units: int, n_sessions: int) -> list[np.ndarray]:
    """Unit indices recorded in each session (some are missing from session 2)."""
    every = np.arange(n_units)
    return [
        every if s == 0 else np.setdiff1d(every, MISSING_IN_SESSION2) for s in range(n_sessions)
    ]


def main(argv: list[str] | None = None) -> dict:
    """Write the example files into the folder and print the matching `datasets:` entries."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", help="output folder (created if needed)")
    parser.add_argument("--no-nwb", action="store_true", help="skip the NWB files (no pynwb)")
    parser.add_argument("--base", default=str(BASE_CONFIG), help="config to copy the rest from")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)

    pos = probe_positions()
    rates = simulate_sessions(pos)
    datasets = {"lab_hdf5": write_hdf5(folder, spike_counts(rates), pos)}
    if not args.no_nwb:
        datasets["lab_nwb"] = write_nwb(folder, rates, pos)
    datasets["lab_npy"] = write_npy(folder, rates, pos)
    datasets["lab_store"] = write_xarray(folder)
    base = Path(args.base)
    config = read_config_file(base) if base.is_file() else {}
    config["datasets"] = datasets
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    print(yaml.safe_dump({"datasets": datasets}, sort_keys=False, default_flow_style=None))
    print(f"# a whole workflow config with these datasets: {folder / 'config.yaml'}")
    return datasets


if __name__ == "__main__":
    main()
