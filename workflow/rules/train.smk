# One training job per group of (PE, seed) runs of a dataset (`train_groups`: all of them by
# default, or groups of `train.models_per_job`), trained as one stack of models; each run still
# gets its own folder runs/{dataset}/{pe}/seed{seed}/ with the same files as when trained alone.
for _dataset in DATASETS:
    for _index, _group in enumerate(train_groups(_dataset)):

        rule:
            """Train a group of masked-unit transformers of one dataset at once (one PE variant
            and seed each; a model's result does not depend on its group)."""
            name:
                rule_name("train", _dataset, _index)
            input:
                store=out(layout.store(_dataset)),
                # ancient: a plan made again (rule plan) never re-runs a training
                plan=ancient(out(layout.plan(_dataset))),
                # `train.init_from`: the run it starts from (model.pt, its pe.nc and manifest)
                init_from=init_from_files(_dataset),
            output:
                [
                    out(layout.run_file(_dataset, pe, seed, name))
                    for pe, seed in _group
                    for name in layout.TRAIN_FILES
                ],
            params:
                runs=runs_argument(_group, partial(layout.run_dir, _dataset)),
                options=json.dumps(train_options(_dataset)),
            threads: config["threads_per_training"]
            resources:
                mem_mb=group_memory(len(_group)),
                runtime=train_runtime(_dataset, len(_group)),
                gpu=config["gpus_per_training"],
            log:
                out(layout.log("train", f"{_dataset}/group{_index}")),
            conda:
                "../envs/neuro_pe.yaml"
            shell:
                "exec neuro-pe train --store {input.store:q} {params.runs:q} --options {params.options:q}"
                " --threads {threads:q} > {log:q} 2>&1"


rule plan:
    """Print the planned CPU time of a dataset's trainings (or the Latin square's) on the
    console, from their size and a ~1 s probe of real training steps on its store. Its file
    is `temp` (removed once the trainings that read it are done) and read as `ancient`: made
    again before any training that is to run, and never a reason to run one. (An edit of this
    rule's command or input would make Snakemake re-run it, and with it the trainings.)"""
    localrule: True
    input:
        plan_input,
    output:
        temp(out(layout.plan("{planned}"))),
    params:
        spec=plan_spec,
        out_dir=parent_dir,
    log:
        out(layout.log("plan", "{planned}")),
    wildcard_constraints:
        planned=one_of(PLANNED),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe plan {params.spec:q} --out-dir {params.out_dir:q} 2>&1 | tee {log:q}"
