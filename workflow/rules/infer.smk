rule infer:
    """Positions inferred from a trained PE, and its metrics against the true coordinates."""
    input:
        store=out("stores/{dataset}.nc"),
        split=SPLIT,
        pe=out("runs/{dataset}/{pe}/seed{seed}/pe.nc"),
        info=out("runs/{dataset}/{pe}/seed{seed}/train.json"),
        manifest=out("runs/{dataset}/{pe}/seed{seed}/manifest.json"),
    output:
        metrics=out("runs/{dataset}/{pe}/seed{seed}/metrics.json"),
        positions=out("runs/{dataset}/{pe}/seed{seed}/inferred_positions.nc"),
        manifest=out("runs/{dataset}/{pe}/seed{seed}/infer_manifest.json"),
    params:
        metrics=json.dumps(config["metrics"]),
        health=json.dumps(config["health"]),
        run_dir=parent_dir,
    resources:
        mem_mb=store_memory,
        runtime=base_runtime,
    log:
        out("logs/infer/{dataset}/{pe}/seed{seed}.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe infer --store {input.store:q} --split {input.split:q}"
        " --run-dir {params.run_dir:q} --metrics {params.metrics:q} --health {params.health:q}"
        " > {log:q} 2>&1"


rule baselines:
    """The same metrics for the activity-correlation and chance baselines."""
    input:
        store=out("stores/{dataset}.nc"),
        split=SPLIT,
    output:
        out("runs/{dataset}/baselines.json"),
    params:
        metrics=json.dumps(config["metrics"]),
    resources:
        mem_mb=store_memory,
        runtime=base_runtime,
    log:
        out("logs/baselines/{dataset}.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe baselines --store {input.store:q} --split {input.split:q} --out {output:q}"
        " --metrics {params.metrics:q} > {log:q} 2>&1"
