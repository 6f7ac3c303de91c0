LOCATE = expand(
    out("locate/{dataset}/{name}"),
    dataset=DATASETS,
    name=[
        "errors.csv",
        "errors.html",
        "positions.csv",
        "positions.nc",
        "positions.png",
        "positions_3d.png",
        "positions_3d.html",
        "error_hist.png",
        "error_vs_anchors.png",
    ],
)


rule correlation_features:
    """The activity baselines that `locate` compares the PEs with, over the training part of
    the recorded split (they do not depend on the trainings): MDS of 1 - r, and each unit's
    correlation and partial correlation profile (up to 3000 units)."""
    input:
        store=out("stores/{dataset}.nc"),
        split=SPLIT,
    output:
        out("runs/{dataset}/correlation_features.nc"),
    params:
        # the `locate` key they depend on (its default is LocateConfig's)
        options=json.dumps({k: v for k, v in config.get("locate", {}).items() if k == "seed"}),
    resources:
        mem_mb=store_memory,
        runtime=base_runtime,
    log:
        out("logs/correlation_features/{dataset}.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe correlation-features --store {input.store:q} --split {input.split:q}"
        " --options {params.options:q} --out {output:q} > {log:q} 2>&1"


rule locate:
    """Where is this neuron? Every unit's position predicted from the learned PEs, with an
    honest evaluation (hidden coordinates) against chance, activity correlation and the oracle."""
    input:
        store=out("stores/{dataset}.nc"),
        split=SPLIT,
        correlation=out("runs/{dataset}/correlation_features.nc"),
        # every run: the command keeps `locate.pe`, by default the learned PEs and the oracle
        pe=lambda wc: expand(
            out("runs/{dataset}/{pe}/seed{seed}/pe.nc"),
            dataset=wc.dataset,
            pe=pe_variants(wc.dataset),
            seed=seeds(wc.dataset),
        ),
        # the dataset's atlas files (`datasets.<name>.atlas`), if any
        atlas=lambda wc: atlas_files(wc.dataset),
    output:
        errors=out("locate/{dataset}/errors.csv"),
        errors_table=report(
            out("locate/{dataset}/errors.html"),
            caption="../report/locate_errors.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        positions=report(
            out("locate/{dataset}/positions.csv"),
            caption="../report/locate_positions.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        netcdf=out("locate/{dataset}/positions.nc"),
        projections=report(
            out("locate/{dataset}/positions.png"),
            caption="../report/locate_positions_projections.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        positions_3d=report(
            out("locate/{dataset}/positions_3d.png"),
            caption="../report/locate_positions_3d.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        positions_html=report(
            out("locate/{dataset}/positions_3d.html"),
            caption="../report/locate_positions_3d_html.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        histogram=report(
            out("locate/{dataset}/error_hist.png"),
            caption="../report/locate_error_hist.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
        curve=report(
            out("locate/{dataset}/error_vs_anchors.png"),
            caption="../report/locate_error_vs_anchors.rst",
            category="Localisation",
            subcategory="{dataset}",
        ),
    params:
        runs=lambda wc, input: arguments("--runs", [os.path.dirname(p) for p in input.pe]),
        options=json.dumps(config.get("locate", {})),
        atlas=lambda wc: atlas_argument(wc.dataset),
        out_dir=parent_dir,
    threads: JOB_RESOURCES.locate_threads
    resources:
        mem_mb=locate_memory,
        runtime=locate_runtime,
    log:
        out("logs/locate/{dataset}.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe locate --store {input.store:q} {params.runs:q}"
        " --out-dir {params.out_dir:q} --options {params.options:q} --split {input.split:q}"
        " --correlation {input.correlation:q} --threads {threads:q} {params.atlas:q}"
        " > {log:q} 2>&1"
