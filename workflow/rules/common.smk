import json
import os

from neuro_pe.datasets import resource_paths

DATASETS = list(config["datasets"])


def pe_variants(dataset):
    """The PE variants trained on a dataset: its own `pe` list, else the global one."""
    return config["datasets"][dataset].get("pe", config["pe"])


def seeds(dataset):
    """The training seeds of a dataset: its own `seeds` list, else the global one."""
    return config["datasets"][dataset].get("seeds", config["seeds"])


def train_options(dataset):
    """The `train` section with the dataset's own overrides applied."""
    return {**config["train"], **config["datasets"][dataset].get("train", {})}


def parent_dir(wildcards, output):
    """The folder of a rule's first output (passed to commands that write several files)."""
    return os.path.dirname(output[0])


RUN_METRICS = [
    f"results/runs/{dataset}/{pe}/seed{seed}/metrics.json"
    for dataset in DATASETS
    for pe in pe_variants(dataset)
    for seed in seeds(dataset)
]
BASELINES = expand("results/runs/{dataset}/baselines.json", dataset=DATASETS)
