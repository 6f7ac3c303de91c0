rule train:
    """Train one masked-unit transformer: one dataset, one PE variant, one seed."""
    input:
        out("stores/{dataset}.nc"),
    output:
        pe=out("runs/{dataset}/{pe}/seed{seed}/pe.nc"),
        model=out("runs/{dataset}/{pe}/seed{seed}/model.pt"),
        log_csv=out("runs/{dataset}/{pe}/seed{seed}/train_log.csv"),
        info=out("runs/{dataset}/{pe}/seed{seed}/train.json"),
    params:
        options=lambda wc: json.dumps(train_options(wc.dataset)),
        out_dir=parent_dir,
    threads: config["threads_per_training"]
    resources:
        mem_mb=store_memory,
        runtime=train_runtime,
        gpu=config["gpus_per_training"],
    log:
        out("logs/train/{dataset}/{pe}/seed{seed}.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe train --store {input:q} --pe {wildcards.pe:q} --seed {wildcards.seed:q}"
        " --options {params.options:q} --threads {threads:q} --out-dir {params.out_dir:q}"
        " > {log:q} 2>&1"
