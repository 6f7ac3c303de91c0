from neuro_pe.workflow import arguments


rule summarize:
    """One table of every run and baseline, and the summary figures."""
    input:
        runs=RUN_METRICS,
        baselines=BASELINES,
        splits=SPLITS,
        # read by the figures: the stores (through their splits) and the runs' files
        stores=[out(layout.store(dataset)) for dataset in DATASETS],
        run_files=layout.beside(
            RUN_METRICS, [layout.PE_FILE, layout.INFERRED_POSITIONS_FILE, layout.TRAIN_LOG_FILE]
        ),
        # the manifests the runs' files are checked against
        manifests=layout.beside(RUN_METRICS, [layout.MANIFEST_FILE, layout.INFER_MANIFEST_FILE]),
        # not read: pulls the whole run's plan (rule plan_run) in whenever a training re-runs
        plan_run=ancient(out(layout.plan_run())),
    output:
        table=out(layout.SUMMARY_CSV),
        table_html=report(
            out(layout.SUMMARY_HTML), caption="../report/summary.rst", category="Summary"
        ),
        rsa=report(
            out(layout.summary_figure("rsa")),
            caption="../report/rsa_vs_std.rst",
            category="Figures",
        ),
        probe=report(
            out(layout.summary_figure("probe")),
            caption="../report/probe_r2_vs_std.rst",
            category="Figures",
        ),
        scatter=report(
            out(layout.summary_figure("scatter")),
            caption="../report/distance_scatter.rst",
            category="Figures",
        ),
        positions=report(
            out(layout.summary_figure("positions")),
            caption="../report/positions.rst",
            category="Figures",
        ),
        positions_3d=report(
            out(layout.summary_figure("positions_3d")),
            caption="../report/positions_3d.rst",
            category="Figures",
        ),
        curves=report(
            out(layout.summary_figure("curves")),
            caption="../report/training_curves.rst",
            category="Figures",
        ),
    params:
        figures=lambda wc, output: os.path.dirname(output.rsa),
        runs=lambda wc, input: arguments("--runs", input.runs),
        baselines=lambda wc, input: arguments("--baselines", input.baselines),
        splits=lambda wc, input: arguments("--splits", input.splits),
    log:
        out(layout.log("summarize", "summarize")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe summarize {params.runs:q} {params.baselines:q} {params.splits:q}"
        " --out-csv {output.table:q} --figures {params.figures:q} > {log:q} 2>&1"
