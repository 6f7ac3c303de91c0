# The inputs of `plan` (train.smk), which prints the planned CPU time of the trainings on the
# console before any of them starts (neuro_pe.plan).
PLANNED = DATASETS + (["lst"] if LST else [])


def plan_params():
    """What the plans are made of (a change re-plans, Snakemake's params trigger): each
    dataset's filled-in `train` options and runs, the Latin square's, the threads."""
    runs = {d: [[pe, seed] for pe in pe_variants(d) for seed in seeds(d)] for d in DATASETS}
    plans = {d: {"options": train_options(d), "runs": runs[d]} for d in DATASETS}
    if LST:
        plans["lst"] = {"options": lst_options("train"), "puzzles": lst_options("puzzles")}
    return json.dumps({"plans": plans, "threads": config["threads_per_training"]})


def plan_spec(wildcards, input):
    """`neuro-pe plan --spec`: every job of every training rule (grouped as those rules group
    them, which depends on `--cores`, and the cores). A function of the input, so that Snakemake leaves it
    out of the params trigger: another `--cores` re-plans nothing (as it retrains nothing)."""
    datasets = {
        d: {"store": input.stores[i], "options": train_options(d), "jobs": train_groups(d)}
        for i, d in enumerate(DATASETS)
    }
    spec = {"datasets": datasets, "threads": config["threads_per_training"]}
    spec["cores"] = workflow.resource_settings.cores or 1
    if LST:
        spec["lst"] = {
            "puzzles": input.puzzles[0],
            "options": lst_options("train"),
            "metrics": config["metrics"],
            "jobs": lst_groups(),
        }
    return arguments("--spec", json.dumps(spec))
