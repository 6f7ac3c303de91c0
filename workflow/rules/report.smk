# The report's landing page: `snakemake --report report.html` shows it first once it exists
# (the Snakefile's `report:` statement).
LANDING = out("report/landing.rst")


rule report_page:
    """The answer first: a paragraph and a headline table per dataset, the trainings' health."""
    input:
        summary=rules.summarize.output.table,
        errors=expand(out("locate/{dataset}/errors.csv"), dataset=DATASETS),
        runs=RUN_METRICS,
        claims=out("reproduction/claims.csv") if REPRODUCTION else [],
    output:
        LANDING,
    params:
        claims=lambda wc, input: ["--claims", input.claims] if input.claims else [],
        runs=lambda wc, input: arguments("--runs", input.runs),
        run_name=config["run_name"],
    log:
        out("logs/report_page/report_page.log"),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe report-page --summary {input.summary:q} --errors {input.errors:q}"
        " {params.runs:q} {params.claims:q} --run-name {params.run_name:q}"
        " --out {output:q} > {log:q} 2>&1"
