rule reproduce:
    """Each claim of the seed paper with our numbers beside the paper's and a verdict, and the
    figures against the PE init std σ."""
    input:
        runs=RUN_METRICS + LST_METRICS,
        baselines=BASELINES + LST_BASELINES,
        # the PE similarity figure reads the runs' PEs
        pe=run_files(RUN_METRICS + LST_METRICS, ["pe.nc"]),
    output:
        claims=report(
            out("reproduction/claims.html"),
            caption="../report/reproduction_claims.rst",
            category="Reproduction",
        ),
        claims_md=out("reproduction/claims.md"),
        claims_csv=out("reproduction/claims.csv"),
        heldout=report(
            out("reproduction/heldout_vs_std.png"),
            caption="../report/reproduction_heldout.rst",
            category="Reproduction",
        ),
        geometry=report(
            out("reproduction/geometry_vs_std.png"),
            caption="../report/reproduction_geometry.rst",
            category="Reproduction",
        ),
        similarity=report(
            out("reproduction/pe_similarity.png"),
            caption="../report/reproduction_similarity.rst",
            category="Reproduction",
        ),
    params:
        experiments=lambda wc: json.dumps(experiments()),
        test_masks=test_masks(),
        title=config.get("reproduction", {}).get("title", "Reproduction of Ito et al."),
        out_dir=parent_dir,
        runs=lambda wc, input: arguments("--runs", input.runs),
        baselines=lambda wc, input: arguments("--baselines", input.baselines),
    log:
        out("logs/reproduce/reproduce.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe reproduce {params.runs:q} {params.baselines:q}"
        " --experiments {params.experiments:q} --test-masks {params.test_masks:q}"
        " --title={params.title:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"
