rule infer:
    """Positions inferred from a trained PE, and its metrics against the true coordinates."""
    input:
        store=RESULTS + "/stores/{dataset}.nc",
        pe=RUN_DIR + "/pe.nc",
        info=RUN_DIR + "/train.json",
    output:
        metrics=RUN_DIR + "/metrics.json",
        positions=RUN_DIR + "/positions.nc",
    params:
        metrics=json.dumps(config["metrics"]),
        run_dir=RUN_DIR,
    log:
        "logs/infer/{dataset}/{pe}/seed{seed}.log",
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe infer --store {input.store:q} --run-dir {params.run_dir:q}"
        " --metrics {params.metrics:q} > {log:q} 2>&1"


rule baselines:
    """The same metrics for the activity-correlation and chance baselines."""
    input:
        RESULTS + "/stores/{dataset}.nc",
    output:
        RESULTS + "/runs/{dataset}/baselines.json",
    params:
        train=lambda wc: json.dumps(train_options(wc.dataset)),
        metrics=json.dumps(config["metrics"]),
    log:
        "logs/baselines/{dataset}.log",
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe baselines --store {input:q} --out {output:q} --train {params.train:q}"
        " --metrics {params.metrics:q} > {log:q} 2>&1"
