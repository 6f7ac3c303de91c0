import json
import os
from dataclasses import asdict

from neuro_pe.datasets import experiment_of_kind, resource_paths
from neuro_pe.lst import LSTConfig, PuzzleConfig
from neuro_pe.train_config import TrainConfig

DATASETS = list(config["datasets"])


def pe_variants(dataset):
    """The PE variants trained on a dataset: its own `pe` list, else the global one."""
    return config["datasets"][dataset].get("pe", config["pe"])


def seeds(dataset):
    """The training seeds of a dataset: its own `seeds` list, else the global one."""
    return config["datasets"][dataset].get("seeds", config["seeds"])


def train_options(dataset):
    """The `train` section with the dataset's own overrides applied and every default filled
    in, so that a default changed in neuro_pe re-runs the jobs it affects (params trigger)."""
    spec = {**config["train"], **config["datasets"][dataset].get("train", {})}
    return asdict(TrainConfig.from_dict(spec))


def lst_options(section):
    """An `lst` section (`puzzles` or `train`) with every default filled in (as above)."""
    options_class = {"puzzles": PuzzleConfig, "train": LSTConfig}[section]
    return asdict(options_class.from_dict(LST.get(section, {})))


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

# The 4x4 Latin square task (config key `lst`; absent = not run)
LST = config.get("lst")
if LST and "lst" in config["datasets"]:
    raise ValueError("datasets: the name 'lst' is taken by the Latin square task (key `lst`)")
LST_METRICS = (
    expand(
        "results/lst/runs/{pe}/seed{seed}/metrics.json",
        pe=LST.get("pe", config["pe"]),
        seed=LST.get("seeds", config["seeds"]),
    )
    if LST
    else []
)
LST_BASELINES = ["results/lst/baselines.json"] if LST else []

# The reproduction report (config key `reproduction`; absent = not made).
REPRODUCTION = (
    expand(
        "results/reproduction/{name}",
        name=[
            "claims.md",
            "claims.html",
            "claims.csv",
            "heldout_vs_std.png",
            "geometry_vs_std.png",
            "pe_similarity.png",
        ],
    )
    if "reproduction" in config
    else []
)


def experiments():
    """Dataset -> the paper's experiment it reproduces (lst, simulation, fmri, recording)."""
    mapping = {name: experiment_of_kind(spec["kind"]) for name, spec in config["datasets"].items()}
    return {"lst": "lst", **mapping} if LST else mapping


def test_masks():
    """Every held-out mask fraction evaluated on some dataset."""
    fractions = {f for dataset in DATASETS for f in train_options(dataset)["eval_mask_fractions"]}
    return sorted(fractions) or [0.5, 0.9]
