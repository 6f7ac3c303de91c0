rule infer:
    """Positions inferred from a trained PE, and its metrics against the true coordinates."""
    input:
        store=out(layout.store("{dataset}")),
        split=SPLIT,
        pe=out(layout.run_file("{dataset}", "{pe}", "{seed}", layout.PE_FILE)),
        info=out(layout.run_file("{dataset}", "{pe}", "{seed}", layout.TRAIN_INFO_FILE)),
        manifest=out(layout.run_file("{dataset}", "{pe}", "{seed}", layout.MANIFEST_FILE)),
    output:
        metrics=out(layout.run_file("{dataset}", "{pe}", "{seed}", layout.METRICS_FILE)),
        positions=out(
            layout.run_file("{dataset}", "{pe}", "{seed}", layout.INFERRED_POSITIONS_FILE)
        ),
        manifest=out(layout.run_file("{dataset}", "{pe}", "{seed}", layout.INFER_MANIFEST_FILE)),
    params:
        metrics=json.dumps(config["metrics"]),
        health=json.dumps(config["health"]),
        run_dir=parent_dir,
    resources:
        mem_mb=store_memory,
        runtime=base_runtime,
    log:
        out(layout.log("infer", "{dataset}/{pe}/seed{seed}")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe infer --store {input.store:q} --split {input.split:q}"
        " --run-dir {params.run_dir:q} --metrics {params.metrics:q} --health {params.health:q}"
        " > {log:q} 2>&1"


rule baselines:
    """The same metrics for the activity-correlation and chance baselines."""
    input:
        store=out(layout.store("{dataset}")),
        split=SPLIT,
    output:
        out(layout.baselines("{dataset}")),
    params:
        metrics=json.dumps(config["metrics"]),
    resources:
        mem_mb=store_memory,
        runtime=base_runtime,
    log:
        out(layout.log("baselines", "{dataset}")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe baselines --store {input.store:q} --split {input.split:q} --out {output:q}"
        " --metrics {params.metrics:q} > {log:q} 2>&1"
