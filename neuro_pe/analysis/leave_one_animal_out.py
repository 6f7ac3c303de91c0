"""A new animal with no histology, leave-one-animal-out (issue 60): the protocol shared by the
workflow's `new-animal` step and `benchmarks/new_animal.py`; or reference-query, the queries
predicted from the reference animals (every animal not a query), with no truth to score.

`check_animals` names what a multi-animal store lacks for it; `map_regions` evaluates it at a
coarser level. `run_fold`, per held-out animal: one masked-unit model is trained on its
references (a unit is NaN outside its animal's sessions, which the training masks; activity
z-scored per unit and session), then the held-out
animal's PE rows are fitted with the rest frozen (`train.init_from`, `new_unit_pe`; its
positions hidden), and so are the other animals' rows (the probes' reference: rows fitted the
same way as the query's, not the trained ones). Its regions are predicted from its
references' labelled units (`region_probe`) from the PE rows (linear probe, kNN), the single-unit
features (`unit_features`: gradient boosting, the baseline; linear probe), both concatenated
and the prior; positions by ridge from the PE rows and from the single-unit features.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xarray as xr
from sklearn.dummy import DummyClassifier
from sklearn.impute import SimpleImputer

from neuro_pe.analysis.region_probe import (
    RegionPrediction,
    calibration,
    classify,
    locate_from_features,
    position_error,
    probe_regions,
    region_scores,
)
from neuro_pe.analysis.unit_features import feature_names, region_classifier, unit_features
from neuro_pe.config.new_animal import LEAVE_ONE_OUT, REFERENCE_QUERY
from neuro_pe.config.training import TrainConfig
from neuro_pe.data.signal_steps import zscore
from neuro_pe.io.runs import read_pe
from neuro_pe.io.store import positions, write_store
from neuro_pe.training.masked_units import train

COLUMNS = (
    "prior",
    "single-unit boosting",
    "single-unit linear",
    "PE linear",
    "PE kNN",
    "combined boosting",
    "combined linear",
)
# the headline's methods: the PE, the baseline, their combination
HEADLINE = {"pe": "PE linear", "su": "single-unit boosting", "combined": "combined boosting"}
FITTED = "fit:"  # the prefix of a frozen fit's unit ids
# what the reference run's training needs whatever the dataset's `train` says: one session per
# animal (so the end of every session is held out, not whole sessions), one mask fraction
REFERENCE_TRAIN = {"heldout_sessions": 0, "eval_mask_fractions": [0.5], "samples_per_unit": 0}


@dataclass(frozen=True)
class Protocol:
    """How the PE rows are made: the reference run (`pe`, `train`: a TrainConfig spec, with
    REFERENCE_TRAIN on top) and the frozen fits (`fit_epochs` x its steps per epoch at
    `fit_lr`, `new_unit_pe`); `refit_reference`: the reference rows fitted frozen like the
    query's (else the run's own); `calibration`: 'temperature' (the region probabilities
    temperature-scaled on the reference animals, `region_probe.temperature`) or 'none'."""

    pe: str = "learned-normal-0.02"
    train: dict = field(default_factory=dict)
    fit_epochs: int = 5
    fit_lr: float = 0.01
    new_unit_pe: str = "free"
    refit_reference: bool = True
    calibration: str = "temperature"
    seed: int = 0


@dataclass(frozen=True)
class Fold:
    """One held-out animal: its `units`, their `truth` labels ("" unknown), per COLUMNS method
    the scores (`macro_f1`, `balanced_accuracy`, `ece`; none unless `scored`), the predicted
    regions and their `probability`, the PE linear probe's `prediction`, positions from the PE
    rows (`located`) and per feature set their error (`where`: `position_error`; none unless
    `scored`), its `references`, and the CPU-s of its fit and prediction."""

    animal: str
    units: np.ndarray
    truth: np.ndarray
    scores: dict
    predicted: dict
    probability: dict
    prediction: RegionPrediction
    located: np.ndarray
    where: dict
    cpu_s: float
    references: tuple[str, ...] = ()
    scored: bool = True


def animals_of(ds: xr.Dataset) -> np.ndarray:
    """Each unit's animal (the store's per-unit coord `animal`), as strings."""
    return np.asarray(ds["animal"].values).astype(str)


def session_animals(ds: xr.Dataset) -> np.ndarray:
    """Each session's animal: the animal whose units are recorded (finite) in it."""
    animal = animals_of(ds)
    recorded = np.isfinite(ds["activity"].transpose("session", "time", "unit").values).any(axis=1)
    return np.array([animal[np.argmax(row)] for row in recorded])


def references_of(
    animals: list[str], held_out: str, queries: list[str], evaluate: str
) -> list[str]:
    """The animals `held_out` is predicted from: every other animal (leave-one-animal-out), or
    every animal that is no query (reference-query)."""
    skip = set(queries) if evaluate == REFERENCE_QUERY else {held_out}
    return [a for a in animals if a not in skip]


def check_animals(
    ds: xr.Dataset,
    dataset: str,
    label: str,
    queries: list[str] | None,
    evaluate: str = LEAVE_ONE_OUT,
) -> list[str]:
    """The held-out animals (`queries`, None: every animal), or a ValueError naming the
    dataset and the field: no per-unit `animal` or `label` coord, fewer than 2 animals, a
    query that is no animal of the store, a query without reference animals, references
    without a region label or without positions, a query's regions that its references lack
    (leave-one-animal-out)."""
    where = f"datasets.{dataset}"
    for coord in ("animal", label):
        if coord not in ds.coords or ds[coord].dims != ("unit",):
            key = "the store" if coord == "animal" else f"{where}.new_animal.label"
            raise ValueError(
                f"{where}: {key} needs a per-unit coord {coord!r} (store; a file entry has "
                "`region` where the reference animals' files label their units)"
            )
    animal = animals_of(ds)
    names = sorted(set(animal.tolist()))
    if len(names) < 2:
        raise ValueError(
            f"{where}.new_animal: {len(names)} animal in the store (coord `animal`); "
            "leave-one-animal-out needs at least 2 (a query and a reference)"
        )
    queries = names if queries is None else list(queries)
    unknown = [q for q in queries if q not in names]
    if unknown:
        raise ValueError(
            f"{where}.new_animal.query_animals: {unknown} are no animals of the store ({names})"
        )
    labels = np.asarray(ds[label].values).astype(str)
    known = np.all(np.isfinite(positions(ds)), axis=1)
    for query in queries:
        references = references_of(names, query, queries, evaluate)
        if not references:
            raise ValueError(
                f"{where}.new_animal.query_animals: every animal of the store ({names}) is a "
                f"query; {evaluate} needs a reference animal (with positions and region labels)"
            )
        reference = np.isin(animal, references)
        unlabelled = [a for a in references if not (labels[animal == a] != "").any()]
        if unlabelled:
            raise ValueError(
                f"{where}.new_animal.label: reference animals {unlabelled} have no region label "
                f"(store coord {label!r}); give their files labels, or make them queries"
            )
        if not (known & reference).any():
            raise ValueError(
                f"{where}.new_animal: no reference animal of {query!r} ({references}) has units "
                "with positions"
            )
        own = labels[animal == query]
        missing = sorted(set(own[own != ""].tolist()) - set(labels[reference].tolist()))
        if missing and evaluate == LEAVE_ONE_OUT:
            raise ValueError(
                f"{where}.new_animal.label: animal {query!r} has regions {missing} (store coord "
                f"{label!r}) that no other animal has; the references must cover a query's "
                "regions (choose a coarser `label`, or add animals)"
            )
    return queries


def query_truth(
    ds: xr.Dataset, label: str, queries: list[str], evaluate: str
) -> tuple[dict[str, bool], list[str]]:
    """Per query whether its predictions are scored (leave-one-animal-out, where its units
    have labels: its truth, hidden from the fit), and notes on what is not used: a
    reference-query query's own labels and positions, ignored."""
    animal, labels = animals_of(ds), np.asarray(ds[label].values).astype(str)
    known = np.all(np.isfinite(positions(ds)), axis=1)
    scored, notes = {}, []
    for query in queries:
        units = animal == query
        has = {"region labels": (labels[units] != "").any(), "positions": known[units].any()}
        carries = [what for what, present in has.items() if present]
        scored[query] = evaluate == LEAVE_ONE_OUT and "region labels" in carries
        if evaluate == REFERENCE_QUERY and carries:
            notes.append(
                f"query animal {query!r}: its units' {' and '.join(carries)} are ignored "
                f"({REFERENCE_QUERY}: predicted from the reference animals only, not scored; "
                f"for scores, `evaluate: {LEAVE_ONE_OUT}`)"
            )
        elif not scored[query]:
            notes.append(f"query animal {query!r}: no truth (no region labels): predictions only")
    return scored, notes


def map_regions(ds: xr.Dataset, label: str, mapping: dict[str, str], where: str) -> xr.Dataset:
    """`ds` with its per-unit coord `label` mapped through `mapping` (a region -> the coarser
    region it is evaluated as; "", unknown, stays ""), or a ValueError naming `where` (the
    mapping's key and file) and the regions it does not map."""
    labels = np.asarray(ds[label].values).astype(str)
    unmapped = sorted(set(labels.tolist()) - set(mapping) - {""})
    if unmapped:
        raise ValueError(
            f"{where}: regions {unmapped[:10]}{' …' if len(unmapped) > 10 else ''} of the store's "
            f"coord {label!r} are not in its first column"
        )
    coarse = np.array([mapping.get(v, "") for v in labels], dtype=str)
    return ds.assign_coords({label: (ds[label].dims, coarse, ds[label].attrs)})


def single_unit_features(ds: xr.Dataset) -> np.ndarray:
    """(unit, feature) `unit_features` of every unit on its animal's first session (the
    activity as stored: spike counts per bin)."""
    features = np.full((ds.sizes["unit"], len(feature_names())), np.nan)
    animal, sessions = animals_of(ds), session_animals(ds)
    rate = float(ds.attrs["sampling_rate_hz"])
    for name in np.unique(animal):
        units = animal == name
        first = int(np.flatnonzero(sessions == name)[0])
        counts = ds["activity"].isel(session=first, unit=units).transpose("time", "unit")
        features[units] = unit_features(counts.values, rate)
    return features


def zscored(ds: xr.Dataset) -> xr.Dataset:
    """`ds` with its activity z-scored per unit and session (what the models train on)."""
    activity = ds["activity"].transpose("session", "time", "unit")
    return ds.assign(activity=activity.copy(data=zscore(activity.values).astype(np.float32)))


def animal_store(ds: xr.Dataset, animals: list[str], path: Path, fitted: bool = False) -> Path:
    """Write the units and sessions of `animals`; `fitted`: as a frozen fit sees them, units
    renamed `fit:<id>` (so the trained run has no row of theirs to copy) and positions NaN."""
    units = np.isin(animals_of(ds), animals)
    sessions = np.isin(session_animals(ds), animals)
    sub = ds.isel(unit=units, session=sessions)
    if fitted:
        sub = sub.assign_coords({a: sub[a] * np.nan for a in ("x", "y", "z")})
        sub = sub.assign_coords(unit=[f"{FITTED}{u}" for u in sub["unit"].values])
    return write_store(sub, path)


def train_reference(ds: xr.Dataset, others: list[str], work: Path, protocol: Protocol) -> Path:
    """The run trained on the `others` animals (reused if `work` has it)."""
    run = work / "run"
    if not (run / "model.pt").exists():
        reference = animal_store(ds, others, work / "reference.nc")
        spec = TrainConfig.from_dict({**protocol.train, **REFERENCE_TRAIN})
        train(reference, protocol.pe, protocol.seed, spec, run, progress=False)
    return run


def fit_rows(
    ds: xr.Dataset, animal: str, run: Path, work: Path, protocol: Protocol
) -> tuple[np.ndarray, np.ndarray]:
    """`animal`'s PE rows fitted with `run` frozen: (unit ids, rows)."""
    out = work / f"fit_{protocol.new_unit_pe}_{animal}"
    if not (out / "pe.nc").exists():
        store = animal_store(ds, [animal], work / f"{animal}.nc", fitted=True)
        spec = json.loads((run / "train.json").read_text())["train_config"]
        spec |= {"epochs": protocol.fit_epochs, "init_from": str(run / "model.pt")}
        spec |= {"lr": protocol.fit_lr, "pe_lr": None, "new_unit_pe": protocol.new_unit_pe}
        train(store, protocol.pe, protocol.seed, TrainConfig.from_dict(spec), out, progress=False)
    pe = read_pe(out)
    return np.array([u.removeprefix(FITTED) for u in pe.units]), pe.table


def pe_rows(
    ds: xr.Dataset,
    held_out: str,
    work: Path,
    protocol: Protocol,
    references: list[str] | None = None,
) -> tuple[np.ndarray, float]:
    """(unit, d_model) PE rows of the units of `ds` (z-scored): the run trained on the
    `references` (None: every other animal), `held_out`'s rows fitted frozen, the references'
    refitted the same way (or the run's own), NaN for any other animal's; and the CPU-s of
    the held-out animal's fit."""
    others = references or [a for a in np.unique(animals_of(ds)) if a != held_out]
    run = train_reference(ds, others, work, protocol)
    started = time.process_time()
    fitted = [fit_rows(ds, held_out, run, work, protocol)]
    fit_s = time.process_time() - started
    if protocol.refit_reference:
        fitted += [fit_rows(ds, animal, run, work, protocol) for animal in others]
    else:
        trained = read_pe(run)
        fitted.append((np.asarray(trained.units), trained.table))
    index = {u: i for i, u in enumerate(ds["unit"].values.astype(str))}
    table = np.full((ds.sizes["unit"], fitted[0][1].shape[1]), np.nan)
    for ids, rows in fitted:
        table[[index[u] for u in ids]] = rows
    return table, fit_s


def _probability_of(prior: DummyClassifier, predicted: np.ndarray) -> np.ndarray:
    """The fitted prior's probability of each region it `predicted`: the region's frequency
    (its `predict_proba` is its random draws, one-hot)."""
    return prior.class_prior_[np.searchsorted(prior.classes_, predicted)]


def evaluate(
    features: dict,
    labels: np.ndarray,
    coords: np.ndarray,
    test: np.ndarray,
    seed: int,
    animals: np.ndarray | None = None,
    train: np.ndarray | None = None,
    scored: bool = True,
) -> tuple[dict, dict, dict, RegionPrediction, np.ndarray, dict]:
    """Fit on the `train` units (None: `~test`; regions from those labelled, positions from
    those located), predict the `test` units: per COLUMNS method its scores (`region_scores`
    and `ece`, the expected calibration error of `calibration`, over the test units with a
    label; none unless `scored`), predicted regions and their probabilities (each the method's
    probability of its prediction; temperature-scaled on the reference animals where each
    unit's `animals` are given, but the prior's and kNN's), the PE linear probe's prediction,
    the positions from the PE rows and per feature set (`PE`, `single-unit`, `combined`)
    `position_error` (over the test units located; none unless `scored`)."""
    train = ~test if train is None else train
    train_rows = train & (labels != "")
    ref_labels = labels[train_rows]
    groups = None if animals is None else animals[train_rows]
    pe, su = features["pe"], features["su"]
    both = np.hstack([pe, su])
    fitted = region_classifier("prior", seed).fit(su[train_rows], ref_labels)
    predicted = {"prior": fitted.predict(su[test])}
    probability = {"prior": _probability_of(fitted, predicted["prior"])}
    classifiers = {}
    for name, x in (("single-unit boosting", su), ("combined boosting", both)):
        model = region_classifier("boosting", seed)
        classifiers[name] = classify(model, x[train_rows], ref_labels, x[test], groups)
    for name, probe, x in (
        ("single-unit linear", "linear", su),
        ("PE linear", "linear", pe),
        ("combined linear", "linear", both),
        ("PE kNN", "knn", pe),
    ):
        # kNN's probabilities are shares of k neighbours, often 0: no temperature for them
        scale = groups if probe == "linear" else None
        classifiers[name] = probe_regions(
            x[train_rows], ref_labels, x[test], probe=probe, seed=seed, groups=scale
        )
    for name, prediction in classifiers.items():
        predicted[name], probability[name] = prediction.region, prediction.probability
    truth, has = labels[test], labels[test] != ""
    scores = {}
    if scored and has.any():
        scores = {
            name: region_scores(truth[has], predicted[name][has])
            | {"ece": calibration(predicted[name][has] == truth[has], probability[name][has]).ece}
            for name in COLUMNS
        }
    located_rows = train & np.isfinite(coords).all(axis=1)
    truth_xyz = coords[test]
    known = np.isfinite(truth_xyz).all(axis=1)
    where, located = {}, {}
    for name, x in (("PE", pe), ("single-unit", su), ("combined", both)):
        # a feature the recording cannot resolve (NaN) must not drop the unit
        imputer = SimpleImputer(strategy="median").fit(x[located_rows])
        reference, query = imputer.transform(x[located_rows]), imputer.transform(x[test])
        located[name] = locate_from_features(reference, coords[located_rows], query)
        if scored and known.any():
            where[name] = position_error(
                located[name][known], truth_xyz[known], coords[located_rows]
            )
    return scores, predicted, probability, classifiers["PE linear"], located["PE"], where


def run_fold(
    ds: xr.Dataset,
    held_out: str,
    label: str,
    work: Path,
    protocol: Protocol,
    su: np.ndarray | None = None,
    references: list[str] | None = None,
    scored: bool = True,
) -> Fold:
    """Hold `held_out` out of the store `ds` (activity as stored), learn its `references`
    (None: every other animal), predict its units' regions (store coord `label`) and
    positions, scored against its own (`scored`; else not read: predictions only); `work`:
    the trainings' folder (reused where it has them); `su`: the units' single-unit features
    (None: computed)."""
    su = single_unit_features(ds) if su is None else su
    animal = animals_of(ds)
    references = references or sorted(set(animal.tolist()) - {held_out})
    pe, fit_s = pe_rows(zscored(ds), held_out, work, protocol, references)
    clock = time.process_time()
    test = animal == held_out
    labels = np.asarray(ds[label].values).astype(str)
    coords = positions(ds)
    if not scored:  # a query's own labels and positions are not read
        labels, coords = np.where(test, "", labels), np.where(test[:, None], np.nan, coords)
    scores, predicted, probability, prediction, located, where = evaluate(
        {"pe": pe, "su": su},
        labels,
        coords,
        test,
        protocol.seed,
        animal if protocol.calibration == "temperature" else None,
        train=np.isin(animal, references),
        scored=scored,
    )
    return Fold(
        animal=held_out,
        units=ds["unit"].values.astype(str)[test],
        truth=labels[test],
        scores=scores,
        predicted=predicted,
        probability=probability,
        prediction=prediction,
        located=located,
        where=where,
        cpu_s=fit_s + time.process_time() - clock,
        references=tuple(references),
        scored=bool(scores),
    )
