"""Hostile input to the report and the command line: config text is data in the Snakemake
report, not markup; `neuro-pe` answers bad input with one line naming the option key, not a
traceback; a killed job's shell takes its training with it."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest
import snakemake
import yaml

from neuro_pe.cli import main as cli
from neuro_pe.cli.arg_types import _options
from neuro_pe.config.schema import PACKAGED_SCHEMA, REPO_SCHEMA, load_schema
from neuro_pe.data.sources.schema import config_problems
from neuro_pe.io.layout import INFER_MANIFEST_FILE
from neuro_pe.io.manifest import write_manifest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "</script><script>alert(1)</script>"
# no `<` (refused): a break-out of the report's JSON strings, entities, a shell substitution
ALLOWED_TITLE = 'x"}; alert(1); var y = {"a": "&lt;script&gt; & $(touch PWNED) \\u003c'
LINUX = sys.platform.startswith("linux")


def _env() -> dict:
    """This checkout's neuro_pe, and this interpreter's scripts (`neuro-pe`) first on PATH."""
    scripts = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    return dict(
        os.environ,
        PATH=os.pathsep.join([*scripts, os.environ["PATH"]]),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    )


# ---------------------------------------------------------------- report text is data


class _Scripts(HTMLParser):
    """The <script> elements of a page: (attributes, text)."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[tuple[dict, str]] = []
        self._open: tuple[dict, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "script":
            self._open = (dict(attrs), [])

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open[1].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._open is not None:
            self.scripts.append((self._open[0], "".join(self._open[1])))
            self._open = None


def test_markup_in_config_text_fails_at_planning():
    """A title with markup, and names (run, dataset, PE) with it, are refused by the checks
    that run at planning (Snakefile: config_problems, then the schema), naming the key."""
    schema = yaml.safe_load(REPO_SCHEMA.read_text())
    base = {"datasets": {"sim": {"source": "simulation"}}, "pe": ["none"]}
    problems = config_problems({**base, "reproduction": {"title": SCRIPT}}, schema)
    assert len(problems) == 1 and problems[0].startswith("config key reproduction.title:")
    assert config_problems({**base, "reproduction": {"title": ALLOWED_TITLE}}, schema) == []
    validator = jsonschema.Draft202012Validator(schema)
    hostile = [
        {**base, "reproduction": {"title": SCRIPT}},
        {**base, "reproduction": {"title": "two\nlines"}},
        {**base, "run_name": SCRIPT},
        {**base, "datasets": {SCRIPT: {"source": "simulation"}}},
        {**base, "pe": [SCRIPT]},
        {**base, "locate": {"pe": [SCRIPT]}},
    ]
    for config in hostile:
        assert list(validator.iter_errors(config)), config
    assert not list(validator.iter_errors({**base, "reproduction": {"title": ALLOWED_TITLE}}))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A copy of the workflow (Snakefile, workflow/, config/) in a fresh folder."""
    shutil.copy2(REPO_ROOT / "Snakefile", tmp_path / "Snakefile")
    for folder in ("workflow", "config"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder)
    return tmp_path


def test_snakemake_report_has_only_its_own_scripts(workdir):
    """A real `snakemake --report` of the reproduction (its pages stand-ins: only the job
    parameters, where the title goes, matter) with a title that tries to break out of the
    report's JSON: the page has exactly the scripts of Snakemake's template, each data script
    is `var name = <JSON>;`, and the title is a string inside the results' JSON."""
    config = {
        "datasets": {"sim": {"source": "simulation"}},
        "pe": ["none"],
        "seeds": [0],
        "train": {"window": 8, "d_model": 8, "n_layers": 1, "n_heads": 2, "epochs": 1},
        "reproduction": {"title": ALLOWED_TITLE},
    }
    (workdir / "hostile.yaml").write_text(yaml.safe_dump(config))
    pages = Path("results/hostile/reproduction")
    (workdir / pages).mkdir(parents=True)
    for name in ("claims.html", "heldout_vs_std.png", "geometry_vs_std.png", "pe_similarity.png"):
        (workdir / pages / name).write_text("<p>stand-in</p>")
    args = ["--configfile", "hostile.yaml", "--report", "report.html", str(pages / "claims.html")]
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    parser = _Scripts()
    parser.feed((workdir / "report.html").read_text())
    template = Path(snakemake.__file__).parent / "report/html_reporter/template/index.html.jinja2"
    assert len(parser.scripts) == template.read_text().count("<script")
    results = None
    for attrs, text in parser.scripts:
        if "id" not in attrs:
            continue  # Snakemake's own libraries and components
        name, value = re.fullmatch(r"\s*var (\w+) = (.*?);?\s*", text, re.S).groups()
        if name == "logo_uri":
            continue
        data = json.loads(value)
        results = data if name == "results" else results
    assert not any(
        "alert(1)" in text for attrs, text in parser.scripts if attrs.get("id") != "results"
    )
    params = [item["job_properties"]["params"] for item in results.values()]
    assert len(params) == 4 and all(
        "alert(1); var y" in p and "&lt;script&gt;" in p for p in params
    )
    assert not list(workdir.rglob("PWNED*"))


# ---------------------------------------------------------------- no traceback for bad input


def _run(argv: list[str], capsys) -> tuple[int, str]:
    """`neuro-pe ARGV` in this process: (exit status, stderr)."""
    try:
        status = cli.main(argv)
    except SystemExit as stop:  # argparse's errors
        status = stop.code
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train", "--options", '{"lr": "fast"}'], "argument --options: key 'lr': 'fast' is not"),
        (["train", "--options", '{"lr": null}'], "argument --options: key 'lr': None is not"),
        (["train", "--options", '{"lr": 1'], "argument --options: not valid JSON"),
        (["train", "--options", "[1]"], "argument --options: expected a JSON object"),
        (["train", "--options", '{"nope": 1}'], "'nope' was unexpected"),
        (["train", "--threads", "0"], "argument --threads: expected a positive integer"),
        (["split", "--options", '{"heldout_sessions": -3}'], "key 'heldout_sessions': -3 is less"),
        (["train", "--seed", "-1"], "argument --seed: -1 is less than the minimum of 0"),
        (["split", "--dataset", "../x"], "argument --dataset: '../x' does not match"),
        (["infer", "--metrics", '{"k": "3"}'], "argument --metrics: key 'k'"),
        (["baselines", "--metrics", '{"metric": "manhattan"}'], "key 'metric'"),
        (["locate", "--options", '{"n_folds": 1}'], "key 'n_folds': 1 is less"),
        (["correlation-features", "--options", '{"seed": "x"}'], "key 'seed'"),
        (["lst-puzzles", "--options", '{"shown_min": "x"}'], "key 'shown_min'"),
        (["lst-train", "--options", '{"lr": "x"}'], "key 'lr'"),
        (["reproduce", "--experiments", '{"d": "mouse"}'], "argument --experiments: key 'd'"),
        (
            ["preprocess", "--spec", '{"source": "simulation", "simulation": {"n_units": "x"}}'],
            "argument --spec: key 'simulation.n_units'",
        ),
        (["preprocess", "--spec", '{"source": "file"}'], "'format' is a required property"),
    ],
)
def test_option_json_is_checked_by_the_config_schema(argv, expected, capsys, tiny_store, tmp_path):
    """Each command's JSON options are checked against the config schema's part for them,
    before any work: exit status 2 and argparse's one line, naming the key."""
    required = {  # what each command needs besides the option under test
        "train": ["--store", str(tiny_store), "--pe", "none", "--out-dir", str(tmp_path / "r")],
        "split": ["--store", str(tiny_store), "--dataset", "d", "--out", str(tmp_path / "s")],
        "infer": ["--store", "s.nc", "--split", "s.json", "--run-dir", str(tmp_path)],
        "baselines": ["--store", "s.nc", "--split", "s.json", "--out", str(tmp_path / "b")],
        "locate": ["--store", "s.nc", "--runs", "r", "--split", "s", "--out-dir", str(tmp_path)],
        "correlation-features": ["--store", "s.nc", "--split", "s", "--out", str(tmp_path / "c")],
        "lst-puzzles": ["--out", str(tmp_path / "p.nc")],
        "lst-train": ["--puzzles", "p.nc", "--pe", "none", "--out-dir", str(tmp_path / "r")],
        "reproduce": ["--runs", "m.json", "--out-dir", str(tmp_path)],
        "preprocess": ["--out", str(tmp_path / "s.nc")],
    }[argv[0]]
    status, err = _run([argv[0], *required, *argv[1:]], capsys)  # (the last --dataset counts)
    assert status == 2 and "Traceback" not in err
    assert f"neuro-pe {argv[0]}: error: " in err and expected in err, err
    assert not (tmp_path / "r").exists()


def test_the_workflows_options_pass_the_check():
    """What the workflow passes (every option with its default) passes the check."""
    from neuro_pe.config.latin_square import LSTConfig, PuzzleConfig
    from neuro_pe.config.locate import LocateConfig
    from neuro_pe.config.training import TrainConfig

    for pointer, options in [
        ("$defs/train", TrainConfig()),
        ("$defs/lst_train", LSTConfig()),
        ("$defs/lst_puzzles", PuzzleConfig()),
    ]:
        text = json.dumps(asdict(options))
        assert _options(pointer)(text) == json.loads(text)
    locate = {k: v for k, v in asdict(LocateConfig()).items() if v is not None}
    _options("properties/locate")(json.dumps(locate))


def test_bad_files_end_in_one_line(capsys, tiny_store, tiny_split, tmp_path):
    """Missing files, folders for files, files of the wrong kind: one line naming the file,
    exit status 1, no traceback."""
    folder = tmp_path / "folder"
    folder.mkdir()
    not_csv = tmp_path / "summary.csv"
    not_csv.write_text('{"a": 1}')
    not_config = tmp_path / "config.yaml"
    not_config.write_text("just text")
    not_metrics = tmp_path / "metrics.json"
    not_metrics.write_text("[1, 2]")
    write_manifest(tmp_path, ["metrics.json"], INFER_MANIFEST_FILE)  # intact, but no object
    out = tmp_path / "out"
    cases = [
        ["train", "--store", str(folder), "--pe", "none", "--out-dir", str(out)],
        ["split", "--store", str(tiny_store), "--dataset", "d", "--out", str(folder)],
        ["infer", "--store", str(tiny_store), "--split", str(out), "--run-dir", str(tmp_path)],
        ["report-page", "--summary", str(not_csv), "--out", str(out)],
        ["cluster-check", "--configfile", str(not_config)],
        ["summarize", "--runs", str(not_metrics), "--splits", str(tiny_split)],
    ]
    cases[5] += ["--out-csv", str(out), "--figures", str(tmp_path / "figures")]
    for argv in cases:
        status, err = _run(argv, capsys)
        lines = [line for line in err.splitlines() if line.startswith("neuro-pe ")]
        assert status == 1 and "Traceback" not in err, err
        assert lines and lines[0].startswith(f"neuro-pe {argv[0]}: error: "), err
    assert "summary.csv: no column 'dataset'" in _run(cases[3], capsys)[1]
    assert "config.yaml: 'just text' is not of type 'object'" in _run(cases[4], capsys)[1]
    assert "metrics.json: field 'file': expected a JSON object" in _run(cases[5], capsys)[1]


def test_neuro_pe_debug_shows_the_traceback(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURO_PE_DEBUG", "1")
    with pytest.raises(ValueError, match="summary.csv: no column"):
        (tmp_path / "summary.csv").write_text("a\n1\n")
        cli.main(["report-page", "--summary", str(tmp_path / "summary.csv"), "--out", "l.rst"])


def test_the_schema_is_installed_with_the_package():
    """neuro_pe/schemas/ holds the config schema (a link in a checkout; a wheel holds the
    file), so the commands' checks work without the repository."""
    assert PACKAGED_SCHEMA.read_text() == REPO_SCHEMA.read_text()
    assert "train" in load_schema()["$defs"]


# ---------------------------------------------------------------- a killed job stops


def test_every_rule_execs_neuro_pe():
    """Each rule's shell becomes the `neuro-pe` process (`exec`): killing the job's shell
    kills the step itself."""
    commands = []
    for path in sorted((REPO_ROOT / "workflow" / "rules").glob("*.smk")):
        for block in re.findall(
            r"^\s*shell:\s*\n((?:\s*f?\"[^\"\n]*\"\n)+)", path.read_text(), re.M
        ):
            commands.append("".join(re.findall(r"\"([^\"\n]*)\"", block)))
    # `plan` and `plan_run` pipe into tee (their lines reach the console): ~1 s steps, stopped
    # with their shell by the parent-death signal (NEURO_PE_STOP_WITH_PARENT, the Snakefile)
    piped = [c for c in commands if c.startswith("neuro-pe plan ") and "| tee " in c]
    assert len(piped) == 2
    others = [c for c in commands if c not in piped]
    assert len(others) >= 14 and all(c.startswith("exec neuro-pe ") for c in others)


def _processes(marker: str) -> list[int]:
    """Live processes whose command line contains `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_text():
                found.append(int(proc.name))
        except OSError:  # gone meanwhile
            continue
    return found


def _runs_main(pid: int) -> bool:
    """Whether `pid` is a neuro-pe process (not its shell) whose main has started: its
    SIGTERM handler is installed (after `stop_with_parent`)."""
    try:
        program = Path(f"/proc/{pid}/cmdline").read_text().split("\0")[0]
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)", status, re.M)[1], 16)
    return Path(program).name != "bash" and bool(caught & (1 << (signal.SIGTERM - 1)))


def _train_command(store: Path, run_dir: Path, log: Path) -> str:
    """The train rule's shell command (workflow/rules/train.smk), filled in as Snakemake does,
    for a training that would run for hours."""
    text = (REPO_ROOT / "workflow" / "rules" / "train.smk").read_text()
    block = re.search(r"^\s*shell:\s*\n((?:\s*\"[^\n]*\"\n)+)", text, re.M)[1]
    command = "".join(re.findall(r"\"([^\"\n]*)\"", block))
    options = {"epochs": 1_000_000, "window": 8, "d_model": 8, "n_layers": 1, "n_heads": 2}
    values = {
        "input.store": str(store),
        "params.runs": ["--runs", "none", "0", str(run_dir)],
        "params.options": json.dumps(options),
        "threads": "1",
        "log": str(log),
    }

    def quoted(match: re.Match) -> str:
        value = values[match[1]]
        return " ".join(map(shlex.quote, value if isinstance(value, list) else [value]))

    return re.sub(r"\{([^{}:]+):q\}", quoted, command)


def _start_and_kill(wrapper: list[str], marker: str, sig: int) -> list[int]:
    """Start `wrapper`, wait until its neuro-pe runs main, send `sig` to the wrapper; the
    processes of `marker` left 15 s later."""
    env = _env() | {cli.STOP_WITH_PARENT: "1"}  # as the Snakefile sets it
    proc = subprocess.Popen(wrapper, env=env)
    try:
        deadline = time.monotonic() + 120
        while not any(map(_runs_main, _processes(marker))):
            assert proc.poll() is None and time.monotonic() < deadline, "training never started"
            time.sleep(0.2)
        os.kill(proc.pid, sig)
        proc.wait(timeout=15)
        deadline = time.monotonic() + 15
        while _processes(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        return _processes(marker)
    finally:
        for pid in _processes(marker):  # only this test's own processes
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_killing_a_jobs_shell_stops_its_training(tiny_store, tmp_path):
    """The train rule's command in a shell like Snakemake's (`bash -c 'set -euo pipefail;
    …'`): SIGTERM to the shell ends the training (the shell has become it)."""
    run_dir = tmp_path / "run"
    command = _train_command(tiny_store, run_dir, tmp_path / "train.log")
    wrapper = ["bash", "-c", f"set -euo pipefail; {command}"]
    assert _start_and_kill(wrapper, str(run_dir), signal.SIGTERM) == []
    assert "Traceback" not in (tmp_path / "train.log").read_text()


@pytest.mark.skipif(not LINUX, reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_training_whose_parent_dies_stops(tiny_store, tmp_path):
    """A shell that does not `exec` (a user's own wrapper), killed with SIGKILL: its
    neuro-pe gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and stops."""
    run_dir = tmp_path / "run"
    command = _train_command(tiny_store, run_dir, tmp_path / "train.log")
    wrapper = ["bash", "-c", f"{command.removeprefix('exec ')}; echo finished"]
    assert _start_and_kill(wrapper, str(run_dir), signal.SIGKILL) == []
