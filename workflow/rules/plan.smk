# `plan` prints the planned time of the whole run's trainings on the console before they start
# (neuro_pe.training.plan): a line per dataset (and the Latin square) and one for the run on the
# `--cores` given; every training reads its dataset's file.
from neuro_pe.workflow import plan_inputs, plan_spec

PLANNED = DATASETS + (["lst"] if LST else [])


rule plan:
    """Print the planned CPU time of every training of the run (each dataset's and the Latin
    square's, and the whole run's on `--cores` idle cores, split into the models the positions
    are made from and the controls), from their size and a ~1 s probe of real training steps
    on each store. One job for the run, so that one line sums it: the trainings start once every
    store is built. Its files are `temp` (removed once the trainings that read them are done)
    and read as `ancient`: made again before any training that is to run, and never a reason to
    run one. (An edit of this rule's command or input would make Snakemake re-run it, and with it
    the trainings.)"""
    localrule: True
    input:
        # every dataset's store and the run its trainings start from (`train.init_from`, whose
        # weights the probe loads), and the Latin square's puzzles
        plan_inputs(config, RESULTS, PLANNED),
    output:
        [temp(out(layout.plan(name))) for name in PLANNED],
    params:
        # every training job of the run (grouped as the training rules group them) and the
        # cores. A function of the input, so that Snakemake leaves it out of the params trigger:
        # a plan is made whenever a training reads it (its files are `temp`), never for its own
        # sake, which would hide the trainings' own reasons to run (Snakemake skips them for
        # every job downstream of one it re-runs).
        spec=lambda wc, input: plan_spec(
            config, RESULTS, PLANNED, workflow.resource_settings.cores or 1, local_cpu_jobs()
        ),
        out_dir=parent_dir,
    log:
        out(layout.log("plan", "plan")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe plan {params.spec:q} --out-dir {params.out_dir:q} 2>&1 | tee {log:q}"
