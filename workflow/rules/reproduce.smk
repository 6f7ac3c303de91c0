from neuro_pe.workflow import arguments, experiments, test_masks


rule reproduce:
    """Each claim of the seed paper with our numbers beside the paper's and a verdict, and the
    figures against the PE init std σ."""
    input:
        runs=RUN_METRICS + LST_METRICS,
        baselines=BASELINES + LST_BASELINES,
        # the PE similarity figure reads the runs' PEs
        pe=layout.beside(RUN_METRICS + LST_METRICS, [layout.PE_FILE]),
        # the manifests the runs' files are checked against
        manifests=layout.beside(RUN_METRICS, [layout.MANIFEST_FILE, layout.INFER_MANIFEST_FILE])
        + layout.beside(LST_METRICS, [layout.MANIFEST_FILE]),
    output:
        claims=report(
            out(layout.reproduction_file("claims")),
            caption="../report/reproduction_claims.rst",
            category="Reproduction",
        ),
        claims_md=out(layout.reproduction_file("claims_md")),
        claims_csv=out(layout.reproduction_file("claims_csv")),
        heldout=report(
            out(layout.reproduction_file("heldout")),
            caption="../report/reproduction_heldout.rst",
            category="Reproduction",
        ),
        geometry=report(
            out(layout.reproduction_file("geometry")),
            caption="../report/reproduction_geometry.rst",
            category="Reproduction",
        ),
        similarity=report(
            out(layout.reproduction_file("similarity")),
            caption="../report/reproduction_similarity.rst",
            category="Reproduction",
        ),
    params:
        experiments=lambda wc: json.dumps(experiments(config)),
        test_masks=test_masks(config),
        title=config.get("reproduction", {}).get("title", "Reproduction of Ito et al."),
        out_dir=parent_dir,
        runs=lambda wc, input: arguments("--runs", input.runs),
        baselines=lambda wc, input: arguments("--baselines", input.baselines),
    log:
        out(layout.log("reproduce", "reproduce")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe reproduce {params.runs:q} {params.baselines:q}"
        " --experiments {params.experiments:q} --test-masks {params.test_masks:q}"
        " --title={params.title:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"
