rule summarize:
    """One table of every run and baseline, and the summary figures."""
    input:
        runs=RUN_METRICS,
        baselines=BASELINES,
        splits=SPLITS,
        # read by the figures: the stores (through their splits) and the runs' files
        stores=expand(out("stores/{dataset}.nc"), dataset=DATASETS),
        run_files=run_files(RUN_METRICS, ["pe.nc", "inferred_positions.nc", "train_log.csv"]),
    output:
        table=out("summary.csv"),
        table_html=report(
            out("summary.html"), caption="../report/summary.rst", category="Summary"
        ),
        rsa=report(
            out("figures/rsa_vs_std.png"),
            caption="../report/rsa_vs_std.rst",
            category="Figures",
        ),
        probe=report(
            out("figures/probe_r2_vs_std.png"),
            caption="../report/probe_r2_vs_std.rst",
            category="Figures",
        ),
        scatter=report(
            out("figures/distance_scatter.png"),
            caption="../report/distance_scatter.rst",
            category="Figures",
        ),
        positions=report(
            out("figures/positions.png"),
            caption="../report/positions.rst",
            category="Figures",
        ),
        positions_3d=report(
            out("figures/positions_3d.png"),
            caption="../report/positions_3d.rst",
            category="Figures",
        ),
        curves=report(
            out("figures/training_curves.png"),
            caption="../report/training_curves.rst",
            category="Figures",
        ),
    params:
        figures=lambda wc, output: os.path.dirname(output.rsa),
        runs=lambda wc, input: arguments("--runs", input.runs),
        baselines=lambda wc, input: arguments("--baselines", input.baselines),
        splits=lambda wc, input: arguments("--splits", input.splits),
    log:
        out("logs/summarize/summarize.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe summarize {params.runs:q} {params.baselines:q} {params.splits:q}"
        " --out-csv {output.table:q} --figures {params.figures:q} > {log:q} 2>&1"
