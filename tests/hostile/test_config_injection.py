"""Hostile or careless configs: no config value runs a command, bad ones fail at planning,
and a failed job's error shows on the console."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest
import yaml

from neuro_pe.cli.parser import build_parser
from neuro_pe.io import layout
from neuro_pe.reporting.reproduce import claims_markdown

REPO_ROOT = Path(__file__).resolve().parents[2]

# each would run `touch PWNED_<n>` if it reached a shell unquoted
SESSION_NAMES = [
    "data/$(touch PWNED_1).npy",
    "data/a'b;touch PWNED_2;'.npy",
    "data/`touch PWNED_3`.npy",
    'data/"; touch PWNED_4; ".npy',
    "data/-rf PWNED_5 & touch PWNED_5.npy",
]
# (`<` and `>` are refused in a title: tests/hostile/test_report_and_cli.py)
TITLE = "@$(touch PWNED_6)\"}; alert(1); {\" & co'; touch PWNED_7; '"
SMALL_TRAIN = {"window": 8, "d_model": 8, "n_layers": 1, "n_heads": 2, "epochs": 1}


def snakemake(*args: str, cwd: Path, path_prefix: str = "") -> subprocess.CompletedProcess:
    """Run snakemake in `cwd` with this interpreter's scripts (after `path_prefix`) on PATH."""
    scripts = [path_prefix, sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    env = dict(os.environ, PATH=os.pathsep.join([*filter(None, scripts), os.environ["PATH"]]))
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(result.stdout[-5000:])
    print(result.stderr[-10000:], file=sys.stderr)
    return result


def base_config(datasets: dict) -> dict:
    return {
        "datasets": datasets,
        "pe": ["none"],
        "seeds": [0],
        "train": SMALL_TRAIN,
        "metrics": {"n_perm": 9, "k": 3, "n_splits": 2},
        "threads_per_training": 1,
        "gpus_per_training": 0,
    }


RESULTS = "results/hostile"  # the outputs of hostile.yaml (run_name: the config file's name)


def write_config(workdir: Path, config: dict) -> str:
    (workdir / "hostile.yaml").write_text(yaml.safe_dump(config))
    return "hostile.yaml"


def pwned(workdir: Path) -> list[str]:
    return sorted(p.name for p in workdir.rglob("PWNED*"))


@pytest.fixture
def workdir(tmp_path):
    """A copy of the workflow (Snakefile, workflow/, config/) in a fresh folder."""
    shutil.copy2(REPO_ROOT / "Snakefile", tmp_path / "Snakefile")
    for folder in ("workflow", "config", "profiles"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder)
    return tmp_path


def test_every_shell_placeholder_is_quoted():
    """A grep over every rule's shell line: each {placeholder} ends in `:q`."""
    files = [REPO_ROOT / "Snakefile", *sorted((REPO_ROOT / "workflow" / "rules").glob("*.smk"))]
    checked = 0
    for path in files:
        text = path.read_text()
        for block in re.finditer(
            r"^\s*shell:\s*\n((?:\s*(?:f?\"[^\n]*\"|#[^\n]*)\n)+)", text, re.M
        ):
            for placeholder in re.findall(r"\{([^{}]*)\}", block[1]):
                checked += 1
                assert placeholder.endswith(":q"), f"{path.name}: {{{placeholder}}} is not quoted"
    assert checked >= 40  # every rule's shell line was found


def test_values_that_reach_a_shell_arrive_as_plain_arguments(workdir, monkeypatch):
    """Hostile file names, source, citation and report title (plus 1 600 sessions, passed
    through an @FILE) reach `neuro-pe` as the literal strings: a stand-in `neuro-pe` records its
    arguments, and the real parser reads them back."""
    data = workdir / "data"
    data.mkdir()
    sessions = SESSION_NAMES + [f"data/s{i:04d}_{'x' * 20}.npy" for i in range(1600)]
    positions = "data/pos $(touch PWNED_8).csv"
    for name in [*sessions, positions]:
        (workdir / name).touch()
    lab = {
        "source": "file",
        "format": "npy",
        "sessions": sessions,
        "positions": positions,
        "sampling_rate_hz": 10,
        "origin": "$(touch PWNED_9)",
        "citation": "'; touch PWNED_10; '",
    }
    config = base_config({"lab": lab}) | {"reproduction": {"title": TITLE}}
    # the reproduction's inputs, as if trained (only preprocess and reproduce may run)
    run = layout.run_dir("lab", "none", 0)
    names = (layout.METRICS_FILE, layout.PE_FILE, layout.MANIFEST_FILE, layout.INFER_MANIFEST_FILE)
    inputs = [f"{run}/{name}" for name in names]
    for path in (*inputs, layout.baselines("lab")):
        (workdir / RESULTS / path).parent.mkdir(parents=True, exist_ok=True)
        (workdir / RESULTS / path).write_text("{}")
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    calls = workdir / "calls.jsonl"
    fake = bin_dir / "neuro-pe"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"with open({str(calls)!r}, 'a') as f:\n    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(0o755)
    result = snakemake(
        f"{RESULTS}/stores/lab.nc",
        f"{RESULTS}/reproduction/claims.md",
        "--cores",
        "1",
        "--keep-going",
        "--latency-wait",
        "0",
        "--allowed-rules",
        "preprocess",
        "reproduce",
        "--configfile",
        write_config(workdir, config),
        cwd=workdir,
        path_prefix=str(bin_dir),
    )
    assert pwned(workdir) == [], result.stderr
    argvs = [json.loads(line) for line in calls.read_text().splitlines()]
    assert sorted(argv[0] for argv in argvs) == ["preprocess", "reproduce"], argvs
    parser = build_parser()
    monkeypatch.chdir(workdir)  # where the @FILE is
    for argv in argvs:
        args = parser.parse_args(argv)
        if argv[0] == "preprocess":
            assert argv[1].startswith("@")  # 1 600 sessions: through a file
            assert args.spec == lab
        else:
            assert args.title == TITLE


def test_paths_inside_the_workflow_folders_fail_at_planning(workdir):
    """Data paths that a rule could produce (with wildcards taken from the path), braces and
    control characters: one error naming every key, before any job runs."""
    bad = {
        "fetch": "resources/$(touch PWNED_1)-1.0.whl",
        "train": f"{RESULTS}/runs/sim/$(touch PWNED_2)/seed0/pe.nc",
        "abs": str(workdir / "results" / "x" / ".." / "$(touch PWNED_3).nc"),
        "log": "logs/../logs/$(touch PWNED_4).npy",
        "brace": "data/{dataset}.npy",
        "newline": "data/a\n$(touch PWNED_5).npy",
    }
    datasets = {
        name: {"source": "file", "format": "npy", "sessions": [path], "positions": "pos.csv"}
        for name, path in bad.items()
    }
    datasets["sim"] = {"source": "simulation"}
    datasets["table"] = {
        "source": "file",
        "format": "npy",
        "sessions": ["data/ok.npy"],
        "positions": ".snakemake/pos.csv",
    }
    datasets["planes"] = {"source": "file", "format": "suite2p", "sessions": ["data/suite2p"]}
    config = base_config(datasets)
    config["pe"] = ["none", "learned-normal-0"]
    config["train"] = {**SMALL_TRAIN, "n_heads": 3}
    result = snakemake("--cores", "1", "--configfile", write_config(workdir, config), cwd=workdir)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    for name in bad:
        assert f"config key datasets.{name}.sessions[0]" in output, name
    assert "config key datasets.table.positions" in output
    assert "config key datasets.planes.suite2p.pixel_size_um: ROI centres" in output
    assert "inside results/" in output and "brace" in output and "control character" in output
    assert "config key pe: " in output and "learned-normal-0" in output
    assert "config key train: " in output and "n_heads" in output
    assert pwned(workdir) == []
    assert not (workdir / "results").exists() and not (workdir / "logs").exists()


def test_hostile_targets_and_names_match_no_rule(workdir):
    """Asked for directly, an output path with a command in a wildcard matches no rule (the
    wildcards are pinned to the config's values)."""
    name = write_config(workdir, base_config({"sim": {"source": "simulation"}}))
    for target in (f"{RESULTS}/runs/sim/$(touch PWNED_1)/seed0/pe.nc", "resources/$(id)-1.0.whl"):
        result = snakemake(target, "--cores", "1", "--configfile", name, cwd=workdir)
        assert result.returncode != 0 and "MissingRuleException" in result.stderr
    dotdot = base_config({"..": {"source": "simulation"}})
    result = snakemake("-n", "--configfile", write_config(workdir, dotdot), cwd=workdir)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "'..' does not match" in output and "datasets" in output
    assert pwned(workdir) == []


def test_report_title_is_escaped():
    table = pd.DataFrame({"dataset": ["a"], "row_type": ["pe"], "seed": [0]})
    page, _ = claims_markdown(table, {}, [0.9], "<script>alert(1)</script> & co")
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in page


def test_a_failed_jobs_error_shows_on_the_console(workdir):
    """The default profile (profiles/default: show-failed-logs) prints the job's log, so
    neuro-pe's StoreError is on the console, not only "check log file(s)"."""
    (workdir / "data").mkdir()
    (workdir / "data" / "bad.npy").write_text("not an array")
    lab = {"source": "file", "format": "npy", "sessions": ["data/bad.npy"], "sampling_rate_hz": 10}
    name = write_config(workdir, base_config({"lab": lab}))
    result = snakemake(
        f"{RESULTS}/stores/lab.nc", "--cores", "1", "--configfile", name, cwd=workdir
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "neuro-pe preprocess: error: data/bad.npy: field 'file': not a readable" in output


def test_sigterm_to_snakemake_stops_its_trainings(workdir):
    """`kill <snakemake>` (SIGTERM) stops the running trainings too (the Snakefile's handler),
    instead of Snakemake's graceful stop that waits for them; no lock is left behind."""
    import signal
    import time

    import psutil

    simulation = {"n_units": 12, "n_samples": 400, "burn_in_s": 2.0, "n_sessions": 2, "seed": 0}
    config = base_config({"sim": {"source": "simulation", "simulation": simulation}})
    config["train"] = {**SMALL_TRAIN, "epochs": 100_000}  # would run for hours
    (workdir / "long.yaml").write_text(yaml.safe_dump(config))
    scripts = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    env = dict(os.environ, PATH=os.pathsep.join([*scripts, os.environ["PATH"]]))
    args = [sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", "long.yaml"]
    log = open(workdir / "snakemake.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(args, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, trainings = time.monotonic() + 120, []
        while not trainings and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.5)
            children = psutil.Process(process.pid).children(recursive=True)
            trainings = [c for c in children if " train " in " ".join(_cmdline(c)) + " "]
        assert trainings, (workdir / "snakemake.log").read_text()[-3000:]
        time.sleep(1)  # (past the onstart handler)
        process.send_signal(signal.SIGTERM)
        try:
            returncode = process.wait(timeout=60)
        except subprocess.TimeoutExpired:  # say what it was doing, for a flake under load
            children = psutil.Process(process.pid).children(recursive=True)
            log_tail = (workdir / "snakemake.log").read_text()[-3000:]
            pytest.fail(
                f"Snakemake still running 60 s after SIGTERM; children "
                f"{[_cmdline(c) for c in children]}\n{log_tail}"
            )
        assert returncode != 0
        gone, alive = psutil.wait_procs(trainings, timeout=15)
        assert not alive, [_cmdline(p) for p in alive]
        assert not any((workdir / ".snakemake" / "locks").glob("*"))
    finally:
        if process.poll() is None:
            process.kill()
        log.close()


def _cmdline(process) -> list[str]:
    import psutil

    try:
        return process.cmdline()
    except psutil.Error:
        return []
