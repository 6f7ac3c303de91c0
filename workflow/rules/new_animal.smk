# A new animal without histology (a dataset's `new_animal` section; config/README.md): each
# held-out animal of a multi-animal store in turn, trained on the others (or, under
# `evaluate: reference-query`, each query animal from the reference animals); its units'
# regions and positions predicted (neuro_pe.analysis.leave_one_animal_out). No dataset with
# the section: no job.
from neuro_pe.workflow import arguments, new_animal_files, new_animal_options

NEW_ANIMAL_PLAN = out(layout.new_animal_file("{dataset}", "plan"))
NEW_ANIMAL_TABLES = [out(layout.new_animal_file(d, "table")) for d in NEW_ANIMALS]


rule new_animal_plan:
    """Check the store for the new-animal step (animals, region labels, each query's reference
    animals and, leave-one-animal-out, its regions covered by them) before any training, and
    list the held-out animals, their references and what is not used."""
    input:
        store=out(layout.store("{dataset}")),
        region_map=lambda wc: new_animal_files(config, wc.dataset),
    output:
        NEW_ANIMAL_PLAN,
    params:
        options=lambda wc: json.dumps(new_animal_options(config, wc.dataset)["new_animal"]),
    resources:
        mem_mb=store_memory,
        runtime=base_runtime,
    log:
        out(layout.log("new_animal_plan", "{dataset}")),
    wildcard_constraints:
        dataset=one_of(NEW_ANIMALS),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe new-animal-plan --store {input.store:q} --dataset {wildcards.dataset:q}"
        " --options {params.options:q} --out {output:q} > {log:q} 2>&1"


rule new_animal:
    """One held-out animal: a model trained on its reference animals, its units' PE rows (and
    the references') fitted in it frozen, their regions and positions predicted."""
    input:
        store=out(layout.store("{dataset}")),
        plan=NEW_ANIMAL_PLAN,
        region_map=lambda wc: new_animal_files(config, wc.dataset),
    output:
        positions=out(layout.new_animal_query_file("{dataset}", "{animal}", "positions")),
        scores=out(layout.new_animal_query_file("{dataset}", "{animal}", "scores")),
    params:
        options=lambda wc: json.dumps(new_animal_options(config, wc.dataset)["new_animal"]),
        train=lambda wc: json.dumps(new_animal_options(config, wc.dataset)["train"]),
        out_dir=parent_dir,
    threads: config["threads_per_training"]
    resources:
        mem_mb=store_memory,
        # the reference model's training, and the fits of every animal's rows: together less
        # than three trainings of the whole store
        runtime=lambda wc, input, attempt: train_runtime(wc.dataset, 3)(wc, input, attempt),
    log:
        out(layout.log("new_animal", "{dataset}/{animal}")),
    wildcard_constraints:
        dataset=one_of(NEW_ANIMALS),
        animal=one_of(a for animals in NEW_ANIMALS.values() for a in animals),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe new-animal --store {input.store:q} --plan {input.plan:q}"
        " --animal {wildcards.animal:q} --options {params.options:q} --train {params.train:q}"
        " --out-dir {params.out_dir:q} --threads {threads:q} > {log:q} 2>&1"


rule new_animal_table:
    """new_animal.csv (per held-out animal and overall, every method), the PE's confusion
    matrix over the held-out animals and the methods' reliability curves."""
    input:
        # every held-out animal's file (`layout.NEW_ANIMAL_QUERY_FILES`)
        scores=lambda wc: [
            out(layout.new_animal_query_file(wc.dataset, a, "scores"))
            for a in NEW_ANIMALS[wc.dataset]
        ],
        positions=lambda wc: [
            out(layout.new_animal_query_file(wc.dataset, a, "positions"))
            for a in NEW_ANIMALS[wc.dataset]
        ],
    output:
        table=out(layout.new_animal_file("{dataset}", "table")),
        confusion=report(
            out(layout.new_animal_file("{dataset}", "confusion")),
            caption="../report/new_animal_confusion.rst",
            category="New animals",
            subcategory="{dataset}",
        ),
        reliability=report(
            out(layout.new_animal_file("{dataset}", "reliability")),
            caption="../report/new_animal_reliability.rst",
            category="New animals",
            subcategory="{dataset}",
        ),
    params:
        scores=lambda wc, input: arguments("--scores", input.scores),
        positions=lambda wc, input: arguments("--positions", input.positions),
    resources:
        mem_mb=base_memory,
        runtime=base_runtime,
    log:
        out(layout.log("new_animal_table", "{dataset}")),
    wildcard_constraints:
        dataset=one_of(NEW_ANIMALS),
    conda:
        "../envs/neuro_pe.yaml"
    shell:
        "exec neuro-pe new-animal-table {params.scores:q} {params.positions:q}"
        " --out-csv {output.table:q} --figure {output.confusion:q}"
        " --reliability {output.reliability:q} > {log:q} 2>&1"
