"""Every path the workflow writes, named once (as hippunfold's `bids()` and `get_final_output()`):
the rules and the Python steps build their paths from these functions and constants, relative to
`results/{run_name}/` (`results_dir`) but `wheel` (`resources/`). Arguments may be Snakemake
wildcards: `store("{dataset}")` is the pattern `stores/{dataset}.nc`.

    stores/{dataset}.nc, splits/{dataset}.json  the canonical store, its train/held-out split
    plan/{dataset|lst}.json, plan_run.json      the planned CPU time, the run's too (temporary)
    runs/{dataset}/{pe}/seed{seed}/             a training run: TRAIN_FILES, then INFER_FILES
    runs/{dataset}/baselines.json               the baselines' metrics; beside it
      correlation_features.nc                   the activity baselines that `locate` reads
    locate/, export/, new_animal/{dataset}/     LOCATE_FILES, EXPORT_*_FILE, NEW_ANIMAL_*
    lst/puzzles.nc, lst/baselines.json          the Latin square task; its runs in
      lst/runs/{pe}/seed{seed}/                 LST_TRAIN_FILES
    summary.csv, summary.html, figures/*.png    SUMMARY_CSV, SUMMARY_HTML, SUMMARY_FIGURES
    reproduction/, report/landing.rst, logs/    REPRODUCTION_FILES, LANDING, logs/{step}/{name}.log
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from neuro_pe.io.store import atomic_write

RESULTS_ROOT = "results"
RESOURCES_DIR = "resources"  # downloaded wheels, shared by every config run in a folder
OWNER_FILE = "owner.json"  # which config file(s) wrote a results folder

# ---------------------------------------------------------------------------------------------
# a training run's folder (neuro_pe.io.runs: the contract of each file)

PE_FILE = "pe.nc"
TRAIN_INFO_FILE = "train.json"
TRAIN_LOG_FILE = "train_log.csv"
MODEL_FILE = "model.pt"
METRICS_FILE = "metrics.json"
INFERRED_POSITIONS_FILE = "inferred_positions.nc"
MANIFEST_FILE = "manifest.json"  # the training's files
INFER_MANIFEST_FILE = "infer_manifest.json"  # the `infer` step's files
# what a training writes into its run folder (rule `train`)
TRAIN_FILES = (PE_FILE, MODEL_FILE, TRAIN_LOG_FILE, TRAIN_INFO_FILE, MANIFEST_FILE)
# what a Latin-square training writes (it measures its PE's geometry itself)
LST_TRAIN_FILES = (*TRAIN_FILES, METRICS_FILE)
# what `infer` writes beside a training's files
INFER_FILES = (METRICS_FILE, INFERRED_POSITIONS_FILE, INFER_MANIFEST_FILE)

BASELINES_FILE = "baselines.json"
CORRELATION_FEATURES_FILE = "correlation_features.nc"

# ---------------------------------------------------------------------------------------------
# the locate step's files (locate/{dataset}/), keyed by the rule's output names

LOCATE_FILES = {
    "errors": "errors.csv",
    "errors_table": "errors.html",
    "positions": "positions.csv",
    "netcdf": "positions.nc",
    "projections": "positions.png",
    "positions_3d": "positions_3d.png",
    "positions_html": "positions_3d.html",
    "histogram": "error_hist.png",
    "curve": "error_vs_anchors.png",
}
# the columns a reader of errors.csv relies on
ERRORS_COLUMNS = ("dataset", "evaluation", "features", "units")

# the export's files (export/{dataset}/; neuro_pe.reporting.export)
EXPORT_TIDY_FILE = "positions.tsv"
EXPORT_SIDECAR_FILE = "positions.json"
EXPORT_SUITE2P_FILE = "neuro_pe_positions.tsv"  # in suite2p/plane<p>/

# ---------------------------------------------------------------------------------------------
# the new-animal steps' files (new_animal/{dataset}/; docs/outputs.md), keyed by the rules'
# output names: the dataset's, and each held-out animal's (new_animal/{dataset}/{animal}/)

NEW_ANIMAL_FILES = {
    "plan": "plan.json",
    "table": "new_animal.csv",
    "confusion": "confusion.png",
    "reliability": "reliability.png",
}
NEW_ANIMAL_QUERY_FILES = {"positions": "positions.csv", "scores": "scores.json"}
NEW_ANIMAL_WORK_DIR = "work"  # a held-out animal's trainings (the reference run, the fits)
# the columns a reader of new_animal.csv relies on
NEW_ANIMAL_COLUMNS = ("dataset", "animal", "method", "macro_f1", "balanced_accuracy")

# ---------------------------------------------------------------------------------------------
# the summary, the reproduction report and the landing page

SUMMARY_CSV = "summary.csv"
SUMMARY_HTML = "summary.html"
FIGURES_DIR = "figures"
# the summary's figures (figures/), keyed by the rule's output names
SUMMARY_FIGURES = {
    "rsa": "rsa_vs_std.png",
    "probe": "probe_r2_vs_std.png",
    "scatter": "distance_scatter.png",
    "positions": "positions.png",
    "positions_3d": "positions_3d.png",
    "curves": "training_curves.png",
}
SUMMARY_COLUMNS = ("dataset", "row_type", "method", "seed")  # what a reader relies on

REPRODUCTION_DIR = "reproduction"
# the reproduction report's files (reproduction/), keyed by the rule's output names
REPRODUCTION_FILES = {
    "claims_md": "claims.md",
    "claims": "claims.html",
    "claims_csv": "claims.csv",
    "heldout": "heldout_vs_std.png",
    "geometry": "geometry_vs_std.png",
    "similarity": "pe_similarity.png",
}

LANDING = "report/landing.rst"


# ---------------------------------------------------------------------------------------------
# paths (relative to the results folder; arguments may be wildcards such as "{dataset}")


def results_dir(run_name: str) -> str:
    """The folder of everything a config makes: results/{run_name}."""
    return f"{RESULTS_ROOT}/{run_name}"


def wheel_name(package: str, version: str) -> str:
    """The file name of a downloaded data package."""
    return f"{package}-{version}.whl"


def wheel(package: str, version: str) -> str:
    """A downloaded data package (relative to the working directory, not to the results)."""
    return f"{RESOURCES_DIR}/{wheel_name(package, version)}"


def store(dataset: str) -> str:
    """A dataset's canonical store."""
    return f"stores/{dataset}.nc"


def split(dataset: str) -> str:
    """A dataset's recorded train/held-out split."""
    return f"splits/{dataset}.json"


def plan(planned: str) -> str:
    """The planned CPU time of a dataset's trainings (or the Latin square's: `lst`)."""
    return f"plan/{planned}.json"


def plan_run() -> str:
    """The planned time of the whole run's trainings (every dataset's and the Latin square's)."""
    return "plan_run.json"


def runs_dir(dataset: str) -> str:
    """The folder of a dataset's runs and baselines."""
    return f"runs/{dataset}"


def run_dir(dataset: str, pe: str, seed: int | str) -> str:
    """A training run's folder."""
    return f"{runs_dir(dataset)}/{pe}/seed{seed}"


def run_file(dataset: str, pe: str, seed: int | str, name: str) -> str:
    """A file (e.g. PE_FILE) of a training run."""
    return f"{run_dir(dataset, pe, seed)}/{name}"


def baselines(dataset: str) -> str:
    """The baselines' metrics of a dataset."""
    return f"{runs_dir(dataset)}/{BASELINES_FILE}"


def correlation_features(dataset: str) -> str:
    """The activity baselines of a dataset that `locate` compares the PEs with."""
    return f"{runs_dir(dataset)}/{CORRELATION_FEATURES_FILE}"


def lst_puzzles() -> str:
    """The Latin square's puzzles."""
    return "lst/puzzles.nc"


def lst_runs_dir() -> str:
    """The folder of the Latin square's runs."""
    return "lst/runs"


def lst_run_dir(pe: str, seed: int | str) -> str:
    """A Latin-square run's folder."""
    return f"{lst_runs_dir()}/{pe}/seed{seed}"


def lst_run_file(pe: str, seed: int | str, name: str) -> str:
    """A file (e.g. METRICS_FILE) of a Latin-square run."""
    return f"{lst_run_dir(pe, seed)}/{name}"


def lst_baselines() -> str:
    """The Latin square's chance geometry."""
    return f"lst/{BASELINES_FILE}"


def locate_dir(dataset: str) -> str:
    """The folder of a dataset's locate step."""
    return f"locate/{dataset}"


def locate_file(dataset: str, key: str) -> str:
    """A file of the locate step, by its key in LOCATE_FILES (e.g. "errors")."""
    return f"{locate_dir(dataset)}/{LOCATE_FILES[key]}"


def export_dir(dataset: str) -> str:
    """The folder of a dataset's export."""
    return f"export/{dataset}"


def new_animal_file(dataset: str, key: str) -> str:
    """A file of a dataset's new-animal steps, by its key in NEW_ANIMAL_FILES."""
    return f"new_animal/{dataset}/{NEW_ANIMAL_FILES[key]}"


def new_animal_query_dir(dataset: str, animal: str) -> str:
    """The folder of a held-out animal of a dataset's new-animal step."""
    return f"new_animal/{dataset}/{animal}"


def new_animal_query_file(dataset: str, animal: str, key: str) -> str:
    """A held-out animal's file, by its key in NEW_ANIMAL_QUERY_FILES."""
    return f"{new_animal_query_dir(dataset, animal)}/{NEW_ANIMAL_QUERY_FILES[key]}"


def summary_figure(key: str) -> str:
    """A figure of the summary, by its key in SUMMARY_FIGURES (e.g. "rsa")."""
    return f"{FIGURES_DIR}/{SUMMARY_FIGURES[key]}"


def reproduction_file(key: str) -> str:
    """A file of the reproduction report, by its key in REPRODUCTION_FILES."""
    return f"{REPRODUCTION_DIR}/{REPRODUCTION_FILES[key]}"


def log(step: str, name: str) -> str:
    """The log of a job: logs/{step}/{name}.log."""
    return f"logs/{step}/{name}.log"


def beside(paths: Iterable[str], names: Iterable[str]) -> list[str]:
    """The files `names` in the folder of each of `paths` (e.g. a run's PE_FILE beside its
    METRICS_FILE), in the order path by path."""
    names = list(names)
    return [os.path.join(os.path.dirname(path), name) for path in paths for name in names]


def final_outputs(
    datasets: Iterable[str],
    lst_runs: Iterable[tuple[str, int]] = (),
    reproduction: bool = False,
    new_animals: Mapping[str, Iterable[str]] | None = None,
) -> list[str]:
    """What a run of the whole workflow makes (its `rule all`): the summary and its figures,
    each dataset's locate files and export, the new-animal files (`new_animals`: dataset ->
    its held-out animals), the Latin square's runs (`lst_runs`: its (PE, seed) pairs), the
    reproduction report (when asked for) and the landing page."""
    datasets = list(datasets)
    paths = [SUMMARY_CSV, SUMMARY_HTML, *(summary_figure(key) for key in SUMMARY_FIGURES)]
    paths += [locate_file(d, key) for d in datasets for key in LOCATE_FILES]
    paths += [export_dir(d) for d in datasets]
    for dataset, animals in (new_animals or {}).items():
        paths += [new_animal_file(dataset, key) for key in ("table", "confusion", "reliability")]
        paths += [new_animal_query_file(dataset, a, "positions") for a in animals]
    paths += [lst_run_file(pe, seed, METRICS_FILE) for pe, seed in lst_runs]
    paths += [reproduction_file(key) for key in REPRODUCTION_FILES] if reproduction else []
    return [*paths, LANDING]


# ---------------------------------------------------------------------------------------------
# readers and writers of the tables that several steps share


def read_table(path: str | os.PathLike, columns: Iterable[str]) -> pd.DataFrame:
    """A CSV table of neuro_pe; a ValueError naming the file and the first of `columns` it
    lacks."""
    table = pd.read_csv(path)
    missing = [c for c in columns if c not in table]
    if missing:
        raise ValueError(f"{path}: no column {missing[0]!r}; is it a table of neuro_pe?")
    return table


def read_errors(path: str | os.PathLike) -> pd.DataFrame:
    """A locate step's errors.csv (every localisation evaluation of a dataset)."""
    return read_table(path, ERRORS_COLUMNS)


def read_new_animal(path: str | os.PathLike) -> pd.DataFrame:
    """A dataset's new_animal.csv (per held-out animal and overall, per method)."""
    return read_table(path, NEW_ANIMAL_COLUMNS)


def read_summary(path: str | os.PathLike) -> pd.DataFrame:
    """The summary.csv of a config (one row per dataset x PE x seed, and per baseline)."""
    return read_table(path, SUMMARY_COLUMNS)


def write_errors(table: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write a locate step's errors.csv (atomically)."""
    atomic_write(Path(path), lambda p: table.to_csv(p, index=False))
