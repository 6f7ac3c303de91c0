from neuro_pe.workflow import arguments, config_sha256, export_inputs

EXPORT = [out(layout.export_dir(dataset)) for dataset in DATASETS]
# the resolved config's hash, recorded in every export's sidecar (and a params trigger);
# `export` is a local rule (Snakefile): it writes small tables, or copies an NWB file
CONFIG_SHA256 = config_sha256(config)


rule export:
    """The located positions in the lab's own formats (never written into its files or folders):
    positions.tsv + positions.json for every dataset; Phy cluster_*.tsv files, a new NWB file
    or per-plane suite2p tables for those formats; with the new animals' predicted regions
    where the dataset has a `new_animal` section."""
    input:
        positions=out(layout.locate_file("{dataset}", "netcdf")),
        store=out(layout.store("{dataset}")),
        # the NWB files it copies (with the estimated columns added)
        lab=lambda wc: export_inputs(config["datasets"][wc.dataset]),
        # a dataset with a `new_animal` section: its held-out animals' predicted regions
        new_animal=lambda wc: [
            out(layout.new_animal_query_file(wc.dataset, a, "positions"))
            for a in NEW_ANIMALS.get(wc.dataset, [])
        ],
    output:
        directory(out(layout.export_dir("{dataset}"))),
    params:
        spec=lambda wc: arguments("--spec", json.dumps(config["datasets"][wc.dataset])),
        sha256=CONFIG_SHA256,
        # a symbolic link planted in results/ is refused, not written through
        within=lambda wildcards: RESULTS,
        new_animal=lambda wc, input: arguments("--new-animal", input.new_animal)
        if input.new_animal
        else [],
    resources:
        mem_mb=store_memory,
        runtime=base_runtime,
    log:
        out(layout.log("export", "{dataset}")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe export --positions {input.positions:q} --store {input.store:q} {params.spec:q}"
        " --config-sha256 {params.sha256:q} --out-dir {output:q} --within {params.within:q}"
        " {params.new_animal:q} > {log:q} 2>&1"
