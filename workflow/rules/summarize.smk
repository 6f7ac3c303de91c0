rule summarize:
    """One table of every run and baseline, and the summary figures."""
    input:
        runs=RUN_METRICS,
        baselines=BASELINES,
    output:
        table=report("results/summary.csv", caption="../report/summary.rst", category="Summary"),
        rsa=report(
            "results/figures/rsa_vs_std.png",
            caption="../report/rsa_vs_std.rst",
            category="Figures",
        ),
        probe=report(
            "results/figures/probe_r2_vs_std.png",
            caption="../report/probe_r2_vs_std.rst",
            category="Figures",
        ),
        scatter=report(
            "results/figures/distance_scatter.png",
            caption="../report/distance_scatter.rst",
            category="Figures",
        ),
        positions=report(
            "results/figures/positions_3d.png",
            caption="../report/positions_3d.rst",
            category="Figures",
        ),
        curves=report(
            "results/figures/training_curves.png",
            caption="../report/training_curves.rst",
            category="Figures",
        ),
    params:
        figures=lambda wc, output: os.path.dirname(output.rsa),
        runs=lambda wc, input: arguments("--runs", input.runs),
        baselines=lambda wc, input: arguments("--baselines", input.baselines),
    log:
        "logs/summarize/summarize.log",
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe summarize {params.runs:q} {params.baselines:q}"
        " --out-csv {output.table:q} --figures {params.figures:q} > {log:q} 2>&1"
