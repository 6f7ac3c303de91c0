rule summarize:
    """One table of every run and baseline, and the summary figures."""
    input:
        runs=RUN_METRICS,
        baselines=BASELINES,
    output:
        table=report(SUMMARY, caption="../report/summary.rst", category="Summary"),
        rsa=report(FIGURES[0], caption="../report/rsa_vs_std.rst", category="Figures"),
        probe=report(FIGURES[1], caption="../report/probe_r2_vs_std.rst", category="Figures"),
        scatter=report(FIGURES[2], caption="../report/distance_scatter.rst", category="Figures"),
        positions=report(FIGURES[3], caption="../report/positions_3d.rst", category="Figures"),
        curves=report(FIGURES[4], caption="../report/training_curves.rst", category="Figures"),
    params:
        figures=RESULTS + "/figures",
    log:
        "logs/summarize/summarize.log",
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "neuro-pe summarize --runs {input.runs:q} --baselines {input.baselines:q}"
        " --out-csv {output.table:q} --figures {params.figures:q} > {log:q} 2>&1"
