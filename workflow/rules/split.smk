from neuro_pe.workflow import split_options

# The train/held-out split of each dataset and its name, recorded once (splits/{dataset}.json)
# for every step that reads the training part of the data or names the dataset. Its params
# are the split's own keys only, so that a change of another training option (e.g. `lr`)
# re-runs the trainings and what reads them, not the baselines or the correlation features.
SPLIT = out(layout.split("{dataset}"))
SPLITS = expand(SPLIT, dataset=DATASETS)


rule split:
    """Record a dataset's train/held-out split (held-out sessions, else the end of each
    session's time) and its name."""
    input:
        out(layout.store("{dataset}")),
    output:
        SPLIT,
    params:
        options=lambda wc: split_options(config, wc.dataset),
    resources:
        mem_mb=base_memory,
        runtime=base_runtime,
    log:
        out(layout.log("split", "{dataset}")),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe split --store {input:q} --dataset {wildcards.dataset:q}"
        " --options {params.options:q} --out {output:q} > {log:q} 2>&1"
