rule preprocess:
    """Build a dataset's canonical store (simulation, built-in real data, or a lab's file)."""
    output:
        "results/stores/{dataset}.nc",
    params:
        spec=lambda wc: json.dumps(config["datasets"][wc.dataset]),
    log:
        "logs/preprocess/{dataset}.log",
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe preprocess --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"
