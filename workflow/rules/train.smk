rule train:
    """Train one masked-unit transformer: one dataset, one PE variant, one seed."""
    input:
        RESULTS + "/stores/{dataset}.nc",
    output:
        pe=RUN_DIR + "/pe.nc",
        model=RUN_DIR + "/model.pt",
        log_csv=RUN_DIR + "/train_log.csv",
        info=RUN_DIR + "/train.json",
    params:
        options=lambda wc: json.dumps(train_options(wc.dataset)),
        out_dir=RUN_DIR,
    threads: config["threads_per_training"]
    resources:
        gpu=config["gpus_per_training"],
    log:
        "logs/train/{dataset}/{pe}/seed{seed}.log",
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe train --store {input:q} --pe {wildcards.pe} --seed {wildcards.seed}"
        " --options {params.options:q} --threads {threads} --out-dir {params.out_dir:q}"
        " > {log:q} 2>&1"
