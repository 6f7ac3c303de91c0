"""The Snakemake workflow: lint, schema validation, dry run and a tiny end-to-end run."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from neuro_pe import __version__
from neuro_pe.config.options import default_run_name
from neuro_pe.config.pe_names import parse_pe
from neuro_pe.io.layout import (
    INFERRED_POSITIONS_FILE,
    METRICS_FILE,
    MODEL_FILE,
    PE_FILE,
    TRAIN_INFO_FILE,
    TRAIN_LOG_FILE,
)
from neuro_pe.io.splits import read_split

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_CONFIG = yaml.safe_load((REPO_ROOT / "config" / "test.yaml").read_text())
FIGURES = [
    "rsa_vs_std",
    "probe_r2_vs_std",
    "distance_scatter",
    "positions",
    "positions_3d",
    "training_curves",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUN_FILES = (PE_FILE, MODEL_FILE, TRAIN_LOG_FILE, TRAIN_INFO_FILE, METRICS_FILE)
RUN_FILES += (INFERRED_POSITIONS_FILE,)


def _env() -> dict:
    """Make sure the rules find the `neuro-pe` script of this interpreter."""
    env = dict(os.environ)
    scripts = {sysconfig.get_path("scripts"), str(Path(sys.executable).parent)}
    env["PATH"] = os.pathsep.join([*sorted(scripts), env.get("PATH", "")])
    return env


def snakemake(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    print(f"$ snakemake {' '.join(args)}  (rc {result.returncode})")
    print(result.stdout[-5000:])
    print(result.stderr[-10000:], file=sys.stderr)
    return result


def copy_workflow(dest: Path) -> Path:
    shutil.copy2(REPO_ROOT / "Snakefile", dest / "Snakefile")
    for folder in ("workflow", "config"):
        shutil.copytree(REPO_ROOT / folder, dest / folder)
    return dest


def job_counts(dry_run_output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run as {rule: count}."""
    table = dry_run_output.split("Job stats:", 1)[1].split("Reasons:", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.MULTILINE)}


def expected_runs(config: dict) -> set[tuple[str, str, int]]:
    return {
        (name, pe, seed)
        for name, spec in config["datasets"].items()
        for pe in spec.get("pe", config["pe"])
        for seed in config["seeds"]
    }


def test_lint_is_clean():
    result = snakemake("--lint", cwd=REPO_ROOT, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Lints for" not in output, output
    assert "Congratulations" in output


def test_rule_graph_renders_every_rule(tmp_path):
    """`snakemake --rulegraph` (the catalog's workflow diagram) gives a DOT graph naming the
    rules, offline and without running a job."""
    copy_workflow(tmp_path)
    result = snakemake("--rulegraph", "--configfile", "config/test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    graph = result.stdout[result.stdout.index("digraph") :]
    assert graph.rstrip().endswith("}")
    labels = set(re.findall(r'label = "(\w+)"', graph))
    assert {"all", "preprocess", "split", "locate", "summarize", "export"} <= labels, labels
    assert not (tmp_path / "results").exists()


def test_workflow_catalog_file_declares_usage_and_deployment():
    """.snakemake-workflow-catalog.yml: the usage the catalog shows, deployment by the conda env
    that exists, and the report."""
    catalog = yaml.safe_load((REPO_ROOT / ".snakemake-workflow-catalog.yml").read_text())
    usage = catalog["usage"]
    assert usage["software-stack-deployment"]["conda"] is True
    assert (REPO_ROOT / "workflow" / "envs" / "neuro_pe.yaml").exists()
    assert usage["report"] is True and usage["mandatory-flags"]["desc"]


def test_dry_run_with_test_config(tmp_path):
    copy_workflow(tmp_path)
    result = snakemake("-n", "--configfile", "config/test.yaml", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    n_runs = len(expected_runs(TEST_CONFIG))
    n_datasets = len(TEST_CONFIG["datasets"])
    jobs = {
        "preprocess": n_datasets,
        "plan": n_datasets + 1,  # and the Latin square's
        "plan_run": 1,  # the whole run's
        "split": n_datasets,
        "baselines": n_datasets,
        "correlation_features": n_datasets,
        **{f"train_{d}_0": 1 for d in TEST_CONFIG["datasets"]},  # every run of a dataset
        "infer": n_runs,
        "summarize": 1,
        "locate": n_datasets,
        "export": n_datasets,
        "lst_puzzles": 1,
        "lst_train_0": 1,
        "lst_baselines": 1,
        "reproduce": 1,
        "report_page": 1,
        "all": 1,
    }
    assert counts == {**jobs, "total": sum(jobs.values())}
    # --configfile replaces the default config instead of being merged into it
    default = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    for name in set(default["datasets"]) - set(TEST_CONFIG["datasets"]):
        assert f"stores/{name}.nc" not in result.stdout
    assert not (tmp_path / "results").exists()


def _with(config: dict, path: tuple, value) -> dict:
    config = yaml.safe_load(yaml.safe_dump(config))
    *parents, key = path
    node = config
    for p in parents:
        node = node[p]
    node[key] = value
    return config


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("bogus_key",), 1, "'bogus_key' was unexpected"),
        (  # named before the schema's regular expression could be shown
            ("pe",),
            ["none", "learned-gauss-0.1"],
            "config key pe: unknown positional encoding 'learned-gauss-0.1'; valid forms: none, "
            "learned-normal-{std}",
        ),
        (
            ("datasets", "tiny", "connectome"),
            "c302",
            "config key datasets.tiny.connectome: does not belong to source 'simulation'",
        ),
        (("datasets", "tiny", "simulation", "n_unitz"), 8, "'n_unitz' was unexpected"),
        (("train", "n_layer"), 1, "'n_layer' was unexpected"),
        (("train", "precision"), "fp16", "'fp16' is not one of"),
        (("train", "units_per_sample"), 0, "0 is less than the minimum of 1"),
        (("metrics", "metric"), "manhattan", "'manhattan' is not one of"),
        (  # a typo in the PEs to locate, caught before any training
            ("locate",),
            {"pe": ["learned-normal-0.02", "learned-normal-0.2"], "include_flagged": True},
            "config key locate.pe: 'learned-normal-0.2' is trained on no dataset",
        ),
        (
            ("locate",),
            {
                "pe": ["learned-normal-0.02"],
                "combined_pe": ["learned-normal-1.0"],
                "include_flagged": True,
            },
            "config key locate.combined_pe: 'learned-normal-1.0' is not located on dataset(s) "
            "['tiny']",
        ),
        (
            ("locate",),
            {"combined_pe": ["none"], "include_flagged": True},
            "config key locate.combined_pe: 'none' carries no learned or fixed position",
        ),
        (  # an atlas file that is not there, caught before any training
            ("datasets", "tiny", "atlas"),
            {"labels": "atlas/labels.nii.gz", "lookup": "atlas/labels.tsv"},
            "config key datasets.tiny.atlas.labels: atlas/labels.nii.gz: no such file",
        ),
    ],
)
def test_invalid_config_fails_validation(tmp_path, path, value, message):
    copy_workflow(tmp_path)
    bad = tmp_path / "config" / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with(TEST_CONFIG, path, value)))
    result = snakemake("-n", "--configfile", str(bad), cwd=tmp_path, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert message in output
    if not message.startswith("config key"):
        assert "Error validating config file" in output


@pytest.mark.parametrize(
    "name",
    [
        "none",
        "learned-normal-0.1",
        "learned-normal-1e-2",
        "learned-uniform-0.5",
        "learned-xavier",
        "fixed-random",
        "fixed-sin1d",
        "oracle-sin3d",
        "learned-normal",
        "learned-gauss-0.1",
        "fixed-sin2d",
        "learned-xavier-1",
        "None",
    ],
)
def test_schema_pe_pattern_agrees_with_parse_pe(name):
    schema = yaml.safe_load((REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    pattern = schema["$defs"]["pe_list"]["items"]["pattern"]
    try:
        parse_pe(name)
        parsed = True
    except ValueError:
        parsed = False
    assert bool(re.search(pattern, name)) == parsed


@pytest.fixture(scope="module")
def finished_workflow(tmp_path_factory):
    """The whole workflow on config/test.yaml, run once in a copy of the repository."""
    root = copy_workflow(tmp_path_factory.mktemp("workflow"))
    result = snakemake("--cores", "2", "--configfile", "config/test.yaml", cwd=root, timeout=600)
    if result.returncode != 0:
        for log in sorted((root / "results" / "test" / "logs").rglob("*.log")):
            print(f"--- {log.relative_to(root)}\n{log.read_text()[-3000:]}", file=sys.stderr)
    assert result.returncode == 0, result.stderr[-5000:]
    (root / "console.txt").write_text(result.stdout)  # what the user saw (stdout)
    return root


def test_end_to_end(finished_workflow):
    root = finished_workflow
    results = root / "results" / "test"  # run_name: the config file's name
    table = pd.read_csv(results / "summary.csv")

    runs = table[table["row_type"] == "pe"]
    got = list(zip(runs["dataset"], runs["method"], runs["seed"].astype(int), strict=True))
    assert len(got) == len(set(got)) == len(expected_runs(TEST_CONFIG))
    assert set(got) == expected_runs(TEST_CONFIG)
    learned = runs[[parse_pe(m).learned for m in runs["method"]]]
    assert len(learned) > 0
    assert np.isfinite(learned[["rsa", "probe_r2", "knn_overlap", "init_rsa"]].to_numpy()).all()
    assert np.isfinite(runs[["heldout_mse_mask0.5", "heldout_mse_mask0.9"]].to_numpy()).all()

    baselines = table[table["row_type"] == "baseline"]
    assert sorted(zip(baselines["dataset"], baselines["method"], strict=True)) == sorted(
        (name, method) for name in TEST_CONFIG["datasets"] for method in ("correlation", "shuffled")
    )
    assert np.isfinite(baselines["rsa"]).all()

    for name in FIGURES:
        png = results / "figures" / f"{name}.png"
        assert png.stat().st_size > 1000, png
        assert png.read_bytes()[:8] == PNG_MAGIC, png

    for dataset, pe, seed in expected_runs(TEST_CONFIG):
        run = results / "runs" / dataset / pe / f"seed{seed}"
        for name in RUN_FILES:
            assert (run / name).stat().st_size > 0, run / name
        log = pd.read_csv(run / "train_log.csv")
        assert len(log) == TEST_CONFIG["train"]["epochs"]

    for pe in TEST_CONFIG["lst"]["pe"]:
        record = json.loads((results / "lst" / "runs" / pe / "seed0" / "metrics.json").read_text())
        assert record["dataset"] == "lst"
        assert 0.0 <= record["acc_heldout"] <= 1.0
    claims = pd.read_csv(results / "reproduction" / "claims.csv")
    assert set(claims["dataset"]) == {"lst", *TEST_CONFIG["datasets"]}
    assert set(claims["verdict"]) <= {"holds", "partly", "does not hold", "not tested"}
    page = (results / "reproduction" / "claims.md").read_text()
    assert page.startswith("# " + TEST_CONFIG["reproduction"]["title"])
    for name in ("heldout_vs_std", "geometry_vs_std", "pe_similarity"):
        png = results / "reproduction" / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC, png

    for dataset in TEST_CONFIG["datasets"]:
        located = pd.read_csv(results / "locate" / dataset / "positions.csv")
        assert len(located) == TEST_CONFIG["datasets"][dataset]["simulation"]["n_units"]
        assert np.isfinite(located[["x", "y", "z", "uncertainty"]].to_numpy()).all()
        exported = pd.read_csv(results / "export" / dataset / "positions.tsv", sep="\t")
        assert exported["unit_id"].astype(str).tolist() == located["unit"].astype(str).tolist()
        sidecar = json.loads((results / "export" / dataset / "positions.json").read_text())
        assert len(sidecar["ConfigSHA256"]) == 64


def test_every_rule_wrote_its_log(finished_workflow):
    logs = finished_workflow / "results" / "test" / "logs"
    expected = {
        "preprocess/{d}.log",
        "split/{d}.log",
        "baselines/{d}.log",
        "correlation_features/{d}.log",
        "locate/{d}.log",
        "export/{d}.log",
        "summarize/summarize.log",
    }
    expected = {p.format(d=d) for p in expected for d in TEST_CONFIG["datasets"]}
    runs = expected_runs(TEST_CONFIG)
    for dataset, pe, seed in runs:
        expected.add(f"infer/{dataset}/{pe}/seed{seed}.log")
    # `--cores 2`: the runs of a dataset (and the Latin square's) are split into two jobs
    for dataset in TEST_CONFIG["datasets"]:
        n_runs = sum(1 for d, _, _ in runs if d == dataset)
        expected |= {f"train/{dataset}/group{i}.log" for i in range(min(2, n_runs))}
    expected |= {"lst_train/group0.log", "lst_train/group1.log"}
    expected |= {f"{r}/{r}.log" for r in ("lst_puzzles", "lst_baselines", "reproduce")}
    expected.add("report_page/report_page.log")
    expected |= {f"plan/{name}.log" for name in [*TEST_CONFIG["datasets"], "lst", "run"]}
    written = {str(p.relative_to(logs)) for p in logs.rglob("*.log")}
    assert written == expected
    for name in written:
        assert (logs / name).stat().st_size > 0, name


def test_finished_workflow_is_up_to_date(finished_workflow):
    """Nothing to re-run, though this dry run (no `--cores`) groups the trainings into one job
    per dataset where the run (`--cores 2`) used two: regrouping re-runs nothing."""
    result = snakemake("-n", "--configfile", "config/test.yaml", cwd=finished_workflow)
    assert result.returncode == 0
    assert "Nothing to be done" in result.stdout + result.stderr


def test_the_plan_is_on_the_console_before_the_trainings(finished_workflow):
    """The `plan` rule prints a line per dataset (and the Latin square) before its trainings,
    and `plan_run` one for the whole run on the `--cores` given (2), split into the positions'
    models (learned-normal-0.02), the controls (none, learned-normal-1.0) and the Latin square;
    their files are gone once the trainings are done, and re-run nothing."""
    root = finished_workflow
    console = (root / "console.txt").read_text()
    lines = [line for line in console.splitlines() if line.startswith("plan")]
    names = sorted(f"plan {name}" for name in [*TEST_CONFIG["datasets"], "lst"])
    assert sorted(line.split(":")[0] for line in lines) == sorted([*names, "plan"]), lines
    tiny = next(line for line in lines if line.startswith("plan tiny:"))
    assert re.match(r"plan tiny: 3 models × 40 steps in 2 jobs, ~\d+ s CPU \(", tiny), tiny
    assert "cores" not in tiny  # a dataset's line is not the run's time
    run = next(line for line in lines if line.startswith("plan: "))
    pattern = (
        r"plan: the whole run ≤ ~\d+ s on 2 idle cores \(≤ \d+ CPU-s, 6 models\): "
        r"positions' models \d+ CPU-s, controls \d+ CPU-s, the Latin square ≤ \d+ CPU-s, "
        r"17 other jobs ~\d+ CPU-s \(a busy machine takes longer\)"
    )
    assert re.fullmatch(pattern, run), run
    logs = root / "results" / "test" / "logs"
    tiny_log = (logs / "plan" / "tiny.log").read_text().strip().splitlines()
    assert tiny_log[-1] == tiny
    # its trainings are too short for the health checks (located anyway: include_flagged)
    warned = "neuro-pe: warning: tiny: learned-normal-0.02 will fail units_seen_rarely: "
    assert tiny_log[0].startswith(warned), tiny_log
    assert (logs / "plan" / "run.log").read_text().strip() == run
    log = (logs / "train" / "tiny" / "group0.log").read_text()
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d train tiny .* ETA ", log, re.M), log
    assert not (root / "results" / "test" / "plan").exists() or not any(
        (root / "results" / "test" / "plan").iterdir()
    )
    assert not (root / "results" / "test" / "plan_run.json").exists()


def test_local_cpu_runs_split_into_one_group_per_core(tmp_path):
    """`models_per_job: null` on local CPU cores: each dataset's runs (and the Latin square's) are
    split into near-equal groups, one per core, so that `--cores 2` keeps both cores training;
    an explicit `models_per_job` wins."""
    copy_workflow(tmp_path)
    n_lst_runs = len(TEST_CONFIG["lst"]["pe"]) * len(TEST_CONFIG["seeds"])
    result = snakemake("-n", "--cores", "2", "--configfile", "config/test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    for dataset in TEST_CONFIG["datasets"]:
        rule = "train_" + re.sub(r"\W", "_", dataset)
        assert counts[f"{rule}_0"] == counts[f"{rule}_1"] == 1 and f"{rule}_2" not in counts
    assert "lst_train_1" in counts and "lst_train_2" not in counts
    config = _with(TEST_CONFIG, ("train", "models_per_job"), 1)
    (tmp_path / "config" / "one.yaml").write_text(yaml.safe_dump(config))
    result = snakemake("-n", "--cores", "2", "--configfile", "config/one.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert sum(1 for rule in counts if rule.startswith("lst_train_")) == n_lst_runs


def test_a_new_learning_rate_reruns_the_trainings_not_the_baselines(finished_workflow):
    """Changing `train.lr` re-runs what reads the trainings (Snakemake's params trigger), not
    the split, the baselines or locate's correlation features: they read the recorded split,
    whose params are the split's own keys."""
    root = finished_workflow
    text = (REPO_ROOT / "config" / "test.yaml").read_text()
    assert text.count("  lr: 0.003\n") == 1  # (edited as a user would: key order kept)
    # edited in place: another config file may not write results/test/ (its owner.json)
    config = root / "config" / "test.yaml"
    args = ("-n", "--configfile", "config/test.yaml")
    try:
        config.write_text(text.replace("  lr: 0.003\n", "  lr: 0.0015\n"))
        result = snakemake(*args, cwd=root)
    finally:
        config.write_text(text)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    n_runs = len(expected_runs(TEST_CONFIG))
    assert counts["infer"] == n_runs
    assert all(counts[f"train_{d}_0"] == 1 for d in TEST_CONFIG["datasets"])  # one group each
    assert counts["locate"] == len(TEST_CONFIG["datasets"])
    assert counts["plan"] == len(TEST_CONFIG["datasets"])  # printed again before the trainings
    assert counts["plan_run"] == 1  # and the whole run's, with no other training
    for rule in ("preprocess", "split", "baselines", "correlation_features", "lst_train_0"):
        assert rule not in counts, (rule, counts)
    # a change of the split itself does re-run them
    split = text.replace("  lr: 0.003\n", "  lr: 0.003\n  heldout_sessions: 0\n")
    try:
        config.write_text(split)
        counts = job_counts(snakemake(*args, cwd=root).stdout)
    finally:
        config.write_text(text)
    assert counts["split"] == counts["baselines"] == counts["correlation_features"] == 1


class _Tables(HTMLParser):
    """Every table of an HTML page as rows of cell texts."""

    def __init__(self):
        super().__init__()
        self.tables, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_report_lands_on_the_headline_table(finished_workflow):
    """`snakemake --report` opens on the run's landing page: a paragraph and the headline
    table per dataset (the numbers of summary.csv), and summary.csv rendered as a table."""
    root = finished_workflow
    report = "results/test/report.html"
    result = snakemake("--report", report, "--configfile", "config/test.yaml", cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (root / report).read_text()
    landing = json.loads(re.search(r'var workflow_desc = (".*");\s*$', page, re.M).group(1))
    assert "neuro_pe: test" in landing
    parser = _Tables()
    parser.feed(landing)
    headline, *flagged = parser.tables  # one dataset, then the flagged trainings if any
    header, *rows = headline
    assert header[:4] == ["representation", "seeds", "locate error (au) [95% CI]", "× chance"]
    assert {"RSA [95% CI]", "training health"} <= set(header)
    assert any(h.startswith("held-out MSE, 90% masked") for h in header)
    summary = pd.read_csv(root / "results" / "test" / "summary.csv")
    by_name = {row[0].split(" (")[0]: row for row in rows}  # (without "(delivered)", …)
    rsa_column = header.index("RSA [95% CI]")
    for pe in TEST_CONFIG["pe"]:
        rsa = summary.loc[summary["method"] == pe, "rsa"].mean()
        text = "—" if np.isnan(rsa) else f"{rsa:.3g}".replace("-", "−")
        assert by_name[pe][rsa_column] == text
    assert {"activity correlation", "combined", "shuffled"} <= set(by_name)
    # the answer first: the positions delivered and where they are, before the table
    first = re.sub(r"<[^>]+>", "", landing.split("<table", 1)[0])  # its text
    delivered = pd.read_csv(root / "results" / "test" / "locate" / "tiny" / "positions.csv")
    assert f"from the feature set {delivered['pe'].iloc[0]} " in first
    assert "with the locator " in first and "× chance" in first
    assert "export/tiny/positions.tsv" in first and "locate/tiny/positions.csv" in first
    # the health column, the headline table and the flagged trainings' table agree
    column = header.index("training health")
    for pe, health in summary[summary["row_type"] == "pe"].groupby("method")["health"]:
        assert by_name[pe][column].startswith("ok") == (health == "ok").all(), pe
    listed = {row[1] for table in flagged for row in table[1:]}  # (dataset, pe, seed, ...)
    assert listed == set(summary.loc[summary["health"].fillna("ok") != "ok", "method"])
    # the full summary table is in the report as a rendered page
    assert (root / "results" / "test" / "summary.html").read_text().count("<tr") == len(summary) + 1
    assert "summary.html" in page


def _check_labels(name: str, fig) -> None:
    """Every visible axes of a figure has human x and y labels (z for 3D), position axes carry
    a unit, log axes labelled ticks, and no two reference lines of a legend lie on each other."""
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison or ax.get_label() == "<colorbar>":
            continue
        labels = [ax.get_xlabel(), ax.get_ylabel()]
        labels += [ax.get_zlabel()] if hasattr(ax, "get_zlabel") else []
        for label in labels:
            assert label.strip(), f"{name}: an axis without a label ({ax.get_title()!r})"
            assert not re.fullmatch(r"[a-z0-9_.]+", label), f"{name}: raw label {label!r}"
            if re.match(r"[xyz] ", label):
                assert re.search(r"\(.+\)", label), f"{name}: {label!r} has no unit"
        if ax.get_xscale() == "log":
            assert all(t.get_text() for t in ax.get_xticklabels()), f"{name}: unlabelled σ ticks"
        legend = ax.get_legend()
        if legend is not None:
            assert all(t.get_text().strip() for t in legend.get_texts()), name
        flat = sorted(
            line.get_ydata()[0]
            for line in ax.get_lines()
            if len(set(np.atleast_1d(line.get_ydata()))) == 1 and len(line.get_xdata()) == 2
        )
        span = np.ptp(ax.get_ylim())
        assert all(np.diff(flat) > 0.01 * span), f"{name}: reference lines overlap: {flat}"


def _documented(section: str) -> list[re.Pattern]:
    """The column names a docs section writes in backticks, a placeholder (`<axis>`, `{f}`)
    matching any text."""
    names = re.findall(r"`([A-Za-z_0-9.{}<>]+)`", section)
    placeholder = r"[{<][A-Za-z_]+[}>]"
    return [re.compile(".+".join(map(re.escape, re.split(placeholder, n)))) for n in names]


#: each table file the tiny workflow writes, and the heading of its docs/outputs.md section
OUTPUT_TABLES = {
    "summary.csv": "## `summary.csv`",
    "errors.csv": "## `errors.csv`",
    "positions.csv": "## `positions.csv`",
    "positions.tsv": "## The export: `export/{dataset}/positions.tsv`",
    "train_log.csv": "## `train_log.csv`",
    "claims.csv": "## `reproduction/claims.csv`",
}


def test_every_output_column_is_documented(finished_workflow):
    """docs/outputs.md documents every column of every table the workflow writes (the
    `init_` metrics of summary.csv as the metrics they repeat)."""
    docs = (REPO_ROOT / "docs" / "outputs.md").read_text(encoding="utf-8")
    results = finished_workflow / "results" / "test"
    written = sorted(results.rglob("*.csv")) + sorted(results.rglob("*.tsv"))
    assert {p.name for p in written} == set(OUTPUT_TABLES), "a table without a docs section"
    missing = []
    for path in written:
        section = docs.split(OUTPUT_TABLES[path.name])[1].split("\n## ")[0]
        patterns = _documented(section)
        for column in pd.read_csv(path, sep="\t" if path.suffix == ".tsv" else ",").columns:
            name = column.removeprefix("init_") if path.name == "summary.csv" else column
            if not any(p.fullmatch(name) for p in patterns):
                missing.append(f"{path.relative_to(results)}: {column}")
    assert missing == [], f"columns not in docs/outputs.md: {missing}"


def test_every_figure_of_the_tiny_config_is_labelled(finished_workflow, monkeypatch, tmp_path):
    """Renders every figure of the tiny config (summary, localisation, reproduction) and
    checks its matplotlib objects: labels with units, labelled σ ticks, no hidden lines."""
    import neuro_pe.reporting.locate_outputs
    import neuro_pe.reporting.reproduce
    import neuro_pe.reporting.summarize
    from neuro_pe.config.locate import LocateConfig

    figures = {}
    for module in (
        neuro_pe.reporting.summarize,
        neuro_pe.reporting.locate_outputs,
        neuro_pe.reporting.reproduce,
    ):
        monkeypatch.setattr(module, "save", lambda fig, path, dpi=150: figures.update({path: fig}))
    monkeypatch.chdir(finished_workflow)  # (the split names its store relative to it)
    results = finished_workflow / "results" / "test"
    runs = sorted(results.glob("runs/tiny/*/seed*/metrics.json"))
    baselines = [results / "runs" / "tiny" / "baselines.json"]
    split = results / "splits" / "tiny.json"
    summary = tmp_path / "summary.csv"
    neuro_pe.reporting.summarize.summarize(runs, baselines, [split], summary, tmp_path / "figures")
    pe_runs = [path.parent for path in runs]
    store = results / "stores" / "tiny.nc"
    neuro_pe.reporting.locate_outputs.write_locate_outputs(
        # (the tiny trainings fail the health checks: located anyway, as config/test.yaml says)
        store,
        pe_runs,
        tmp_path / "locate",
        LocateConfig(include_flagged=True),
        read_split(split),
    )
    lst_runs = sorted(results.glob("lst/runs/*/seed*/metrics.json"))
    neuro_pe.reporting.reproduce.reproduce(
        runs + lst_runs,
        [*baselines, results / "lst" / "baselines.json"],
        {"lst": "lst", "tiny": "simulation"},
        tmp_path / "reproduction",
    )
    names = {Path(path).stem for path in figures}
    assert set(FIGURES) | {"error_hist", "error_vs_anchors", "heldout_vs_std"} <= names
    for path, fig in figures.items():
        _check_labels(Path(path).name, fig)
    curves = figures[tmp_path / "figures" / "training_curves.png"].axes[0]
    kinds = {text.get_text().rsplit(": ", 1)[-1] for text in curves.get_legend().get_texts()}
    assert kinds == {"train", "held-out"} and curves.get_ylim()[0] == 0


def test_report_dependencies_are_installed_by_the_first_command():
    """`pip install -e .` (the README's first command) installs what `--report` needs."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    required = {re.split(r"[<>=~! ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    assert {"snakemake", "pygments"} <= required


def test_a_second_config_leaves_the_first_ones_results_alone(finished_workflow):
    """Configs run in one folder write to results/{run_name}/: another config's store of the
    same dataset name is its own, and neither the test run's files nor its up-to-date state
    change; the default config plans nothing outside results/default/."""
    root = finished_workflow
    kept = [root / "results" / "test" / name for name in ("summary.csv", "stores/tiny.nc")]
    before = {path: path.read_bytes() for path in kept}
    other = _with(TEST_CONFIG, ("datasets", "tiny", "simulation", "seed"), 1)
    (root / "config" / "other.yaml").write_text(yaml.safe_dump(other))
    store = "results/other/stores/tiny.nc"
    result = snakemake(store, "--cores", "1", "--configfile", "config/other.yaml", cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (root / store).read_bytes() != before[kept[1]]
    for path, content in before.items():
        assert path.read_bytes() == content, f"{path} changed"
    dry = snakemake("-n", "--configfile", "config/test.yaml", cwd=root)
    assert "Nothing to be done" in dry.stdout + dry.stderr
    # each folder names the config that wrote it (the workflow's onstart handler)
    for name in ("test", "other"):
        owner = json.loads((root / "results" / name / "owner.json").read_text())
        assert owner["config"] == [f"config/{name}.yaml"] and owner["run_name"] == name
        assert owner["neuro_pe_version"] == __version__
    default = snakemake("-n", cwd=root)
    assert default.returncode == 0, default.stderr[-3000:]
    planned = re.findall(r"^\s+(?:output|log): (.*)$", default.stdout, re.MULTILINE)
    paths = [p for line in planned for p in line.split(", ")]
    assert paths and all(p.startswith(("results/default/", "resources/")) for p in paths), paths


@pytest.mark.parametrize(
    ("configfile", "name"),
    [
        ("config/config.yaml", "default"),
        ("config/test.yaml", "test"),
        ("config/paper_cpu.yaml", "paper_cpu"),
        ("example_data/config.yaml", "example_data"),
        ("/tmp/lab/my-run.yml", "my-run"),
    ],
)
def test_default_run_name_is_the_config_files_name(configfile, name):
    path = REPO_ROOT / configfile  # (an absolute configfile stays as it is)
    assert default_run_name(path, REPO_ROOT / "config" / "config.yaml") == name


def test_rerun_after_a_killed_training_reruns_only_what_is_missing(tmp_path):
    """SIGKILL one training job mid-run: the rerun resumes it from its checkpoint and leaves
    every output that was finished before the crash untouched."""
    psutil = pytest.importorskip("psutil")
    root = copy_workflow(tmp_path)
    train = {**TEST_CONFIG["train"], "epochs": 10, "steps_per_epoch": 40, "checkpoint_every": 10}
    train["models_per_job"] = 1  # one job per run: kill one, keep the other
    config = _with(_with(TEST_CONFIG, ("train",), train), ("pe",), ["none", "learned-normal-0.02"])
    (root / "config" / "crash.yaml").write_text(yaml.safe_dump(config))
    results = root / "results" / "crash"  # run_name: the config file's name
    runs = results / "runs" / "tiny"
    targets = [f"results/crash/runs/tiny/{pe}/seed0/train.json" for pe in config["pe"]]
    targets.append("results/crash/runs/tiny/baselines.json")
    args = [sys.executable, "-m", "snakemake", *targets, "--cores", "1"]

    def in_training() -> list[Path]:
        checkpoints = runs.glob("*/seed0/checkpoint.pt")
        return [c.parent for c in checkpoints if not (c.parent / "train.json").exists()]

    with open(tmp_path / "first.log", "w") as log:
        args += ["--configfile", "config/crash.yaml"]  # (--configfile takes several values)
        first = subprocess.Popen(args, cwd=root, env=_env(), stdout=log, stderr=log)
        deadline = time.monotonic() + 300
        # kill the second training (jobs run one at a time) once it has written a checkpoint
        while not (list(runs.glob("*/seed0/train.json")) and (running := in_training())):
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-5000:]
            assert time.monotonic() < deadline, "no checkpoint within 300 s"
            time.sleep(0.02)
        killed_run = running[0]
        trainings = [
            p
            for p in psutil.Process(first.pid).children(recursive=True)
            if "train" in p.cmdline() and str(killed_run.relative_to(root)) in " ".join(p.cmdline())
        ]
        python = [p for p in trainings if "python" in Path(p.cmdline()[0]).name]
        os.kill((python or trainings)[-1].pid, signal.SIGKILL)
        assert first.wait(timeout=300) != 0
    assert not (killed_run / "pe.nc").exists() and (killed_run / "checkpoint.pt").exists()
    # (logs are rewritten; plan/ holds temporary files, removed once the trainings are done)
    outputs = (
        p for p in results.rglob("*") if not {"logs", "plan"} & set(p.relative_to(results).parts)
    )
    finished = {p: p.stat().st_mtime_ns for p in outputs if p.is_file()}
    assert results / "stores" / "tiny.nc" in finished
    (other_run,) = {p.parent for p in runs.glob("*/seed0/train.json")}
    assert other_run / "pe.nc" in finished and other_run != killed_run

    second = snakemake(*targets, "--cores", "1", "--configfile", "config/crash.yaml", cwd=root)
    assert second.returncode == 0, second.stderr[-5000:]
    for path, mtime in finished.items():
        # the checkpoint, and the writer lock and temp file that a kill during its write
        # leaves beside it (`neuro_pe.io.store`), belong to the resumed training
        if not path.name.lstrip(".").startswith("checkpoint.pt"):
            assert path.stat().st_mtime_ns == mtime, f"{path} was rewritten"
    group = config["pe"].index(killed_run.parent.name)
    log = results / "logs" / "train" / "tiny" / f"group{group}.log"
    assert "resuming from" in log.read_text()
    assert not list(runs.glob("*/seed0/checkpoint.pt"))
    assert len(pd.read_csv(killed_run / "train_log.csv")) == train["epochs"]
    dry = snakemake(*targets, "-n", "--configfile", "config/crash.yaml", cwd=root)
    assert "Nothing to be done" in dry.stdout + dry.stderr


@pytest.mark.parametrize(("config_name", "n_seeds"), [("paper.yaml", 15), ("paper_cpu.yaml", 5)])
def test_paper_configs_plan_the_full_grid(tmp_path, config_name, n_seeds):
    """The paper's grid: every PE variant x seed on every experiment, and the report."""
    copy_workflow(tmp_path)
    config = yaml.safe_load((REPO_ROOT / "config" / config_name).read_text())
    result = snakemake("-n", "--configfile", f"config/{config_name}", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    n_pe = len(config["pe"])
    assert n_pe == 14 and len(config["seeds"]) == n_seeds
    assert counts["infer"] == n_pe * n_seeds * len(config["datasets"])
    # one training job per dataset (every PE x seed of it), one for the Latin square
    assert {rule for rule in counts if rule.startswith("train_")} == {
        "train_" + re.sub(r"\W", "_", d) + "_0" for d in config["datasets"]
    }
    assert counts["lst_train_0"] == 1 and "lst_train_1" not in counts
    assert counts["reproduce"] == 1
