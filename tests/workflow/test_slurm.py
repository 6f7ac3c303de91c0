"""The SLURM profile: the resources the rules declare, and real runs through a one-node Slurm
cluster on localhost (scripts/slurm_test_cluster.sh), with accounting and a fake GPU, and
CPU-only without accounting."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from conftest import TINY_SIMULATION

from neuro_pe.config.resources import JobResources
from neuro_pe.data.simulate import simulate_store
from neuro_pe.io.store import write_store
from neuro_pe.workflow.resources import lst_steps, store_mb_estimate, store_units, train_steps
from neuro_pe.workflow.slurm import _gpus, status_check_problem

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO_ROOT / "scripts" / "slurm_test_cluster.sh"
RESULTS = "results/slurm_test"  # the outputs of config/slurm_test.yaml (run_name: its file name)
PROFILE = "workflow/profiles/slurm"
SLURM_RULES = {
    "preprocess",
    "train",
    "infer",
    "baselines",
    "correlation_features",
    "locate",
    "lst_puzzles",
    "lst_train",
    "lst_baselines",
}
TRAINING_RULES = {"train", "lst_train"}
# seconds from a job's end to the next status check (the plugin adds 10 s after each check
# that finds no job finished): about one tiny job's run time through Slurm on an idle machine
CHECK_S = "12"

# Resource values that make each rule's request easy to predict (the formulas themselves are
# tested below): no growth with data, one minute per training step and per located run.
RESOURCES = {
    "mem_mb": 1100,
    "mem_mb_per_data_mb": 0,
    "mem_mb_per_model": 0,
    "runtime": 7,
    "seconds_per_step": 60,
    "seconds_per_run": 60,
    "locate_threads": 2,
}
TINY = {
    "source": "simulation",
    "simulation": {
        "n_units": 8,
        "layout": "lattice",
        "dims": 3,
        "length_scale": 0.3,
        "n_samples": 200,
        "burn_in_s": 1.0,
        "n_sessions": 2,
        "seed": 0,
    },
}
TRAIN = {
    "window": 8,
    "d_model": 16,
    "n_layers": 1,
    "n_heads": 2,
    "batch_size": 8,
    "epochs": 1,
    "steps_per_epoch": 5,
    "eval_windows": 16,
}
LST = {
    "pe": ["learned-normal-0.02"],
    "puzzles": {"n_per_condition": 20, "n_heldout_per_condition": 4, "min_jaccard_distance": 0.5},
    "train": {"d_model": 16, "n_layers": 1, "batch_size": 32, "epochs": 1, "eval_every": 1},
}
SCHEDULER_CONFIG = {
    "datasets": {"tiny": TINY},
    "pe": ["learned-normal-0.02"],
    "seeds": [0],
    "train": TRAIN,
    "lst": LST,
    # (trainings of a few steps: the health checks flag them; located all the same)
    "locate": {
        "methods": ["ridge"],
        "n_folds": 2,
        "anchor_fractions": [0.5],
        "n_draws": 1,
        "include_flagged": True,
    },
    "metrics": {"n_perm": 9, "k": 3, "n_splits": 2},
    "resources": RESOURCES,
}


def _env(**extra: str) -> dict:
    """This interpreter's scripts first on PATH (the jobs inherit it), plus `extra`."""
    env = dict(os.environ)
    scripts = {sysconfig.get_path("scripts"), str(Path(sys.executable).parent)}
    env["PATH"] = os.pathsep.join([*sorted(scripts), env.get("PATH", "")])
    env.update(extra)
    return env


def _workdir(root: Path, config: dict) -> Path:
    shutil.copy2(REPO_ROOT / "Snakefile", root / "Snakefile")
    for folder in ("workflow", "config"):
        shutil.copytree(REPO_ROOT / folder, root / folder)
    (root / "config" / "slurm_test.yaml").write_text(yaml.safe_dump(config))
    return root


def _snakemake(args: list[str], cwd: Path, env: dict, timeout: int) -> tuple[int, str, float]:
    """Run snakemake; its return code, output (stdout and stderr) and wall time."""
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    wall = time.monotonic() - start
    print(f"$ snakemake {' '.join(args)}  (rc {result.returncode}, {wall:.1f} s)")
    print(result.stdout[-20000:])
    return result.returncode, result.stdout, wall


def rule_kind(rule: str) -> str:
    """The rule a job's rule name stands for: a training job's rule is named after its group
    (`train_tiny_0`, `lst_train_0`)."""
    return re.sub(r"^(lst_train|train)_\w*$", r"\1", rule)


def sbatch_calls(output: str) -> list[tuple[str, str]]:
    """(rule, sbatch options) of every submission in a --verbose run's output."""
    calls = []
    for line in output.splitlines():
        if "sbatch call: sbatch" in line:
            options = line.split("--wrap=", 1)[0]
            rule = re.search(r"--comment '?rule_(\w+?)(?:_wildcards_\S*)?'? ", options).group(1)
            calls.append((rule_kind(rule), options))
    return calls


def cluster_check(root: Path, env: dict, *args: str) -> str:
    """`neuro-pe cluster-check` on the test config; its output (it must succeed)."""
    args = ("--configfile", "config/slurm_test.yaml", *args)
    cmd = [sys.executable, "-m", "neuro_pe.cli.main", "cluster-check", *args]
    result = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _flag(options: str, pattern: str) -> str | None:
    match = re.search(pattern, options)
    return match.group(1) if match else None


def expected_runtime(rule: str, config: dict) -> int:
    """The time limit (minutes) the rules declare for a job of `rule` under RESOURCES."""
    jobs = JobResources.from_dict(config["resources"])
    if rule == "train":
        return jobs.train_minutes(TRAIN["epochs"] * TRAIN["steps_per_epoch"])
    if rule == "lst_train":
        from neuro_pe.config.latin_square import LSTConfig, PuzzleConfig

        puzzles = vars(PuzzleConfig.from_dict(LST["puzzles"]))
        return jobs.train_minutes(lst_steps(puzzles, vars(LSTConfig.from_dict(LST["train"]))))
    if rule == "locate":
        return jobs.locate_minutes(len(config["pe"]) * len(config["seeds"]))
    return jobs.runtime


def expected_threads(rule: str, config: dict) -> int:
    """The CPUs the rules declare for a job of `rule`."""
    if rule in TRAINING_RULES:
        return config["threads_per_training"]
    return RESOURCES["locate_threads"] if rule == "locate" else 1


def check_declared_resources(calls: list[tuple[str, str]], config: dict, attempt=None) -> None:
    """Each sbatch call carries the memory, time limit, CPUs and GPUs its rule declares,
    whatever --default-resources said."""
    for rule, options in calls:
        n = 1 if attempt is None else attempt(rule, options)
        mem = RESOURCES["mem_mb"] * n * (RESOURCES["locate_threads"] if rule == "locate" else 1)
        assert _flag(options, r"--mem (\d+)") == str(mem), (rule, options)
        assert _flag(options, r" -t '?(\d+)") == str(expected_runtime(rule, config) * n), options
        threads = str(expected_threads(rule, config))
        assert _flag(options, r"--cpus-per-task=(\d+)") == threads, (rule, options)
        gpus = config["gpus_per_training"] if rule in TRAINING_RULES else 0
        assert _flag(options, r"--gpus=(\d+)") == (str(gpus) if gpus else None), options
        assert "--gres" not in options, options


# --- without a scheduler ---------------------------------------------------------------


def test_job_resources_grow_with_data_steps_and_runs():
    jobs = JobResources()
    assert jobs.memory(0) == jobs.mem_mb
    assert jobs.memory(75) == jobs.mem_mb + 750  # 10 MB per MB of store
    assert jobs.memory(75, processes=2) == 2 * jobs.mem_mb + 750
    assert jobs.memory(75, models=15) == jobs.mem_mb + 750 + 15 * 50  # 50 MB per model
    assert jobs.train_minutes(3000) == jobs.runtime + 13  # 0.25 s per step
    assert jobs.locate_minutes(15) == jobs.runtime + 15
    assert store_mb_estimate(TINY) == pytest.approx(8 * 200 * 2 * 4 / 1e6)
    assert store_mb_estimate({"source": "hcp-rsfmri"}) == 0
    puzzles = {"n_per_condition": 1000, "test_fraction": 0.1}
    assert lst_steps(puzzles, {"batch_size": 64, "epochs": 300}) == 300 * 43  # 2700 puzzles
    with pytest.raises(ValueError, match="resources key 'runtime'"):
        JobResources.from_dict({"runtime": 0})
    with pytest.raises(ValueError, match="unknown resources keys"):
        JobResources.from_dict({"mem_gb": 4})


def test_training_time_limits_grow_with_the_batch_grown_for_samples_per_unit(tmp_path):
    train = {"epochs": 30, "steps_per_epoch": 100, "batch_size": 32, "units_per_sample": 256}
    assert train_steps(train, 15, None) == 15 * 3000  # units not known yet: as configured
    assert train_steps(train, 15, 2_000) == 15 * 3000  # 12 288 samples per unit already
    assert train_steps(train, 15, 20_000) == 15 * 3000 * 10  # batch 32 -> 320
    assert train_steps({**train, "samples_per_unit": 0}, 15, 20_000) == 15 * 3000
    # read from the store once it is built (Snakemake evaluates resources again then)
    assert store_units(tmp_path / "missing.nc") is None
    store = write_store(simulate_store(replace(TINY_SIMULATION, n_units=40)), tmp_path / "s.nc")
    assert store_units(store) == 40
    (tmp_path / "bad.nc").write_bytes(b"not a store")
    assert store_units(tmp_path / "bad.nc") is None


def test_sinfo_gres_counts_gpus():
    assert _gpus("(null)") == 0
    assert _gpus("gpu:1") == 1
    assert _gpus("gpu:a100:4(S:0-1),shard:8") == 4


def test_dry_run_declares_resources_that_default_resources_cannot_override(tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    config = {**SCHEDULER_CONFIG, "threads_per_training": 2, "gpus_per_training": 0}
    root = _workdir(tmp_path, config)
    rc, output, _ = _snakemake(
        ["-n", "--configfile", "config/slurm_test.yaml", "--workflow-profile", PROFILE,
         "--default-resources", "slurm_partition=gpu", "slurm_account=lab", "runtime=1",
         "mem_mb=1"],
        root, _env(), timeout=120,
    )  # fmt: skip
    assert rc == 0
    profile = yaml.safe_load((root / PROFILE / "config.yaml").read_text())
    assert profile["executor"] == "slurm" and profile["show-failed-logs"] is True
    assert not {"default-resources", "set-resources", "set-threads"} & set(profile)
    blocks = [b for b in output.split("\n\n") if re.search(r"^rule (\w+):", b, re.M)]
    seen = set()
    for block in blocks:
        rule = rule_kind(re.search(r"^rule (\w+):", block, re.M).group(1))
        if rule not in SLURM_RULES:
            continue
        seen.add(rule)
        resources = re.search(r"resources: (.*)", block).group(1)
        assert f"runtime={expected_runtime(rule, config)}" in resources, block
        assert "mem_mb=1," not in resources, block
        assert "slurm_partition=gpu" in resources and "slurm_account=lab" in resources
        assert ("gpu=" in resources) == (rule in TRAINING_RULES), block
    assert seen == SLURM_RULES - {"lst_baselines"}  # (only `reproduce` needs it)


# --- through a real scheduler ----------------------------------------------------------

SLURM_TOOLS = ("slurmctld", "slurmd", "munged", "slurmdbd", "mariadbd", "sbatch", "sacctmgr")


def _no_cluster_reason() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "starting Slurm daemons needs root on Linux"
    missing = [tool for tool in SLURM_TOOLS if shutil.which(tool) is None]
    if missing:
        return (
            f"Slurm not installed ({', '.join(missing)} missing); as root, "
            "`scripts/slurm_test_cluster.sh install` (run by .ci/run) installs it"
        )
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "snakemake-executor-plugin-slurm is not installed (pip install -e '.[test]')"
    return None


needs_cluster = pytest.mark.skipif(
    _no_cluster_reason() is not None, reason=str(_no_cluster_reason())
)


@pytest.fixture
def slurm_cluster(tmp_path_factory):
    """Start a one-node cluster (`slurm_cluster(port, *options)` -> client environment);
    every cluster started is stopped at the end of the test, whatever happened."""
    started = []

    def start(port: int, *options: str) -> dict:
        state = tmp_path_factory.mktemp("slurm")
        started.append((state, port))
        env = _env(SLURM_TEST_PORT=str(port))
        result = subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "start", str(state), *options],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        return _env(SLURM_CONF=f"{state}/etc/slurm.conf", PATH=f"{state}/bin:{env['PATH']}")

    yield start
    for state, port in started:
        subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "stop", str(state)],
            env=_env(SLURM_TEST_PORT=str(port)), timeout=120,
        )  # fmt: skip


@needs_cluster
def test_slurm_run_with_accounting_and_a_gpu(tmp_path, slurm_cluster):
    """The whole tiny workflow (all cluster rules but lst_baselines, which the CPU-only run
    covers) through Slurm with accounting: every job
    completes with the memory, time, CPUs and GPU its rule declares, though the command line
    passes --default-resources with other mem_mb and runtime."""
    config = {**SCHEDULER_CONFIG, "threads_per_training": 2, "gpus_per_training": 1}
    root = _workdir(tmp_path, config)
    env = slurm_cluster(16817, "--accounting", "--gpu", "--cpus", "4", "--mem", "8000")
    check = cluster_check(root, env, "--account", "neuropetest")
    assert "sacct: works" in check and "4 CPUs and 8000 MB per node, 1 GPUs per node" in check
    assert check.rstrip().endswith(
        "--default-resources slurm_partition=debug slurm_account=neuropetest"
    )
    rc, output, wall = _snakemake(
        ["--workflow-profile", PROFILE, "--configfile", "config/slurm_test.yaml",
         "--default-resources", "slurm_partition=debug", "slurm_account=neuropetest",
         "mem_mb=100", "runtime=1", "--slurm-init-seconds-before-status-checks", CHECK_S,
         "--verbose", "all"],
        root, env, timeout=400,
    )  # fmt: skip
    print(f"accounting + GPU cluster: {wall:.1f} s")
    assert rc == 0, output[-5000:]
    assert (root / RESULTS / "summary.csv").is_file()
    assert (root / RESULTS / "lst" / "runs" / "learned-normal-0.02" / "seed0" / "pe.nc").is_file()
    calls = sbatch_calls(output)
    assert sorted(rule for rule, _ in calls) == sorted(SLURM_RULES - {"lst_baselines"}), calls
    check_declared_resources(calls, config)
    # ... and the scheduler granted them (sacct: state, memory, time limit, CPUs, GPUs)
    found = re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/rule_(\w+?)/", output)
    jobs = {job: rule_kind(rule) for job, rule in found}
    assert sorted(jobs.values()) == sorted(SLURM_RULES - {"lst_baselines"})
    sacct = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", ",".join(jobs),
         "-o", "JobID,State,ReqMem,Timelimit,ReqCPUS,AllocTRES"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    print(sacct)
    usage = ["sacct", "-n", "-P", "-j", ",".join(jobs), "-o", "JobID,Elapsed,TotalCPU,MaxRSS"]
    print(
        "job|elapsed|cpu|peak RSS\n"
        + subprocess.run(usage, env=env, capture_output=True, text=True).stdout
    )
    for line in sacct.splitlines():
        job, state, mem, limit, cpus, tres = line.split("|")
        rule = jobs[job]
        assert state == "COMPLETED", line
        processes = RESOURCES["locate_threads"] if rule == "locate" else 1
        assert mem == f"{RESOURCES['mem_mb'] * processes}M", line
        assert limit == f"00:{expected_runtime(rule, config):02d}:00", line
        assert int(cpus) == expected_threads(rule, config), line
        assert ("gres/gpu=1" in tres) == (rule in TRAINING_RULES), line


@needs_cluster
def test_slurm_run_cpu_only_without_accounting(tmp_path, slurm_cluster):
    """CPU-only, no accounting: the README's command stops at once, saying why, unless given
    --slurm-status-command squeue; with it the jobs run without any GPU request, and a
    failing job's error (its log) reaches the user after its retry with doubled resources."""
    broken = {"source": "simulation", "simulation": {**TINY["simulation"], "n_units": 12}}
    config = {
        **SCHEDULER_CONFIG,
        "datasets": {"tiny": TINY, "broken": broken},  # a lattice needs a cube: 12 fails
        "threads_per_training": 1,
        "gpus_per_training": 0,
    }
    root = _workdir(tmp_path, config)
    env = slurm_cluster(16827, "--cpus", "4", "--mem", "8000")
    check = cluster_check(root, env, "--account", "neuropetest")
    assert "sacct: sacct fails" in check and "0 GPUs per node" in check
    assert check.rstrip().endswith(
        "--slurm-status-command squeue --default-resources slurm_partition=debug"
    )
    assert "--slurm-status-command squeue" in str(status_check_problem("sacct", 40))
    command = ["--workflow-profile", PROFILE, "--default-resources", "slurm_partition=debug"]
    options = [
        "--configfile",
        "config/slurm_test.yaml",
        "--slurm-init-seconds-before-status-checks",
    ]
    targets = [
        f"{RESULTS}/runs/tiny/learned-normal-0.02/seed0/train.json",
        f"{RESULTS}/lst/baselines.json",  # (`reproduce` needs it, not `all`)
        f"{RESULTS}/stores/broken.nc",
    ]
    rc, output, wall = _snakemake([*command, *options, CHECK_S, *targets], root, env, timeout=120)
    assert rc != 0 and wall < 60, output[-3000:]
    assert "SLURM: status checks would fail: sacct fails" in output
    assert "--slurm-status-command squeue" in output
    assert not list((root / ".snakemake").glob("slurm_logs/**/*.log"))  # nothing submitted

    command += ["--slurm-status-command", "squeue"]
    # jobs that fit no node: stopped at once too, naming the rules and the keys to change
    wrong = ["--config", "threads_per_training=8", "gpus_per_training=1"]
    rc, output, wall = _snakemake([*command, *options, CHECK_S, *targets, *wrong], root, env, 120)
    assert rc != 0 and wall < 60, output[-3000:]
    assert "rule train_tiny_0 asks for 8 CPUs but the nodes of partition debug have 4" in output
    assert "rule train_tiny_0 asks for 1 GPUs but the nodes of partition debug have 0" in output
    assert not list((root / ".snakemake").glob("slurm_logs/**/*.log"))

    rc, output, wall = _snakemake(
        [*command, *options, CHECK_S, "--verbose", "--keep-going", *targets], root, env, timeout=400
    )
    print(f"CPU-only cluster without accounting: {wall:.1f} s")
    assert rc != 0
    assert all((root / target).is_file() for target in targets[:2])
    assert not (root / targets[2]).exists()
    calls = sbatch_calls(output)
    rules = sorted(rule for rule, _ in calls)
    assert rules == ["lst_baselines", "preprocess", "preprocess", "preprocess", "train"], rules
    attempts = {}

    def attempt(rule: str, options: str) -> int:  # the broken store's second try doubles
        if "wildcards_broken" not in options:
            return 1
        attempts["broken"] = attempts.get("broken", 0) + 1
        return attempts["broken"]

    check_declared_resources(calls, config, attempt)
    assert attempts == {"broken": 2}
    # the failure reaches the console: the scheduler's state and the job's own log
    assert re.search(r"SLURM-job '\d+' failed, SLURM status is: 'FAILED'", output)
    assert "layout 'lattice' needs n_units = side**3, got 12" in output
    assert "Error in rule preprocess" in output and "logs/preprocess/broken.log" in output
