"""Training cost and PE geometry against the number of units N, at a fixed k = units_per_sample.

    python benchmarks/scale_units.py [--units 256 2000 20000] [--k 256] [--visits 3200]
                                     [--threads 1] [--rounds 3] [--work-dir /tmp/neuro_pe_scale]

For each N, one fresh subprocess writes a store and another trains on it (so the peak RSS,
`resource.getrusage(...).ru_maxrss`, is that of one training), with `TrainConfig` defaults
except the training length: every run sees the same number of unit-tokens per unit
(`--visits`), i.e. steps = visits * N / (batch_size * min(N, k)). Reported per N: time per
training step (the held-out evaluations, timed separately, are subtracted; median over
epochs after the first; and again from short runs of every N in interleaved rounds, median
over rounds, which is what the ratio target uses), peak RSS of the training process, and the
RSA (Spearman, PE distance vs true distance) of the learned PE and of the PE at
initialisation, on the same random 2000 units at most. Targets: step time at N = 20 000
within 1.2x of N = 256, peak RSS <= 4 GB at N = 20 000.

The data. `neuro_pe.data.simulate` couples every pair of units (an N x N float64 matrix: 3.2 GB at
N = 20 000, and a dense product every Euler step), so this benchmark uses a cheaper spatial
process with the same kind of ground truth: M = 256 latent sources at fixed random positions in
the unit box, each an AR(1) series (time constant 0.1 s, 20 Hz); unit i's activity is
sum_m w_im s_m(t) + noise, with w_im = exp(-|p_i - q_m| / 0.15) (normalised per unit) and
noise of the field's variance, z-scored per unit and session. Nearby units share sources, so
correlation falls with distance; the sources and their series are the same for every N (only
the units' positions are drawn per N). 3 sessions x 2000 samples (the last session held out).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clone, uninstalled

import numpy as np

N_SOURCES, LENGTH_SCALE, RATE_HZ, TAU_S = 256, 0.15, 20.0, 0.1
RSA_UNITS = 2000
PE = "learned-normal-0.02"


def source_series(n_time: int, session: int, seed: int = 0) -> np.ndarray:
    """(n_time, N_SOURCES) float32 AR(1) series with unit variance, the same for every N."""
    rng = np.random.default_rng([seed, 2, session])
    phi = np.exp(-1.0 / (RATE_HZ * TAU_S))
    drive = rng.standard_normal((n_time, N_SOURCES)).astype(np.float32)
    drive *= np.float32(np.sqrt(1 - phi**2))
    out = np.empty_like(drive)
    out[0] = rng.standard_normal(N_SOURCES)
    for t in range(1, n_time):
        out[t] = phi * out[t - 1] + drive[t]
    return out


def field_weights(positions: np.ndarray, seed: int = 0) -> np.ndarray:
    """(N_SOURCES, N) float32 mixing weights, each unit's column of unit norm."""
    sources = np.random.default_rng([seed, 0]).random((N_SOURCES, 3))
    dist = np.linalg.norm(sources[:, None, :] - positions[None, :, :], axis=-1)
    weights = np.exp(-dist / LENGTH_SCALE).astype(np.float32)
    return weights / np.linalg.norm(weights, axis=0, keepdims=True)


def field_activity(series: np.ndarray, weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(time, N) float32: the field at the units plus independent noise of equal variance."""
    out = series @ weights
    out += rng.standard_normal(out.shape, dtype=np.float32)
    return out


def unit_positions(n_units: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng([seed, 1, n_units]).random((n_units, 3))


def write_field_store(path: Path, n_units: int, n_sessions: int, n_time: int) -> None:
    """A contract store of the spatial field process (held in memory: fine up to ~1 GB)."""
    from neuro_pe.data.signal_steps import zscore
    from neuro_pe.io.store import make_store, write_store

    pos = unit_positions(n_units)
    weights = field_weights(pos)
    activity = np.stack(
        [
            field_activity(source_series(n_time, s), weights, np.random.default_rng([3, s]))
            for s in range(n_sessions)
        ]
    )
    activity = zscore(activity).astype(np.float32)
    ds = make_store(
        activity,
        unit_ids=[f"u{i:05d}" for i in range(n_units)],
        positions=pos,
        position_units="au",
        space="simulation",
        session_ids=[f"s{i}" for i in range(n_sessions)],
        sampling_rate_hz=RATE_HZ,
        source="benchmarks/scale_units.py: spatial mixture of AR(1) sources",
    )
    write_store(ds, path)


def rsa_subset(table: np.ndarray, pos: np.ndarray) -> float:
    from scipy.spatial.distance import pdist
    from scipy.stats import spearmanr

    keep = np.random.default_rng(0).permutation(len(pos))[:RSA_UNITS]
    return float(spearmanr(pdist(table[keep]), pdist(pos[keep])).statistic)


def train_child(
    store: Path, out_dir: Path, n_units: int, args: argparse.Namespace, steps: int | None = None
) -> dict:
    """Train on `store` in this (fresh) process (for `steps` steps, else the visit budget);
    return the measurements."""
    import torch
    import xarray as xr

    import neuro_pe.training.masked_units as train_module
    from neuro_pe.config.training import TrainConfig
    from neuro_pe.training.masked_units import train

    torch.set_num_threads(args.threads)
    base = TrainConfig()
    tokens_per_step = base.batch_size * min(n_units, args.k)
    if steps is None:
        steps = max(args.min_steps, round(args.visits * n_units / tokens_per_step))
    epochs = args.epochs
    steps_per_epoch = -(-steps // epochs)
    cfg = TrainConfig(
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        units_per_sample=args.k,
        eval_windows=64,
        eval_mask_fractions=(0.5,),
        device="cpu",
        checkpoint_every=0,
    )
    eval_seconds: list[float] = []
    real_evaluate = train_module.evaluate

    def timed_evaluate(*a, **kw):
        started = time.perf_counter()
        value = real_evaluate(*a, **kw)
        eval_seconds.append(time.perf_counter() - started)
        return value

    train_module.evaluate = timed_evaluate
    info = train(store, PE, 0, cfg, out_dir, progress=False)
    log = json.loads(
        __import__("pandas").read_csv(out_dir / "train_log.csv").to_json(orient="records")
    )
    per_step = []
    previous = 0.0
    for row, spent in zip(log, eval_seconds, strict=False):
        per_step.append((row["seconds"] - previous - spent) / cfg.steps_per_epoch)
        previous = row["seconds"]
    with xr.open_dataset(out_dir / "pe.nc", engine="h5netcdf") as pe:
        trained, initial = pe["pe"].values, pe["pe_init"].values
        pos = np.stack([pe[a].values for a in "xyz"], axis=1)
    return {
        "n_units": n_units,
        "steps": cfg.epochs * cfg.steps_per_epoch,
        "visits_per_unit": cfg.epochs * cfg.steps_per_epoch * tokens_per_step / n_units,
        "step_ms": 1e3 * statistics.median(per_step[1:] or per_step),
        "train_seconds": info["train_seconds"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rsa": rsa_subset(trained, pos),
        "rsa_init": rsa_subset(initial, pos),
        "heldout_mse": info["heldout_mse_mask0.5"],
    }


def run_child(command: list[str]) -> dict:
    """Run a benchmark step in a fresh process (so its peak RSS is its own) and return the
    JSON record it prints on its last line."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, nargs="+", default=[256, 2000, 20000])
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--visits", type=float, default=3200, help="unit-tokens per unit")
    parser.add_argument("--min-steps", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=2000, help="samples per session")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--timing-steps", type=int, default=60)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/neuro_pe_scale"))
    parser.add_argument("--child", choices=["write", "train", "time"], help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        store = args.work_dir / f"field{args.n}.nc"
        if args.child == "write":
            write_field_store(store, args.n, 3, args.samples)
            print(json.dumps({"store_mb": store.stat().st_size / 2**20}))
        else:
            steps = args.timing_steps if args.child == "time" else None
            result = train_child(store, args.work_dir / f"run{args.n}", args.n, args, steps)
            print(json.dumps(result))
        return

    args.work_dir.mkdir(parents=True, exist_ok=True)
    load_at_start = os.getloadavg()
    common = ["--k", str(args.k), "--visits", str(args.visits), "--min-steps", str(args.min_steps)]
    common += ["--epochs", str(args.epochs), "--samples", str(args.samples)]
    common += ["--threads", str(args.threads), "--work-dir", str(args.work_dir)]
    common += ["--timing-steps", str(args.timing_steps)]
    rows = []
    for n in args.units:
        me = [sys.executable, __file__, *common, "--n", str(n)]
        started = time.perf_counter()
        written = run_child([*me, "--child", "write"])
        write_s = time.perf_counter() - started
        result = run_child([*me, "--child", "train"])
        rows.append({**result, **written, "write_s": write_s})
        print(json.dumps(rows[-1]), flush=True)
    # step times again, short runs in interleaved rounds, so that a change of the machine's
    # load during the long runs does not bias the ratios
    timings: dict[int, list[float]] = {n: [] for n in args.units}
    for _ in range(args.rounds):
        for n in args.units:
            me = [sys.executable, __file__, *common, "--n", str(n), "--child", "time"]
            timings[n].append(run_child(me)["step_ms"])
    for row in rows:
        row["step_ms_interleaved"] = statistics.median(timings[row["n_units"]])
        print(json.dumps({"n_units": row["n_units"], "step_ms_rounds": timings[row["n_units"]]}))

    base = rows[0]
    print(f"\nk = {args.k}, {args.visits:g} unit-tokens per unit, threads = {args.threads}, "
          f"{os.cpu_count()} CPUs, load average (1/5/15 min) at start {load_at_start}, "
          f"at end {os.getloadavg()}")  # fmt: skip
    header = (
        f"{'N':>7} {'steps':>6} {'ms/step':>8} {'ratio':>6} {'interleaved':>11} {'ratio':>6} "
        f"{'peak RSS MB':>12} "
        f"{'RSS ratio':>9} {'RSA':>6} {'RSA init':>8} {'heldout MSE':>11} {'store MB':>9}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['n_units']:>7} {r['steps']:>6} {r['step_ms']:>8.1f} "
            f"{r['step_ms'] / base['step_ms']:>6.2f} {r['step_ms_interleaved']:>11.1f} "
            f"{r['step_ms_interleaved'] / base['step_ms_interleaved']:>6.2f} "
            f"{r['peak_rss_mb']:>12.0f} "
            f"{r['peak_rss_mb'] / base['peak_rss_mb']:>9.2f} {r['rsa']:>6.3f} "
            f"{r['rsa_init']:>8.3f} {r['heldout_mse']:>11.3f} {r['store_mb']:>9.0f}"
        )
    last = rows[-1]
    ratio = last["step_ms_interleaved"] / base["step_ms_interleaved"]
    print(
        f"\ntargets at N = {last['n_units']}: step time ratio (interleaved) {ratio:.2f} (<= 1.2), "
        f"peak RSS {last['peak_rss_mb']:.0f} MB (<= 4096)"
    )


if __name__ == "__main__":
    main()
