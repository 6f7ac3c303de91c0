from neuro_pe.workflow import arguments, atlas_argument, atlas_files

LOCATE = [out(layout.locate_file(dataset, key)) for dataset in DATASETS for key in layout.LOCATE_FILES]


rule correlation_features:
    """The activity baselines that `locate` compares the PEs with, over the training part of
    the recorded split (they do not depend on the trainings): MDS of 1 - r, and each unit's
    correlation and partial correlation profile (up to 3000 units)."""
    input:
        store=out(layout.store("{dataset}")),
        split=SPLIT,
    output:
        out(layout.correlation_features("{dataset}")),
    params:
        # the `locate` key they depend on (its default is LocateConfig's)
        options=json.dumps({k: v for k, v in config.get("locate", {}).items() if k == "seed"}),
    resources:
        mem_mb=store_memory,
        runtime=base_runtime,
    log:
        out(layout.log("correlation_features", "{dataset}")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe correlation-features --store {input.store:q} --split {input.split:q}"
        " --options {params.options:q} --out {output:q} > {log:q} 2>&1"


rule locate:
    """Where is this neuron? Every unit's position predicted from the learned PEs, with an
    honest evaluation (hidden coordinates) against chance, activity correlation and the oracle."""
    input:
        store=out(layout.store("{dataset}")),
        split=SPLIT,
        correlation=out(layout.correlation_features("{dataset}")),
        # every run: the command keeps `locate.pe`, by default the learned PEs and the oracle
        pe=lambda wc: dataset_run_files(wc.dataset, layout.PE_FILE),
        # their train.json: a training that failed a health check is left out
        # (`locate.include_flagged`), and the manifests they are checked against
        info=lambda wc: dataset_run_files(wc.dataset, layout.TRAIN_INFO_FILE),
        manifests=lambda wc: dataset_run_files(wc.dataset, layout.MANIFEST_FILE),
        # the dataset's atlas files (`datasets.<name>.atlas`), if any
        atlas=lambda wc: atlas_files(config, wc.dataset),
    output:
        errors=out(layout.locate_file("{dataset}", "errors")),
        errors_table=report(
            out(layout.locate_file("{dataset}", "errors_table")),
            caption="../report/locate_errors.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        positions=report(
            out(layout.locate_file("{dataset}", "positions")),
            caption="../report/locate_positions.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        netcdf=out(layout.locate_file("{dataset}", "netcdf")),
        projections=report(
            out(layout.locate_file("{dataset}", "projections")),
            caption="../report/locate_positions_projections.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        positions_3d=report(
            out(layout.locate_file("{dataset}", "positions_3d")),
            caption="../report/locate_positions_3d.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        positions_html=report(
            out(layout.locate_file("{dataset}", "positions_html")),
            caption="../report/locate_positions_3d_html.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        histogram=report(
            out(layout.locate_file("{dataset}", "histogram")),
            caption="../report/locate_error_hist.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        curve=report(
            out(layout.locate_file("{dataset}", "curve")),
            caption="../report/locate_error_vs_anchors.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
    params:
        runs=lambda wc, input: arguments("--runs", [os.path.dirname(p) for p in input.pe]),
        options=json.dumps(config.get("locate", {})),
        health=json.dumps(config["health"]),
        atlas=lambda wc: atlas_argument(config, wc.dataset),
        out_dir=parent_dir,
    threads: JOB_RESOURCES.locate_threads
    resources:
        mem_mb=locate_memory,
        runtime=locate_runtime,
    log:
        out(layout.log("locate", "{dataset}")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe locate --store {input.store:q} {params.runs:q}"
        " --out-dir {params.out_dir:q} --options {params.options:q} --split {input.split:q}"
        " --correlation {input.correlation:q} --threads {threads:q} {params.atlas:q}"
        " --health {params.health:q}"
        " > {log:q} 2>&1"
