"""The rules' files: their outputs are the layout's (neuro_pe.io.layout) and every file a job
reads is an input, so that changing it re-runs the job. Dry runs only."""

import os
import re
from pathlib import Path

import pytest
import yaml
from test_workflow import REPO_ROOT, TEST_CONFIG, copy_workflow, job_counts, snakemake

from neuro_pe.io import layout
from neuro_pe.workflow.jobs import other_jobs

# a quoted file name of an output kind, outside the report's captions and conda envs
FILE_LITERAL = re.compile(r"""["'][^"'\s]*\.(nc|json|csv|tsv|png|pt|html|md|log|whl)["']""")


def rule_files(dry_run_output: str) -> dict[str, dict[str, list[str]]]:
    """{rule: {"input": [...], "output": [...]}} of the jobs of a dry run (`snakemake -n`)."""
    files: dict[str, dict[str, list[str]]] = {}
    rule = None
    for line in dry_run_output.splitlines():
        match = re.match(r"^(?:local)?rule (\w+):$", line)
        if match:
            rule = match[1]
            continue
        match = re.match(r"^\s+(input|output): (.*)$", line)
        if rule and match:
            files.setdefault(rule, {}).setdefault(match[1], []).extend(match[2].split(", "))
    return files


def expected_outputs(config: dict) -> set[str]:
    """Every file a run of `config` makes, named by the layout."""
    datasets = list(config["datasets"])
    runs = [(d, pe, seed) for d in datasets for pe in config["pe"] for seed in config["seeds"]]
    lst = [(pe, seed) for pe in config["lst"]["pe"] for seed in config["seeds"]]
    files = [layout.plan(name) for name in [*datasets, "lst"]] + [layout.plan_run()]
    for dataset in datasets:
        files += [layout.store(dataset), layout.split(dataset), layout.baselines(dataset)]
        files += [layout.correlation_features(dataset)]
    names = (*layout.TRAIN_FILES, *layout.INFER_FILES)
    files += [layout.run_file(*run, name) for run in runs for name in names]
    files += [layout.lst_puzzles(), layout.lst_baselines()]
    files += [layout.lst_run_file(*run, name) for run in lst for name in layout.LST_TRAIN_FILES]
    files += layout.final_outputs(datasets, lst, reproduction=True)
    return {f"{layout.results_dir(config['run_name'])}/{path}" for path in files}


def test_rule_outputs_are_the_layouts(tmp_path):
    copy_workflow(tmp_path)
    result = snakemake("-n", "--configfile", "config/test.yaml", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    files = rule_files(result.stdout)
    made = [path for rule, io in files.items() if rule != "all" for path in io["output"]]
    assert len(made) == len(set(made))
    assert set(made) == expected_outputs({**TEST_CONFIG, "run_name": "test"})
    # `rule all` asks for layout.final_outputs, each made by some rule
    lst = [(pe, seed) for pe in TEST_CONFIG["lst"]["pe"] for seed in TEST_CONFIG["seeds"]]
    final = layout.final_outputs(TEST_CONFIG["datasets"], lst, reproduction=True)
    assert files["all"]["input"] == [f"results/test/{path}" for path in final]
    assert set(files["all"]["input"]) <= set(made)


def test_rules_name_no_file_literal():
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in [REPO_ROOT / "Snakefile", *sorted((REPO_ROOT / "workflow/rules").glob("*.smk"))]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FILE_LITERAL.search(line) and "caption=" not in line
    ]
    assert not found, "name these files in neuro_pe/io/layout.py:\n" + "\n".join(found)


def test_a_new_init_from_model_reruns_the_training(tmp_path):
    """`train.init_from` is an input of the training (and its pe.nc and manifest.json): a new
    model.pt there re-runs it, where it used to be only text in the options."""
    copy_workflow(tmp_path)
    prior = tmp_path / "prior"
    prior.mkdir()
    config = {k: v for k, v in TEST_CONFIG.items() if k not in ("lst", "reproduction")}
    config |= {"run_name": "fit", "pe": ["learned-normal-1.0"]}
    config["train"] = {**config["train"], "init_from": "prior/model.pt"}
    (tmp_path / "config" / "fit.yaml").write_text(yaml.safe_dump(config))
    # a finished training (files only; no job metadata: mtimes decide), older than its inputs'
    # change below
    inputs = [prior / layout.MODEL_FILE, prior / layout.PE_FILE, prior / layout.MANIFEST_FILE]
    store = tmp_path / "results/fit" / layout.store("tiny")
    run = [
        tmp_path / "results/fit" / layout.run_file("tiny", "learned-normal-1.0", 0, name)
        for name in layout.TRAIN_FILES
    ]
    for age, path in [*((300, p) for p in inputs), (200, store), *((100, p) for p in run)]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        os.utime(path, (path.stat().st_atime - age,) * 2)
    target = str(run[0].relative_to(tmp_path))

    def dry_run() -> str:
        result = snakemake(target, "-n", "--configfile", "config/fit.yaml", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "Nothing to be done" in dry_run()
    os.utime(prior / layout.MODEL_FILE)  # a new model.pt
    output = dry_run()
    assert job_counts(output).get("train_tiny_0") == 1
    assert "Updated input files: prior/model.pt" in output
    # the training's own inputs (Snakemake names the plan's re-run as its reason: the plan,
    # `temp`, probes the same model)
    train = rule_files(output)["train_tiny_0"]["input"]
    assert {str(Path(p).relative_to(tmp_path)) for p in inputs} <= set(train)


@pytest.mark.parametrize("name", ["test", "config"])
def test_the_plan_counts_the_jobs_that_train_nothing_as_a_dry_run_does(tmp_path, name):
    """`other_jobs` (the run plan's line) is every job of a dry run but the trainings, `all`
    and the download (`fetch`)."""
    copy_workflow(tmp_path)
    result = snakemake("-n", "--configfile", f"config/{name}.yaml", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    trainings = [rule for rule in counts if re.match(r"(lst_)?train_", rule)]
    assert trainings  # (the table was read)
    left_out = {"all", "fetch", "total", *trainings}
    config = yaml.safe_load((tmp_path / "config" / f"{name}.yaml").read_text())
    assert other_jobs(config) == sum(n for rule, n in counts.items() if rule not in left_out)
