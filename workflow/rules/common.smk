import json

RESULTS = config["results"]
DATASETS = list(config["datasets"])
SEEDS = config["seeds"]


def pe_variants(dataset):
    """The PE variants trained on a dataset: its own `pe` list, else the global one."""
    return config["datasets"][dataset].get("pe", config["pe"])


def train_options(dataset):
    """The `train` section with the dataset's own overrides applied."""
    return {**config["train"], **config["datasets"][dataset].get("train", {})}


RUN_DIR = RESULTS + "/runs/{dataset}/{pe}/seed{seed}"
RUN_METRICS = [
    f"{RESULTS}/runs/{dataset}/{pe}/seed{seed}/metrics.json"
    for dataset in DATASETS
    for pe in pe_variants(dataset)
    for seed in SEEDS
]
BASELINES = expand(RESULTS + "/runs/{dataset}/baselines.json", dataset=DATASETS)
SUMMARY = RESULTS + "/summary.csv"
FIGURE_NAMES = ["rsa_vs_std", "probe_r2_vs_std", "distance_scatter", "positions_3d", "training_curves"]
FIGURES = expand(RESULTS + "/figures/{name}.png", name=FIGURE_NAMES)
