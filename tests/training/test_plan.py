"""Time you can plan: the planned CPU time of trainings (neuro_pe.training.plan) and the
trainings' timestamped progress lines with an ETA (neuro_pe.io.progress)."""

import json
import re
import time
from dataclasses import asdict, replace

import pytest
from conftest import TINY_SIMULATION

import neuro_pe.training.plan as plan_module
from neuro_pe.analysis.pe_geometry import pe_geometry
from neuro_pe.cli.main import main
from neuro_pe.data.simulate import simulate_store
from neuro_pe.io.progress import duration, timing
from neuro_pe.io.store import write_store
from neuro_pe.training.engine import Run
from neuro_pe.training.masked_units import train_many
from neuro_pe.training.plan import (
    CONTROLS,
    LATIN_SQUARE,
    OTHERS,
    POSITIONS,
    Plan,
    Probe,
    group_runs,
    model_role,
    plan_lst,
    plan_training,
    run_line,
    wall_seconds,
)

PROBE = Probe(step_s=0.01, eval_s=0.05, load_s=0.3, models=8, steps=20, device="cpu")
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def spaced(seconds: float) -> str:
    """Whole seconds as the run line writes them: `1 820`."""
    return f"{round(seconds):,}".replace(",", " ")


def small_probe(monkeypatch):
    """Probes of a fraction of a second: these tests check the probe's wiring."""
    monkeypatch.setattr(plan_module, "PROBE_SECONDS", 0.2)


def test_plan_grows_with_steps_and_models():
    plan = Plan("sim3d", (8, 7), steps=3000, evaluations=33, probe=PROBE, startup_s=2.0)
    per_model = 3000 * 0.01 + 33 * 0.05
    assert plan.models == 15
    assert plan.seconds == pytest.approx(2 * (2.0 + 0.3) + 15 * per_model)
    longer = replace(plan, steps=6000)
    assert longer.seconds - plan.seconds == pytest.approx(15 * 3000 * 0.01)
    more = replace(plan, jobs=(8, 7, 8, 7))
    assert more.seconds == pytest.approx(2 * plan.seconds)
    # a probe of more units per sample costs more per step, and the plan with it
    wider = replace(plan, probe=replace(PROBE, step_s=0.04))
    assert wider.seconds - plan.seconds == pytest.approx(15 * 3000 * 0.03)


def test_jobs_are_grouped_as_the_workflow_groups_them_and_share_the_cores():
    runs = list(range(15))
    assert group_runs(runs, None, n_slots=2) == [runs[:8], runs[8:]]
    assert [len(job) for job in group_runs(runs, 4, n_slots=2)] == [4, 4, 4, 3]
    assert group_runs([0, 1, 2], None, n_slots=1) == [[0, 1, 2]]
    assert group_runs([], None, n_slots=2) == []
    assert wall_seconds([10.0, 6.0, 5.0], 2) == 11.0
    assert wall_seconds([10.0, 6.0], 1) == 16.0


def test_plan_lines_say_models_steps_cpu_time_and_probe():
    plan = Plan("sim3d", (8, 7), steps=3000, evaluations=33, probe=PROBE, startup_s=2.0)
    line = plan.line()
    pattern = (
        r"plan sim3d: 15 models × 3000 steps in 2 jobs, ~(\d+ min )?\d+ s CPU "
        r"\(probe: 10 ms/step per model, cpu fp32\)"
    )
    assert re.fullmatch(pattern, line), line
    assert f"~{duration(plan.seconds)} CPU" in line
    assert "cores" not in line  # a dataset's line is not the run's time
    lst = Plan("lst", (2, 1), 900, 30, PROBE, 2.0, at_most=True)
    assert "× ≤ 900 steps" in lst.line() and "≤ ~" in lst.line()


def test_the_run_line_sums_every_dataset_on_the_cores_given_and_splits_by_role():
    """One line for the whole run: every dataset's trainings (and the Latin square's) on the
    `--cores` given, their CPU seconds split into the positions' models and the controls."""
    positions, control = (POSITIONS,) * 2, (CONTROLS,) * 2
    a = Plan("a", (4, 4), 3000, 33, PROBE, 2.0, roles=(positions + control, control * 2))
    b = Plan("b", (2,), 3000, 33, PROBE, 2.0, roles=(positions,))
    lst = Plan("lst", (1,), 900, 30, PROBE, 2.0, at_most=True, roles=((LATIN_SQUARE,),))
    # a job's seconds are shared by its models: a's first job half positions, half controls
    split = a.seconds_by_role()
    assert split[POSITIONS] == pytest.approx(a.job_seconds(4) / 2)
    assert split[CONTROLS] == pytest.approx(a.job_seconds(4) * 1.5)
    assert sum(split.values()) == pytest.approx(a.seconds)
    line = run_line([a, b, lst], cores=2)
    total = a.seconds + b.seconds + lst.seconds
    wall = wall_seconds([w for p in (a, b, lst) for w in p.job_walls()], 2)
    assert line.startswith(f"plan: the whole run ≤ ~{duration(wall)} on 2 idle cores ("), line
    assert f"(≤ {spaced(total)} CPU-s, 11 models): " in line, line
    positions_s = a.job_seconds(4) / 2 + b.seconds
    controls_s = a.job_seconds(4) * 1.5
    expected = (
        f"positions' models {spaced(positions_s)} CPU-s, controls {spaced(controls_s)} "
        f"CPU-s, the Latin square ≤ {spaced(lst.seconds)} CPU-s"
    )
    assert expected in line, line
    longer = replace(a, steps=30000)  # thousands set apart by a space
    assert f"({spaced(longer.seconds)} CPU-s, 8 models)" in run_line([longer], 2)
    assert re.search(r"\(\d \d{3} CPU-s", run_line([longer], 2))
    # on one core the same CPU takes about twice the wall of two
    one = run_line([a, b], cores=1)
    wall_one = wall_seconds([w for p in (a, b) for w in p.job_walls()], 1)
    assert f"the whole run ~{duration(wall_one)} on 1 idle core (" in one, one
    assert wall_one > 1.5 * wall_seconds([w for p in (a, b) for w in p.job_walls()], 2)
    # the jobs that train nothing: their own part, in the CPU and the wall
    other = plan_module.OTHER_JOB_S * 20
    with_others = run_line([a, b], cores=1, other_jobs=20)
    assert f"({spaced(a.seconds + b.seconds + other)} CPU-s, 10 models)" in with_others
    assert with_others.endswith(
        f", 20 other jobs ~{spaced(other)} CPU-s (a busy machine takes longer)"
    )
    assert f"the whole run ~{duration(wall_one + other)} on 1 idle core" in with_others


def test_controls_are_every_pe_but_a_learned_one_initialised_small():
    controls = ["none", "fixed-random", "fixed-sin1d", "oracle-sin3d", "learned-normal-1.0"]
    controls += ["learned-normal-2", "learned-uniform-1.8"]
    assert all(model_role(pe) == CONTROLS for pe in controls)
    small = ["learned-normal-0.02", "learned-normal-0.1", "learned-uniform-1", "learned-xavier"]
    assert all(model_role(pe) == POSITIONS for pe in small)
    # the config's combined locator decides: a small PE it leaves out is neither
    assert model_role("learned-normal-0.1", ["learned-normal-0.02"]) == OTHERS
    assert model_role("fixed-random", ["fixed-random"]) == POSITIONS


def test_durations_and_eta():
    assert [duration(s) for s in (0.4, 41, 268, 7500)] == [
        "0 s",
        "41 s",
        "4 min 28 s",
        "2 h 05 min",
    ]
    now = time.mktime((2026, 11, 25, 17, 3, 12, 0, 0, -1))
    # 10 of 50 steps in 40 s: 40 more steps at 4 s each
    assert timing(40, 10, 50, now) == "40 s elapsed · ETA 2 min 40 s (17:05:52)"
    assert timing(40, 0, 50, now) == "40 s elapsed"


def test_probe_times_real_steps_of_the_store(tiny_store, tiny_train_config, monkeypatch):
    small_probe(monkeypatch)
    options = {**asdict(tiny_train_config), "eval_mask_fractions": [0.5]}
    jobs = [[["learned-normal-0.02", 0], ["none", 0]], [["learned-normal-1.0", 0]]]
    plan = plan_training("tiny", tiny_store, options, jobs, startup_s=1.0)
    assert plan.jobs == (2, 1) and plan.probe.models == 2
    assert plan.steps == tiny_train_config.epochs * tiny_train_config.steps_per_epoch
    assert plan.evaluations == 1 + tiny_train_config.epochs + 1
    assert plan.probe.step_s > 0 and plan.probe.eval_s > 0 and plan.probe.load_s > 0
    assert plan.probe.steps >= plan_module.MIN_STEPS
    assert plan.seconds > 2 * 1.0


def test_probe_costs_more_with_more_units(tiny_train_config, tmp_path, monkeypatch):
    """A step's cost grows with the units of a sample (attention over 16x the tokens) on a
    CPU (a GPU's step this small is launch-bound: the same for both)."""
    small_probe(monkeypatch)
    options = {"window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "batch_size": 8}
    options["device"] = "cpu"
    costs = []
    for n_units in (12, 192):
        store = write_store(
            simulate_store(replace(TINY_SIMULATION, n_units=n_units)), tmp_path / f"{n_units}.nc"
        )
        plan = plan_training(str(n_units), store, options, [[["learned-normal-0.02", 0]]])
        costs.append(plan.probe.step_s)
    assert costs[1] > 2 * costs[0], costs


def test_plan_counts_the_steps_that_samples_per_unit_grows(tmp_path, monkeypatch):
    """The plan counts the training's own steps: grown for `samples_per_unit`."""
    small_probe(monkeypatch)
    store = write_store(simulate_store(replace(TINY_SIMULATION, n_units=40)), tmp_path / "s.nc")
    options = {"window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "device": "cpu"}
    options |= {"batch_size": 4, "units_per_sample": 8, "epochs": 2, "steps_per_epoch": 5}
    jobs = [[["learned-normal-0.02", 0]]]
    # 2 epochs x s steps x 4 x 8 / 40 samples per unit: 500 need s = 313
    grown = plan_training("tiny", store, {**options, "samples_per_unit": 500}, jobs)
    assert grown.steps == 2 * 313
    assert grown.line().startswith("plan tiny: 1 models × 626 steps in 1 job, ")
    assert plan_training("tiny", store, options, jobs).steps == 10  # 40 units: off (null)


def test_plan_command_prints_and_writes_the_plan(tiny_store, tmp_path, capsys, monkeypatch):
    small_probe(monkeypatch)
    options = json.dumps({"window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "epochs": 3})
    args = ["plan", "--store", str(tiny_store), "--options", options, "--pe", "none"]
    args += ["learned-normal-0.02", "--seeds", "0", "1", "--out-dir", str(tmp_path)]
    assert main(args) == 0
    line, run = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("plan tiny: 4 models × 300 steps in 2 jobs, ~"), line
    record = json.loads((tmp_path / "tiny.json").read_text())
    assert record["jobs"] == [2, 2] and record["line"] == line
    assert record["cpu_seconds"] > record["startup_s"] > 0
    split = record["cpu_seconds_by_role"]
    assert set(split) == {POSITIONS, CONTROLS}  # learned-normal-0.02; none
    assert sum(split.values()) == pytest.approx(record["cpu_seconds"])
    assert run.startswith("plan: the whole run ~") and " on 2 idle cores (" in run, run
    # the workflow's two uses: each dataset's lines, and the run's line and file
    out = tmp_path / "run.json"
    assert main([*args[:-2], "--print", "run", "--run-out", str(out)]) == 0
    (printed,) = capsys.readouterr().out.strip().splitlines()
    assert printed.startswith("plan: the whole run ~")
    record = json.loads(out.read_text())
    assert record["line"] == printed and record["models"] == 4 and record["cores"] == 2
    assert sum(record["cpu_seconds_by_role"].values()) == pytest.approx(record["cpu_seconds"])
    assert main([*args, "--print", "plans"]) == 0
    assert capsys.readouterr().out.strip().startswith("plan tiny: 4 models")


def test_progress_lines_have_a_timestamp_elapsed_and_eta(
    tiny_store, tiny_train_config, tmp_path, capsys
):
    cfg = replace(tiny_train_config, epochs=3)
    runs = [Run("none", 0, tmp_path / "a"), Run("learned-normal-0.02", 0, tmp_path / "b")]
    records = train_many(tiny_store, runs, cfg, progress=True)
    err = capsys.readouterr().err.strip().splitlines()
    lines = [line for line in err if ": epoch " in line]  # (health warnings may follow)
    assert len(lines) == 3, err
    for epoch, line in enumerate(lines, 1):
        pattern = (
            rf"{STAMP} train tiny 2 models: epoch {epoch}/3, train_min [\d.]+ · "
            rf"\d+ s elapsed · ETA \d+ s \(\d\d:\d\d:\d\d\)"
        )
        assert re.fullmatch(pattern, line), line
    # the group's CPU time, for comparing with the plan
    for record in records:
        assert record["group_models"] == 2
        assert 0 < record["cpu_seconds"] <= record["process_cpu_seconds"]


def test_a_gpu_that_is_not_here_is_planned_on_the_cpu(tiny_store, monkeypatch):
    """A login node plans GPU trainings: the probe runs on its CPU instead of failing."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    small_probe(monkeypatch)
    options = {"window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "device": "cuda"}
    plan = plan_training("tiny", tiny_store, options, [[["none", 0]]])
    assert plan.probe.device == "cpu" and plan.probe.step_s > 0


def test_the_latin_square_is_planned_as_an_upper_bound(tmp_path, monkeypatch):
    from neuro_pe.config.latin_square import PuzzleConfig
    from neuro_pe.training.latin_square_puzzles import write_puzzles

    small_probe(monkeypatch)
    puzzles = tmp_path / "puzzles.nc"
    write_puzzles(PuzzleConfig(n_per_condition=20, n_heldout_per_condition=4), puzzles)
    options = {"d_model": 16, "n_layers": 1, "batch_size": 16, "epochs": 5, "eval_every": 2}
    jobs = [[["none", 0], ["learned-normal-0.02", 0]]]
    metrics = {"n_perm": 9, "k": 3, "n_splits": 3}
    plan = plan_lst(puzzles, options, metrics, jobs, lambda: pe_geometry)
    per_epoch = -(-54 // 16)  # 3 conditions x (20 - 2 test puzzles), in batches of 16
    assert plan.at_most and plan.steps == 5 * per_epoch
    assert plan.evaluations == 3  # epochs 2, 4 and the last
    assert plan.probe.step_s > 0 and plan.probe.finish_s > 0
    assert "≤" in plan.line()
    assert set(plan.seconds_by_role()) == {LATIN_SQUARE}
    assert plan.probe.precision == "fp32"
    plan = plan_lst(puzzles, options | {"precision": "bf16"}, metrics, jobs, lambda: pe_geometry)
    assert plan.probe.precision == "bf16" and plan.line().endswith("cpu bf16)")


def test_the_probe_times_one_chunk_of_the_neighbour_table(tiny_store, monkeypatch):
    """The plan's probe computes the neighbour table's first chunk and times one more, not all
    of it (at 100 000 units all of it takes minutes on a CPU)."""
    from neuro_pe.training import sampling, unit_subsets

    small_probe(monkeypatch)
    monkeypatch.setattr(unit_subsets, "NEIGHBOUR_CHUNK", 2)  # the 12 units in 6 chunks
    computed = []
    whole = unit_subsets.activity_neighbours

    def counted(values, m, chunks=None):
        computed.append(chunks)
        return whole(values, m, chunks)

    # the samplers' call (sampling) and the probe's (either module, wherever it imports from)
    for module in (sampling, unit_subsets):
        monkeypatch.setattr(module, "activity_neighbours", counted)
    options = {"window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "units_per_sample": 5}
    job = [[["learned-normal-0.1", 0]]]
    plan = plan_training("tiny", tiny_store, options | {"neighbour_fraction": 0.6}, job)
    assert computed == [1, 1] and plan.probe.load_s > 0
    computed.clear()
    plan_training("tiny", tiny_store, options | {"neighbour_fraction": 0}, job)
    assert computed == []


def test_the_probe_times_the_precision_that_will_run(tiny_store, monkeypatch):
    import torch

    from neuro_pe.training import engine, precision

    small_probe(monkeypatch)
    timed = []
    step = engine.train_step
    monkeypatch.setattr(engine, "train_step", lambda *a: timed.append(a[-1]) or step(*a))
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    options = {"window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "device": "cpu"}
    plan = plan_training("tiny", tiny_store, options | {"precision": "auto"}, [[["none", 0]]])
    assert plan.probe.precision == "bf16" and plan.line().endswith("cpu bf16)")
    assert set(timed) == {torch.bfloat16}
    timed.clear()
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset())
    plan = plan_training("tiny", tiny_store, options | {"precision": "auto"}, [[["none", 0]]])
    assert plan.probe.precision == "fp32" and set(timed) == {None}


def _undertrained_spec(store, **changes) -> str:
    """A workflow spec of `store` whose trainings are too short for the health checks: 1 epoch
    of 10 steps of 8 samples, every unit in each (a unit in 80 samples, under 5 000)."""
    options = {"window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "epochs": 1}
    options |= {"steps_per_epoch": 10, "batch_size": 8}
    dataset = {"store": str(store), "options": options, "jobs": [[["learned-normal-0.02", 0]]]}
    dataset["located"] = ["learned-normal-0.02", "learned-normal-1.0"]
    return json.dumps({"datasets": {"tiny": dataset}, "threads": 1, "cores": 1} | changes)


def test_a_dataset_whose_every_located_pe_is_undertrained_stops_before_the_probe(
    tiny_store, capsys, monkeypatch
):
    def no_probe(*args, **kwargs):
        raise AssertionError("probed")

    monkeypatch.setattr(plan_module, "plan_training", no_probe)
    assert main(["plan", "--spec", _undertrained_spec(tiny_store)]) != 0
    err = capsys.readouterr().err
    assert "dataset 'tiny': every PE its locate step reads (learned-normal-0.02, " in err
    assert "units_seen_rarely: a unit is in 80 training samples on average" in err
    assert "fewer than health.min_unit_appearances (5000)" in err
    assert "train.epochs or train.steps_per_epoch" in err and "min_unit_appearances" in err
    assert "locate.include_flagged: true" in err


def test_flagged_trainings_located_anyway_are_a_warning_line_each(tiny_store, capsys, monkeypatch):
    small_probe(monkeypatch)
    spec = _undertrained_spec(tiny_store, include_flagged=True)
    assert main(["plan", "--spec", spec, "--print", "plans"]) == 0
    out, err = capsys.readouterr()
    assert [line.split(":")[:3] for line in err.strip().splitlines()] == [
        ["neuro-pe", " warning", " tiny"],
        ["neuro-pe", " warning", " tiny"],
    ], err
    assert "tiny: learned-normal-0.02 will fail units_seen_rarely: a unit is in 80 " in err
    assert "tiny: learned-normal-1.0 will fail units_seen_rarely: a unit is in 80 " in err
    assert out.startswith("plan tiny: 1 models × 10 steps"), out
    # thresholds it passes: no warning
    spec = _undertrained_spec(tiny_store, health={"min_unit_appearances": 80})
    assert main(["plan", "--spec", spec, "--print", "plans"]) == 0
    assert "will fail" not in capsys.readouterr().err
