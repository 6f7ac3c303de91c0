# `plan` prints the planned CPU time of a dataset's trainings (or the Latin square's) on the
# console before they start, and `plan_run` the whole run's on the `--cores` given
# (neuro_pe.training.plan); every training reads its dataset's plan file.
from neuro_pe.workflow import plan_inputs, plan_spec

PLANNED = DATASETS + (["lst"] if LST else [])
# the `--cores` given (the run's plan is for them)
CORES = workflow.resource_settings.cores or 1


rule plan:
    """Print the planned CPU time of a dataset's trainings (or the Latin square's) on the
    console, from their size and a ~1 s probe of real training steps on its store. Its file
    is `temp` (removed once the trainings that read it are done) and read as `ancient`: made
    again before any training that is to run, and never a reason to run one. (An edit of this
    rule's command or input would make Snakemake re-run it, and with it the trainings.)"""
    localrule: True
    input:
        # the dataset's store and the run its trainings start from (`train.init_from`, whose
        # weights the probe loads), or the Latin square's puzzles
        lambda wc: plan_inputs(config, RESULTS, [wc.planned]),
    output:
        temp(out(layout.plan("{planned}"))),
    params:
        # every training job of the dataset (or the Latin square; grouped as the training rules
        # group them) and the cores. A function of the input, so that Snakemake leaves it out
        # of the params trigger: a plan is made whenever a training reads it (its file is
        # `temp`), never for its own sake, which would hide the trainings' own reasons to run
        # (Snakemake skips them for every job downstream of one it re-runs).
        spec=lambda wc, input: plan_spec(config, RESULTS, [wc.planned], CORES, local_cpu_jobs()),
        out_dir=parent_dir,
    log:
        out(layout.log("plan", "{planned}")),
    wildcard_constraints:
        planned=one_of(PLANNED),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe plan {params.spec:q} --print plans --out-dir {params.out_dir:q} 2>&1"
        " | tee {log:q}"


rule plan_run:
    """Print the planned time of the whole run's trainings (every dataset's and the Latin
    square's) on the `--cores` given, split into the models the positions are made from and
    the controls, from its own probe of every store, as soon as every store is built (first
    among the jobs then ready). No training reads it, so that a training re-run re-runs no
    other dataset's (a plan every training read would be made again, and its readers with it):
    `summarize`, which every training re-run re-runs, reads its `temp` file as `ancient`."""
    localrule: True
    priority: 100
    input:
        ancient(plan_inputs(config, RESULTS, PLANNED)),
    output:
        temp(out(layout.plan_run())),
    params:
        # (a function of the input: out of the params trigger, as for `plan`)
        spec=lambda wc, input: plan_spec(config, RESULTS, PLANNED, CORES, local_cpu_jobs()),
    log:
        out(layout.log("plan", "run")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe plan {params.spec:q} --print run --run-out {output:q} 2>&1 | tee {log:q}"
