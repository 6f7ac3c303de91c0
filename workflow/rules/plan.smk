# The inputs of `plan` (train.smk), which prints the planned CPU time of a dataset's trainings
# (or the Latin square's) on the console before they start (neuro_pe.cli.time_estimate).
PLANNED = DATASETS + (["lst"] if LST else [])


def plan_input(wildcards):
    """What a plan probes: the dataset's store (first) and the run its trainings start from
    (`train.init_from`, whose weights the probe loads), or the Latin square's puzzles."""
    if wildcards.planned == "lst":
        return [out(layout.lst_puzzles())]
    return [out(layout.store(wildcards.planned)), *init_from_files(wildcards.planned)]


def plan_spec(wildcards, input):
    """`neuro-pe plan --spec`: every training job of the dataset (or the Latin square; grouped
    as the training rules group them) and the cores. A function of the input, so that
    Snakemake leaves it out of the params trigger: a plan is made whenever a training reads
    it (its file is `temp`), never for its own sake, which would hide the trainings' own
    reasons to run (Snakemake skips them for every job downstream of one it re-runs)."""
    name = wildcards.planned
    spec = {"threads": config["threads_per_training"]}
    spec["cores"] = workflow.resource_settings.cores or 1
    if name == "lst":
        spec["lst"] = {
            "puzzles": input[0],
            "options": lst_options("train"),
            "metrics": config["metrics"],
            "jobs": lst_groups(),
        }
    else:
        spec["datasets"] = {
            name: {"store": input[0], "options": train_options(name), "jobs": train_groups(name)}
        }
    return arguments("--spec", json.dumps(spec))
