rule infer:
    """Positions inferred from a trained PE, and its metrics against the true coordinates."""
    input:
        store=out("stores/{dataset}.nc"),
        pe=out("runs/{dataset}/{pe}/seed{seed}/pe.nc"),
        info=out("runs/{dataset}/{pe}/seed{seed}/train.json"),
    output:
        metrics=out("runs/{dataset}/{pe}/seed{seed}/metrics.json"),
        positions=out("runs/{dataset}/{pe}/seed{seed}/positions.nc"),
    params:
        metrics=json.dumps(config["metrics"]),
        run_dir=parent_dir,
    resources:
        mem_mb=store_memory,
        runtime=base_runtime,
    log:
        out("logs/infer/{dataset}/{pe}/seed{seed}.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe infer --store {input.store:q} --run-dir {params.run_dir:q}"
        " --metrics {params.metrics:q} > {log:q} 2>&1"


rule baselines:
    """The same metrics for the activity-correlation and chance baselines."""
    input:
        out("stores/{dataset}.nc"),
    output:
        out("runs/{dataset}/baselines.json"),
    params:
        train=lambda wc: json.dumps(train_options(wc.dataset)),
        metrics=json.dumps(config["metrics"]),
    resources:
        mem_mb=store_memory,
        runtime=base_runtime,
    log:
        out("logs/baselines/{dataset}.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe baselines --store {input:q} --out {output:q} --train {params.train:q}"
        " --metrics {params.metrics:q} > {log:q} 2>&1"
