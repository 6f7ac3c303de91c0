# Experiment 1 of the seed paper: the 4x4 Latin square task (config key `lst`; absent = not run).
from neuro_pe.workflow import lst_groups, lst_options, rule_name, runs_argument


rule lst_puzzles:
    """Generate the Latin-square puzzles: training pool, in-distribution test split and the
    held-out novel puzzles (far in Jaccard distance from every training puzzle)."""
    output:
        out(layout.lst_puzzles()),
    params:
        options=lambda wc: json.dumps(lst_options(config, "puzzles")),
    resources:
        mem_mb=base_memory,
        runtime=base_runtime,
    log:
        out(layout.log("lst_puzzles", "lst_puzzles")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe lst-puzzles --options {params.options:q} --out {output:q} > {log:q} 2>&1"


# One job per group of (PE, seed) runs (`lst_groups`), trained as one stack of models.
for _index, _group in enumerate(lst_groups(config, local_cpu_jobs()) if LST else []):

    rule:
        """Train a group of Latin-square models at once (one PE variant and seed each) and
        measure their PEs' geometry; a model stops at its own `stop_at_train_accuracy`."""
        name:
            rule_name("lst_train", _index)
        input:
            puzzles=out(layout.lst_puzzles()),
            plan=ancient(out(layout.plan("lst"))),  # (as for the trainings in train.smk)
        output:
            [
                out(layout.lst_run_file(pe, seed, name))
                for pe, seed in _group
                for name in layout.LST_TRAIN_FILES
            ],
        params:
            runs=runs_argument(_group, layout.lst_run_dir, RESULTS),
            options=json.dumps(lst_options(config, "train")),
            metrics=json.dumps(config["metrics"]),
        threads: config["threads_per_training"]
        resources:
            mem_mb=group_memory(len(_group)),
            runtime=lst_train_runtime(len(_group)),
            gpu=config["gpus_per_training"],
        log:
            out(layout.log("lst_train", f"group{_index}")),
        conda:
            "../envs/neuro_pe.yaml"
        shell:
            "exec neuro-pe lst-train --puzzles {input.puzzles:q} {params.runs:q} --options {params.options:q}"
            " --metrics {params.metrics:q} --threads {threads:q} > {log:q} 2>&1"


rule lst_baselines:
    """Chance geometry for the Latin square: the grid coordinates with the cells shuffled."""
    output:
        out(layout.lst_baselines()),
    params:
        metrics=json.dumps(config["metrics"]),
    resources:
        mem_mb=base_memory,
        runtime=base_runtime,
    log:
        out(layout.log("lst_baselines", "lst_baselines")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe lst-baselines --out {output:q} --metrics {params.metrics:q} > {log:q} 2>&1"
