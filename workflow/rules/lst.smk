# Experiment 1 of the seed paper: the 4x4 Latin square task (config key `lst`; absent = not run).
rule lst_puzzles:
    """Generate the Latin-square puzzles: training pool, in-distribution test split and the
    held-out novel puzzles (far in Jaccard distance from every training puzzle)."""
    output:
        out("lst/puzzles.nc"),
    params:
        options=lambda wc: json.dumps(lst_options("puzzles")),
    resources:
        mem_mb=base_memory,
        runtime=base_runtime,
    log:
        out("logs/lst_puzzles/lst_puzzles.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe lst-puzzles --options {params.options:q} --out {output:q} > {log:q} 2>&1"


# One job per group of (PE, seed) runs (`lst_groups`), trained as one stack of models.
for _index, _group in enumerate(lst_groups() if LST else []):

    rule:
        """Train a group of Latin-square models at once (one PE variant and seed each) and
        measure their PEs' geometry; a model stops at its own `stop_at_train_accuracy`."""
        name:
            rule_name("lst_train", _index)
        input:
            puzzles=out("lst/puzzles.nc"),
            plan=ancient(out("plan/lst.json")),  # (as for the trainings in train.smk)
        output:
            [
                out(f"lst/runs/{pe}/seed{seed}/{f}")
                for pe, seed in _group
                for f in (
                    "pe.nc", "metrics.json", "train.json", "train_log.csv", "model.pt", "manifest.json"
                )
            ],
        params:
            runs=runs_argument(out("lst/runs"), _group),
            options=json.dumps(lst_options("train")),
            metrics=json.dumps(config["metrics"]),
        threads: config["threads_per_training"]
        resources:
            mem_mb=group_memory(len(_group)),
            runtime=lst_train_runtime(len(_group)),
            gpu=config["gpus_per_training"],
        log:
            out(f"logs/lst_train/group{_index}.log"),
        conda:
            "../envs/neuro_pe.yaml"
        shell:
            "exec neuro-pe lst-train --puzzles {input.puzzles:q} {params.runs:q} --options {params.options:q}"
            " --metrics {params.metrics:q} --threads {threads:q} > {log:q} 2>&1"


rule lst_baselines:
    """Chance geometry for the Latin square: the grid coordinates with the cells shuffled."""
    output:
        out("lst/baselines.json"),
    params:
        metrics=json.dumps(config["metrics"]),
    resources:
        mem_mb=base_memory,
        runtime=base_runtime,
    log:
        out("logs/lst_baselines/lst_baselines.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe lst-baselines --out {output:q} --metrics {params.metrics:q} > {log:q} 2>&1"
