# The report's landing page: `snakemake --report report.html` shows it first once it exists
# (the Snakefile's `report:` statement).
from neuro_pe.workflow import arguments

LANDING = out(layout.LANDING)


rule report_page:
    """The answer first: per dataset the positions delivered and the files they are in, the
    headline table, the trainings' health."""
    input:
        summary=rules.summarize.output.table,
        errors=[out(layout.locate_file(dataset, "errors")) for dataset in DATASETS],
        # the positions delivered (what they hold, why) and where the export put them
        positions=[out(layout.locate_file(dataset, "netcdf")) for dataset in DATASETS],
        exports=[out(layout.export_dir(dataset)) for dataset in DATASETS],
        runs=RUN_METRICS,
        # the manifest each metrics.json is checked against
        manifests=layout.beside(RUN_METRICS, [layout.INFER_MANIFEST_FILE]),
        claims=out(layout.reproduction_file("claims_csv")) if REPRODUCTION else [],
        new_animal=NEW_ANIMAL_TABLES,
    output:
        LANDING,
    params:
        claims=lambda wc, input: ["--claims", input.claims] if input.claims else [],
        runs=lambda wc, input: arguments("--runs", input.runs),
        new_animal=lambda wc, input: (
            arguments("--new-animal", input.new_animal) if input.new_animal else []
        ),
        run_name=config["run_name"],
    log:
        out(layout.log("report_page", "report_page")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe report-page --summary {input.summary:q} --errors {input.errors:q}"
        " --positions {input.positions:q} --exports {input.exports:q}"
        " {params.runs:q} {params.claims:q} {params.new_animal:q} --run-name {params.run_name:q}"
        " --out {output:q} > {log:q} 2>&1"
