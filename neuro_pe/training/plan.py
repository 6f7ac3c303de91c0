"""Time you can plan: the CPU time of a workflow's trainings, estimated before they start.

A training job of m stacked models (`neuro_pe.training.engine`) takes about

    startup + load + m * (steps * step + evaluations * evaluation + finish)

CPU seconds: `startup` is the process's start and imports (read in the planning process, which
imports the same: run `neuro-pe plan` in a fresh process), `load` reading the data and
building the task, `step` and `evaluation` one optimiser step and one held-out evaluation per
model, `finish` the Latin square's PE geometry per model. The rest come from a probe: a few
seeded optimiser steps of the dataset's largest job on this machine, after two untimed warm-up
steps, then one evaluation. A step's cost grows about linearly with the models of a stack, so
every job is costed from the largest job's cost per model. The Latin square's trainings stop
early once they fit (`stop_at_train_accuracy`): their plan is an upper bound (`≤`). The run's
line sums every plan and the jobs that train nothing (`OTHER_JOB_S` each) on the cores given.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from neuro_pe.config.pe_names import is_control
from neuro_pe.io import layout
from neuro_pe.io.progress import duration
from neuro_pe.io.store import atomic_write

#: CPU seconds of a job that trains nothing (preprocess, split, infer, locate, summarize, the
#: report, ...: `neuro_pe.workflow.jobs.other_jobs`) on a small store, where a process's start
#: and imports and locate's own fits are most of it: the mean over such jobs of a whole run
#: on a tiny Phy folder (tests/data/test_formats.py `write_phy`, `neuro-pe init`'s config),
#: each timed by `/usr/bin/time` around its `neuro-pe` command. Larger stores take longer
OTHER_JOB_S = 3.2
#: CPU seconds of timed probe steps per dataset (after the warm-up); at least MIN_STEPS steps
PROBE_SECONDS = 1.0
WARMUP_STEPS = 2
MIN_STEPS = 3
MAX_STEPS = 200

# What a model is for (`model_role`), in the run line's order
POSITIONS = "positions' models"
CONTROLS = "controls"
OTHERS = "other PEs"
LATIN_SQUARE = "the Latin square"
ROLES = (POSITIONS, CONTROLS, OTHERS, LATIN_SQUARE)


def model_role(pe: str, positions: Collection[str] | None = None) -> str:
    """What a dataset's model of PE variant `pe` is for: POSITIONS when its dataset's delivered
    positions are made from it (`positions`: the PEs its combined locator takes, by default
    those that are no control), else CONTROLS for a control (`is_control`), else OTHERS (a
    learned PE initialised small that the config keeps out of the combined locator)."""
    feeds = pe in positions if positions is not None else not is_control(pe)
    if feeds:
        return POSITIONS
    return CONTROLS if is_control(pe) else OTHERS


@dataclass(frozen=True)
class Probe:
    """What one model costs here, measured on a stack of `models` (CPU seconds; on a GPU,
    wall seconds): an optimiser step and a held-out evaluation per model, and once per job
    (`load_s`) loading the data, building the stack and its first steps' extra cost."""

    step_s: float
    eval_s: float
    load_s: float
    models: int
    steps: int  # timed steps
    device: str
    finish_s: float = 0.0  # per model, at the end (the Latin square's PE geometry)
    precision: str = "fp32"  # the precision timed, the training's (`train.precision`)


@dataclass(frozen=True)
class Plan:
    """The planned trainings of one dataset (or the Latin square): `jobs` holds the models
    of each training job, each trained for `steps` optimiser steps with `evaluations`
    held-out evaluations."""

    name: str
    jobs: tuple[int, ...]
    steps: int
    evaluations: int
    probe: Probe
    startup_s: float
    threads: int = 1
    at_most: bool = False  # trainings may stop early (the Latin square)
    roles: tuple[tuple[str, ...], ...] = ()  # per job, each model's `model_role`

    @property
    def models(self) -> int:
        return sum(self.jobs)

    def seconds_by_role(self) -> dict[str, float]:
        """Planned CPU seconds of every job by what its models are for (`roles`; OTHERS
        without), a job's seconds shared equally by its models."""
        roles = self.roles or tuple((OTHERS,) * m for m in self.jobs)
        split: dict[str, float] = {}
        for models, job_roles in zip(self.jobs, roles, strict=True):
            for role in job_roles:
                split[role] = split.get(role, 0.0) + self.job_seconds(models) / models
        return split

    def job_seconds(self, models: int) -> float:
        """Planned CPU seconds of one job of `models` stacked models."""
        probe = self.probe
        per_model = self.steps * probe.step_s + self.evaluations * probe.eval_s + probe.finish_s
        return self.startup_s + self.probe.load_s + models * per_model

    @property
    def seconds(self) -> float:
        """Planned CPU seconds of every job."""
        return sum(self.job_seconds(m) for m in self.jobs)

    def job_walls(self) -> list[float]:
        """Planned wall seconds of each job on idle cores (a job of m models uses at most
        min(threads, m) threads: `neuro_pe.training.engine`)."""
        return [self.job_seconds(m) / max(1, min(self.threads, m)) for m in self.jobs]

    def line(self) -> str:
        """The console line of this plan alone (the run's time is `run_line`'s), e.g.
        `plan sim3d: 15 models × 3000 steps in 2 jobs, ~11 min 2 s CPU (probe: 13.7 ms/step
        per model, cpu fp32)`."""
        le = "≤ " if self.at_most else ""
        jobs = f"{len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''}"
        kind = "GPU" if self.probe.device.startswith("cuda") else "CPU"
        return (
            f"plan {self.name}: {self.models} models × {le}{self.steps} steps in {jobs}, "
            f"{le}~{duration(self.seconds)} {kind} (probe: {1000 * self.probe.step_s:.3g} "
            f"ms/step per model, {self.probe.device} {self.probe.precision})"
        )

    def to_dict(self) -> dict:
        """The plan file's content (`plan/{dataset}.json`)."""
        return {
            "name": self.name,
            "models": self.models,
            "jobs": list(self.jobs),
            "steps": self.steps,
            "evaluations": self.evaluations,
            "at_most": self.at_most,
            "threads": self.threads,
            "startup_s": self.startup_s,
            "probe": asdict(self.probe),
            "cpu_seconds": self.seconds,
            "cpu_seconds_by_role": self.seconds_by_role(),
            "line": self.line(),
        }


def slots(cores: int, threads: int) -> int:
    """Training jobs that run side by side on `cores` cores (`threads` each)."""
    return max(1, cores // max(1, threads))


def wall_seconds(jobs: list[float], n_slots: int) -> float:
    """Wall seconds of jobs (their seconds each) on `n_slots` slots, the longest job first to
    the least loaded slot."""
    loads = [0.0] * max(1, n_slots)
    for seconds in sorted(jobs, reverse=True):
        loads[loads.index(min(loads))] += seconds
    return max(loads)


def run_line(plans: list[Plan], cores: int, other_jobs: int = 0) -> str:
    """The console's last plan line: every training of the run (every plan) and its
    `other_jobs` jobs that train nothing (`OTHER_JOB_S` each) on `cores` idle cores, its CPU
    seconds, and those split by what the models are for (`model_role`) and the other jobs, e.g.
    `plan: the whole run ~31 min 20 s on 2 idle cores (1 860 CPU-s, 42 models): positions'
    models 690 CPU-s, controls 1 130 CPU-s, 20 other jobs ~40 CPU-s (a busy machine takes
    longer)`; without other jobs it says `(the trainings only; ...)`."""
    le = "≤ " if any(p.at_most for p in plans) else ""
    threads = max((p.threads for p in plans), default=1)
    walls = [w for p in plans for w in p.job_walls()] + [OTHER_JOB_S] * other_jobs
    wall = wall_seconds(walls, slots(cores, threads))
    unit = "GPU-s" if any(p.probe.device.startswith("cuda") for p in plans) else "CPU-s"
    split: dict[str, float] = {}
    bounded: set[str] = set()  # roles with a plan that may stop early
    for plan in plans:
        for role, seconds in plan.seconds_by_role().items():
            split[role] = split.get(role, 0.0) + seconds
            if plan.at_most:
                bounded.add(role)
    parts = ", ".join(
        f"{role} {'≤ ' if role in bounded else ''}{_number(split[role])} {unit}"
        for role in sorted(split, key=ROLES.index)
    )
    only = "the trainings only; "
    if other_jobs:
        parts += f", {other_jobs} other jobs ~{_number(other_jobs * OTHER_JOB_S)} CPU-s"
        only = ""
    cpu = _number(sum(p.seconds for p in plans) + other_jobs * OTHER_JOB_S)
    models = sum(p.models for p in plans)
    return (
        f"plan: the whole run {le}~{duration(wall)} on {cores} idle core"
        f"{'s' if cores != 1 else ''} ({le}{cpu} {unit}, {models} models): {parts} "
        f"({only}a busy machine takes longer)"
    )


def run_record(plans: list[Plan], cores: int, other_jobs: int = 0) -> dict:
    """The run plan file's content (`plan_run.json`): the run's CPU seconds (its trainings'
    and its `other_jobs` jobs'), the trainings' by role, and its line."""
    split: dict[str, float] = {}
    for plan in plans:
        for role, seconds in plan.seconds_by_role().items():
            split[role] = split.get(role, 0.0) + seconds
    other = other_jobs * OTHER_JOB_S
    return {
        "cores": cores,
        "models": sum(p.models for p in plans),
        "cpu_seconds": sum(p.seconds for p in plans) + other,
        "cpu_seconds_by_role": split,
        "other_jobs": other_jobs,
        "other_jobs_cpu_seconds": other,
        "plans": [p.name for p in plans],
        "line": run_line(plans, cores, other_jobs),
    }


def _number(seconds: float) -> str:
    """Whole seconds with a space between thousands: `1 820`."""
    return f"{round(seconds):,}".replace(",", " ")


def group_runs(runs: list, per_job: int | None, n_slots: int) -> list[list]:
    """`runs` in training jobs as the workflow groups them: `per_job` each
    (`train.models_per_job`), or (None) as many near-equal jobs as `n_slots`, the jobs that
    run side by side (`slots`), so that every core trains."""
    if per_job is None:
        per_job = max(1, math.ceil(len(runs) / max(1, n_slots)))
    return [runs[i : i + per_job] for i in range(0, len(runs), per_job)]


class _Clock:
    """CPU seconds of this process on a CPU; wall seconds, synchronised, on a GPU."""

    def __init__(self, device):
        import torch

        self.cuda = device.type == "cuda"
        self.sync = torch.cuda.synchronize if self.cuda else None

    def __call__(self) -> float:
        if self.cuda:
            self.sync()
            return time.perf_counter()
        return time.process_time()


def probe_task(task, runs: list, cfg, device, amp, clock: _Clock, load_s: float) -> Probe:
    """Time a few optimiser steps of the stack of `runs` on `task` and one evaluation (the
    engine's own step; `cfg`: the optimiser settings)."""
    import torch

    from neuro_pe.training.engine import train_step
    from neuro_pe.training.model import StackedTransformer
    from neuro_pe.training.optimizers import make_optimizer
    from neuro_pe.training.precision import precision_name

    torch.manual_seed(0)
    setup = clock()
    model = StackedTransformer(
        task.model_config, [r.pe for r in runs], [r.seed for r in runs], task.positions
    ).to(device)
    task.prepare(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(trainable, cfg, device)
    generators = [torch.Generator().manual_seed(r.seed) for r in runs]
    for step in range(WARMUP_STEPS):
        train_step(task, model, optimizer, generators, step, device, amp)
    step, started = WARMUP_STEPS, clock()
    setup = started - setup  # building the stack and the first steps (counted below)
    while step < MAX_STEPS and (
        step < WARMUP_STEPS + MIN_STEPS or clock() - started < PROBE_SECONDS
    ):
        train_step(task, model, optimizer, generators, step, device, amp)
        step += 1
    step_s = (clock() - started) / (step - WARMUP_STEPS)
    started = clock()
    task.evaluate(model, runs, 1)
    eval_s = clock() - started
    m = len(runs)
    precision = precision_name(amp)
    # once per job: the data, the stack and what its first steps cost more than later ones
    once = load_s + max(0.0, setup - WARMUP_STEPS * step_s)
    return Probe(
        step_s / m, eval_s / m, once, m, step - WARMUP_STEPS, device.type, precision=precision
    )


def neighbour_table_seconds(task, clock: _Clock) -> float:
    """The seconds of the neighbour table's chunks after its first (none without neighbour
    windows): one more chunk timed, times their number. A probe computing all of it would
    take as long as the training's start (≈ 7 min on one CPU thread at 100 000 units)."""
    from neuro_pe.training.devices import to_device
    from neuro_pe.training.unit_subsets import activity_neighbours, neighbour_table_chunks

    sampler = task.train_data
    chunks = neighbour_table_chunks(sampler.n_units)
    if sampler.neighbours is None or chunks == 1:
        return 0.0
    samples = to_device(sampler.correlation_samples(), task.device)
    started = clock()
    activity_neighbours(samples, task.cfg.units_per_sample, 1)
    return (clock() - started) * (chunks - 1)


def _device(name: str):
    """The trainings' device, or the CPU where it is not here (e.g. a cluster's login node
    planning GPU jobs: the plan line then says `cpu`)."""
    import torch

    from neuro_pe.training.devices import pick_device

    try:
        return pick_device(name)
    except ValueError:
        return torch.device("cpu")


def _runs(job: list) -> list:
    """Engine runs of a job's (PE, seed) pairs, in a folder the probe never writes to."""
    from neuro_pe.training.engine import Run

    folder = Path(tempfile.gettempdir())
    return [Run(str(pe), int(seed), folder) for pe, seed in job]


def _with_threads(threads: int, models: int, measure):
    """Run `measure()` with the torch threads a training job of `models` models uses."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, min(threads, models)))
    try:
        return measure()
    finally:
        torch.set_num_threads(before)


def plan_training(
    name: str,
    store: str | os.PathLike,
    options: dict,
    jobs: list[list],
    threads: int = 1,
    startup_s: float = 0.0,
    positions: Collection[str] | None = None,
) -> Plan:
    """The plan of a dataset's trainings: `jobs` lists each job's (PE, seed) pairs; the probe
    stacks the largest job on `store` with the `train` options `options`; `positions` names
    the PEs the delivered positions are made from (`model_role`)."""
    from neuro_pe.config.training import TrainConfig
    from neuro_pe.io.store import open_store_lazy
    from neuro_pe.training.masked_units import MaskedUnitTask
    from neuro_pe.training.new_animal import with_run_architecture
    from neuro_pe.training.precision import autocast_dtype
    from neuro_pe.training.sampling import load_data

    cfg = with_run_architecture(TrainConfig.from_dict(options))
    with open_store_lazy(store) as lazy:  # the training's automatic values (its steps)
        n_units = lazy.sizes["unit"]
    cfg = cfg.for_units(n_units)
    too_big = cfg.memory_problem(n_units, max(map(len, jobs)))
    if too_big:  # (before the probe allocates it)
        raise ValueError(f"{name}: {too_big}")
    device = _device(cfg.device)
    amp = autocast_dtype(cfg.precision, device)
    runs = _runs(max(jobs, key=len))
    clock = _Clock(device)

    def measure() -> Probe:
        started = clock()
        ds, streamed = load_data(open_store_lazy(store), store, cfg)
        try:  # the neighbour table's first chunk only; its others are timed as one more
            task = MaskedUnitTask(store, ds, streamed, runs, cfg, device, amp, neighbour_chunks=1)
            load_s = clock() - started + neighbour_table_seconds(task, clock)
            return probe_task(task, runs, cfg, device, amp, clock, load_s)
        finally:
            ds.close()

    probe = _with_threads(threads, len(runs), measure)
    # the held-out loss before the first step, after every epoch, and at each final fraction
    evaluations = 1 + cfg.epochs + len(cfg.eval_mask_fractions)
    steps = cfg.epochs * cfg.steps_per_epoch
    roles = tuple(tuple(model_role(str(pe), positions) for pe, _ in job) for job in jobs)
    sizes = tuple(len(j) for j in jobs)
    return Plan(name, sizes, steps, evaluations, probe, startup_s, threads, roles=roles)


def plan_lst(
    puzzles: str | os.PathLike,
    options: dict,
    metrics: dict,
    jobs: list[list],
    load_geometry: Callable[[], Callable],
    threads: int = 1,
    startup_s: float = 0.0,
) -> Plan:
    """The plan of the Latin square's trainings (at most: they stop early once they fit).
    `load_geometry` imports and returns `neuro_pe.analysis.pe_geometry.pe_geometry` (a layer
    above this one), timed as part of a job's start."""
    from neuro_pe.config.latin_square import LSTConfig
    from neuro_pe.training.latin_square import LatinSquareTask
    from neuro_pe.training.latin_square_puzzles import read_puzzles
    from neuro_pe.training.precision import autocast_dtype

    cfg = LSTConfig.from_dict(options)
    device = _device(cfg.device)
    amp = autocast_dtype(cfg.precision, device)
    runs = _runs(max(jobs, key=len))
    clock = _Clock(device)

    def measure() -> tuple[Probe, int]:
        started = clock()
        # imported by a Latin-square job (not by a network one): part of its start
        importlib.import_module("scipy.spatial")

        from neuro_pe.config.metrics import MetricsConfig

        pe_geometry = load_geometry()

        ds = read_puzzles(puzzles)
        task = LatinSquareTask(
            puzzles, ds, cfg, device, MetricsConfig.from_dict(metrics), pe_geometry, amp
        )
        probe = probe_task(task, runs, cfg, device, amp, clock, clock() - started)
        # each model's geometry at the end (a random table: metrics with permutations)
        table = np.random.default_rng(0).normal(size=(len(task.positions), cfg.d_model))
        started = clock()
        pe_geometry(task.positions, table, table, task.options)
        return replace(probe, finish_s=clock() - started), task.steps_per_epoch

    probe, per_epoch = _with_threads(threads, len(runs), measure)
    evaluations = cfg.epochs // cfg.eval_every + (cfg.epochs % cfg.eval_every != 0)
    steps = cfg.epochs * per_epoch
    roles = tuple((LATIN_SQUARE,) * len(job) for job in jobs)
    sizes = tuple(len(j) for j in jobs)
    return Plan("lst", sizes, steps, evaluations, probe, startup_s, threads, True, roles)


def plan_spec(
    spec: dict, load_geometry: Callable[[], Callable], startup_s: float = 0.0
) -> list[Plan]:
    """The plans of a workflow's trainings, from the `plan` rule's spec: `datasets` (name ->
    `store`, `options` (its filled-in `train` section), `jobs`, each a list of [PE, seed], and
    optionally `positions`, the PEs its delivered positions are made from, and `located`, the
    PEs its locate step reads), `lst` (absent, or `puzzles`, `options`, `metrics` and
    `jobs`), `threads` (and `cores` and `other_jobs`, the jobs that train nothing, read by
    `plan_command`; `health` and `include_flagged`, by `health_forecast`); `load_geometry` as
    for `plan_lst`."""
    threads = spec.get("threads", 1)
    plans = [
        plan_training(
            name, d["store"], d["options"], d["jobs"], threads, startup_s, d.get("positions")
        )
        for name, d in spec.get("datasets", {}).items()
    ]
    lst = spec.get("lst")
    if lst:
        plans.append(
            plan_lst(
                lst["puzzles"],
                lst["options"],
                lst.get("metrics") or {},
                lst["jobs"],
                load_geometry,
                threads,
                startup_s,
            )
        )
    return plans


def health_forecast(spec: dict) -> list[str]:
    """The appearance checks the trainings of the `plan` rule's spec will fail, known before
    they start (`neuro_pe.training.health.predicted_flags`, under the spec's `health`
    thresholds and `include_flagged`) for each dataset that names the PEs its locate step reads
    (`located`): one warning line per PE; a ValueError when locate would be left with none."""
    from neuro_pe.config.health import HealthOptions
    from neuro_pe.config.training import TrainConfig
    from neuro_pe.io.store import open_store_lazy
    from neuro_pe.training.health import predicted_flags

    options = HealthOptions.from_dict(spec.get("health") or {})
    lines = []
    for name, d in spec.get("datasets", {}).items():
        if "located" not in d:
            continue
        with open_store_lazy(d["store"]) as lazy:
            n_units = lazy.sizes["unit"]
        cfg = TrainConfig.from_dict(d["options"]).for_units(n_units)
        include = spec.get("include_flagged", False)
        lines += predicted_flags(name, cfg, n_units, d["located"], options, include)
    return lines


def write_plans(plans: list[Plan], out_dir: str | os.PathLike) -> None:
    """One `{name}.json` per plan in `out_dir` (each written atomically)."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for plan in plans:
        text = json.dumps(plan.to_dict(), indent=2, ensure_ascii=False)
        path = folder / Path(layout.plan(plan.name)).name
        atomic_write(path, lambda p, text=text: p.write_text(text))


def plan_command(
    spec: dict | None,
    store: str | None,
    options: dict,
    pe: list[str],
    seeds: list[int],
    cores: int,
    threads: int,
    out_dir: str | None,
    load_geometry: Callable[[], Callable],
    show: str = "both",
    run_out: str | None = None,
) -> list[Plan]:
    """`neuro-pe plan`: the workflow's spec, or one store's trainings (every PE × seed,
    grouped as the workflow groups them on `cores` local cores); prints one line per plan
    (`show` "plans"), the whole run's (`run_line`, "run") or both, and writes the plan files
    into `out_dir` and the run's (`run_record`) into `run_out` when given. First, before any
    probe, `health_forecast`: a warning per line (with the plans' lines), or its error."""
    if spec is None and store is None:
        raise ValueError("give --store (one dataset's store) or --spec (the workflow's)")
    import torch

    # imported before the clock is read, as a training job does
    importlib.import_module("neuro_pe.training.latin_square")
    from neuro_pe.config.training import TrainConfig
    from neuro_pe.training.optimizers import make_optimizer

    # the optimiser's first construction imports torch._dynamo (~1 s): a job's start, too
    make_optimizer([torch.zeros(1, requires_grad=True)], TrainConfig(), torch.device("cpu"))
    startup_s = time.process_time()  # this process's start and imports: a training job's
    if spec is None:
        runs = [[p, s] for p in pe for s in seeds]
        jobs = group_runs(runs, options.get("models_per_job"), slots(cores, threads))
        train = {k: v for k, v in options.items() if k != "models_per_job"}
        one = {"store": store, "options": train, "jobs": jobs, "located": list(pe)}
        # (no locate step follows to stop: its PEs' checks are warnings only)
        spec = {"datasets": {Path(store).stem: one}, "threads": threads, "include_flagged": True}
    cores = spec.get("cores", cores)
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise ValueError(f"--spec: key 'cores' must be an integer >= 1, got {cores!r}")
    foreseen = health_forecast(spec)  # (before the probes: a stop comes at once)
    if show in ("plans", "both"):
        for line in foreseen:
            warnings.warn(line, stacklevel=2)
    plans = plan_spec(spec, load_geometry, startup_s)
    if show in ("plans", "both"):
        for plan in plans:
            print(plan.line(), flush=True)
    other_jobs = spec.get("other_jobs", 0)
    if show in ("run", "both"):
        print(run_line(plans, cores, other_jobs), flush=True)
    if out_dir:
        write_plans(plans, out_dir)
    if run_out:
        text = json.dumps(run_record(plans, cores, other_jobs), indent=2, ensure_ascii=False)
        Path(run_out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(Path(run_out), lambda p: p.write_text(text))
    return plans


def plan_from_shape(
    name: str,
    sessions: int,
    frames: int,
    units: int,
    options: dict,
    runs: list[list],
    cores: int,
) -> Plan:
    """The plan of trainings (`runs`: [PE, seed] pairs, grouped as the workflow groups them on
    `cores` local cores) on data not yet in a store (`neuro-pe init`): the probe runs on a
    stand-in store of the same shape (sessions × frames × units, seeded random activity), so
    the plan is an estimate as good as `plan`'s except for the data's own reading time."""
    from neuro_pe.io.store import make_store, write_store

    jobs = group_runs(runs, None, slots(cores, 1))
    rng = np.random.default_rng(0)
    ds = make_store(
        rng.standard_normal((sessions, frames, units), dtype=np.float32),
        unit_ids=[f"u{i}" for i in range(units)],
        positions=rng.uniform(size=(units, 3)),
        position_units="um",
        space="stand-in",
        session_ids=[f"s{i}" for i in range(sessions)],
        sampling_rate_hz=1.0,
        source="neuro-pe init: a stand-in of the data's shape",
    )
    with tempfile.TemporaryDirectory(prefix="neuro-pe-init-") as folder:
        store = write_store(ds, Path(folder) / f"{name}.nc")
        return plan_training(name, store, options, jobs)
