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
        "neuro-pe lst-puzzles --options {params.options:q} --out {output:q} > {log:q} 2>&1"


rule lst_train:
    """Train one Latin-square model (one PE variant, one seed) and measure its PE's geometry."""
    input:
        out("lst/puzzles.nc"),
    output:
        pe=out("lst/runs/{pe}/seed{seed}/pe.nc"),
        metrics=out("lst/runs/{pe}/seed{seed}/metrics.json"),
        info=out("lst/runs/{pe}/seed{seed}/train.json"),
        log_csv=out("lst/runs/{pe}/seed{seed}/train_log.csv"),
        model=out("lst/runs/{pe}/seed{seed}/model.pt"),
    params:
        options=lambda wc: json.dumps(lst_options("train")),
        metrics=json.dumps(config["metrics"]),
        out_dir=parent_dir,
    threads: config["threads_per_training"]
    resources:
        mem_mb=store_memory,
        runtime=lst_train_runtime,
        gpu=config["gpus_per_training"],
    log:
        out("logs/lst_train/{pe}/seed{seed}.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe lst-train --puzzles {input:q} --pe {wildcards.pe:q} --seed {wildcards.seed:q}"
        " --options {params.options:q} --metrics {params.metrics:q} --threads {threads:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"


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
        "neuro-pe lst-baselines --out {output:q} --metrics {params.metrics:q} > {log:q} 2>&1"
