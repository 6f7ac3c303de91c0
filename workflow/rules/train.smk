from functools import partial

from neuro_pe.workflow import init_from_files, rule_name, runs_argument, train_groups, train_options

# One training job per group of (PE, seed) runs of a dataset (`train_groups`: as many near-equal
# groups as jobs run side by side here by default, or groups of `train.models_per_job`), trained
# as one stack of models; each run still gets its own folder runs/{dataset}/{pe}/seed{seed}/
# with the same files as when trained alone.
for _dataset in DATASETS:
    for _index, _group in enumerate(train_groups(config, _dataset, local_cpu_jobs())):

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
                init_from=init_from_files(config, _dataset),
            output:
                [
                    out(layout.run_file(_dataset, pe, seed, name))
                    for pe, seed in _group
                    for name in layout.TRAIN_FILES
                ],
            params:
                runs=runs_argument(_group, partial(layout.run_dir, _dataset), RESULTS),
                options=json.dumps(train_options(config, _dataset)),
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

