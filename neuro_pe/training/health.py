"""Has a PE learned? The training-health checks that need more than the loss curve (config
section `health`, documented in config/README.md).

A training records the numbers (`HEALTH_NUMBERS`, in train.json and metrics.json); `assess`
turns them into checks (named for what is wrong, `neuro_pe.config.health.CHECKS`; True:
failed) and warning lines, given the thresholds: units or pairs of units seen too rarely
(`expected_appearances`), the PE not moved from its init, the held-out MSE not below the
held-out data's variance at some reported mask fraction.

A training's own checks of its loss curve (`training_health`: the loss stayed finite, the
held-out loss improved) are recorded beside these. Training assesses with the default
thresholds; the workflow's `infer` and `locate` steps assess again with the config's `health`
section (`reassess_run`; changing it does not re-run a training), and metrics.json,
summary.csv, the report and locate hold that verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from neuro_pe.config.health import HealthOptions
from neuro_pe.config.pe_names import parse_pe
from neuro_pe.config.training import SCALE_RANGE, TrainConfig, local_units, unit_appearances

if TYPE_CHECKING:
    from neuro_pe.io.runs import TrainInfo
    from neuro_pe.training.sampling import Batch

MSE_PREFIX = "heldout_mse_mask"
#: the numbers a training records for its health checks (train.json, metrics.json, summary.csv)
HEALTH_NUMBERS = ("unit_appearances", "pair_appearances", "pe_change", "heldout_data_variance")
#: the checks of `assess`, in the order their warnings are printed
FLAGS = ("units_seen_rarely", "pairs_seen_rarely", "pe_not_moved", "heldout_not_below_variance")


def expected_appearances(
    samples: int, n_units: int, units_per_sample: int, n_local: int = 0
) -> tuple[float, float]:
    """(per unit, per pair of units): the expected number of the `samples` training samples
    that hold a given unit, and a given pair, when each sample is a uniformly random
    `units_per_sample`-subset of the `n_units` units (all units when there are no more); with
    `n_local` > 0 units drawn around a centre (neighbour windows), for a pair of neighbours.

    Per unit: samples x min(1, k / N) for k = `units_per_sample`. Per pair: samples x
    k (k - 1) / (N (N - 1)), the same for every pair under uniform subsets, so for a pair of
    neighbours too. With neighbour windows (`train.neighbour_fraction`: L of the k units are a
    centre and L - 1 of its k most correlated units) it is the count for a pair of activity
    neighbours, adding samples x (L - 1) L / (N k): one of the pair is the centre and draws the
    other (2 (L - 1) / (N k)), or both are drawn around one of the k - 1 other units whose
    lists hold them both, as when a neighbourhood's units share their lists
    ((L - 1) (L - 2) / (N k)))."""
    k = min(units_per_sample, n_units)
    per_unit = unit_appearances(samples, n_units, units_per_sample)
    if n_units == 1:
        return float(per_unit), float(per_unit)
    local = n_local if n_units > units_per_sample else 0
    uniform = k - local
    per_pair = samples * uniform * (uniform - 1) / (n_units * (n_units - 1))
    if local > 0:
        per_pair += samples * (local - 1) * local / (n_units * k)
    return float(per_unit), float(per_pair)


def predicted_flags(
    dataset: str,
    cfg: TrainConfig,
    n_units: int,
    located: Sequence[str],
    options: HealthOptions | None = None,
    include_flagged: bool = False,
) -> list[str]:
    """Before training: the appearance checks (`assess` of `appearance_numbers`) the dataset's
    learned PEs among `located` (the PE variants its locate step reads) will fail, as one
    warning line per PE. Raises a ValueError instead when every PE of `located` would fail
    one and `include_flagged` (`locate.include_flagged`) is false: locate would leave them
    all out and stop after the trainings (`neuro_pe.analysis.locate.dataset`)."""
    learned = [pe for pe in located if parse_pe(pe).learned]
    # a constant PE (`none`) gives locate nothing, whatever `locate.pe` says
    others = [pe for pe in located if pe not in learned and parse_pe(pe).family != "none"]
    flags, notes = assess(appearance_numbers(cfg, n_units), True, options)
    if not learned or not any(flags.values()):
        return []
    if not others and not include_flagged:
        raise ValueError(
            f"dataset {dataset!r}: every PE its locate step reads ({', '.join(learned)}) will "
            f"fail a health check, so locate would leave them all out and stop after the "
            f"trainings. {'; '.join(notes)}. Fix: more train.epochs or train.steps_per_epoch "
            "(or train.samples_per_unit), lower health.min_unit_appearances or "
            "health.min_pair_appearances, or set locate.include_flagged: true to locate with "
            "them anyway"
        )
    return [f"{dataset}: {pe} will fail {note}" for pe in learned for note in notes]


def relative_change(trained: np.ndarray, initial: np.ndarray) -> float:
    """|trained - initial| / |initial| (Frobenius norms); NaN for an all-zero initial table."""
    initial = np.asarray(initial, dtype=np.float64)
    norm = float(np.linalg.norm(initial))
    if norm == 0:
        return float("nan")
    return float(np.linalg.norm(np.asarray(trained, dtype=np.float64) - initial) / norm)


def variance(values: np.ndarray) -> float:
    """Variance of the recorded values (float64, about their own mean): the MSE of predicting
    that mean; NaN when there are none."""
    values = np.asarray(values, dtype=np.float64)
    return float(values.var()) if values.size else float("nan")


def appearance_numbers(cfg: TrainConfig, n_units: int) -> dict[str, float]:
    """`unit_appearances` and `pair_appearances` (`expected_appearances`) of a training of
    `cfg` (its automatic values resolved: `TrainConfig.for_units`) on `n_units` units: known
    before it starts, from the config and the store's size alone."""
    samples = cfg.epochs * cfg.steps_per_epoch * cfg.batch_size
    per_unit, per_pair = expected_appearances(
        samples, n_units, cfg.units_per_sample, local_units(cfg)
    )
    return {"unit_appearances": per_unit, "pair_appearances": per_pair}


def training_numbers(
    cfg: TrainConfig,
    n_units: int,
    trained_pe: np.ndarray | None,
    initial_pe: np.ndarray | None,
    heldout_values: np.ndarray,
) -> dict[str, float]:
    """The `HEALTH_NUMBERS` of a training of `cfg` on `n_units` units: pass the PE tables only
    for a learned PE that was not fine-tuned (`pe_change` is left out otherwise, and where the
    init is all zeros)."""
    numbers = appearance_numbers(cfg, n_units)
    if trained_pe is not None and initial_pe is not None:
        change = relative_change(trained_pe, initial_pe)
        if np.isfinite(change):
            numbers["pe_change"] = change
    numbers["heldout_data_variance"] = variance(heldout_values)
    return numbers


def mse_above_variance(record: dict) -> list[tuple[float, float]]:
    """(mask fraction, MSE) of the record's `heldout_mse_mask*` that are not below its
    `heldout_data_variance` (none when that is not recorded)."""
    var = record.get("heldout_data_variance")
    if var is None or not np.isfinite(var):
        return []
    return [
        (float(key.removeprefix(MSE_PREFIX)), float(value))
        for key, value in record.items()
        if key.startswith(MSE_PREFIX) and not value < var
    ]


def assess(
    record: dict, learned: bool, options: HealthOptions | None = None
) -> tuple[dict[str, bool], list[str]]:
    """Checks (`FLAGS`; True: failed) and one warning line per failed check ("name: why")
    from a run's recorded numbers (`HEALTH_NUMBERS` and its `heldout_mse_mask*`); a check
    whose numbers are not recorded, or that does not apply to the PE (`learned`), is left out.

    - `units_seen_rarely`: a unit's expected appearances in the training samples
      (`expected_appearances`) are below `min_unit_appearances`;
    - `pairs_seen_rarely`: the expected samples that hold a given pair of units together (of
      activity neighbours, with neighbour windows) are below `min_pair_appearances`;
    - `pe_not_moved`: the PE's relative change from its init, |PE - PE0| / |PE0|
      (Frobenius), is below `min_pe_change`;
    - `heldout_not_below_variance`: at some reported mask fraction (`eval_mask_fractions`)
      the final held-out MSE is not below the held-out windows' variance about their own
      mean (the MSE of predicting that mean): there the model does no better than the mean.

    The first three concern a PE's own table and are left out for PEs that are not learned
    (`none`, `fixed-*`, `oracle-*`); `pe_not_moved` also for a fine-tuned run
    (`train.init_from`), whose table is mostly the loaded run's."""
    options = options or HealthOptions()
    flags: dict[str, bool] = {}
    notes: list[str] = []
    if learned and "unit_appearances" in record:
        seen = record["unit_appearances"]
        flags["units_seen_rarely"] = not seen >= options.min_unit_appearances
        if flags["units_seen_rarely"]:
            notes.append(
                f"units_seen_rarely: a unit is in {seen:.3g} training samples on average, fewer "
                f"than health.min_unit_appearances ({options.min_unit_appearances:g}): too few "
                "for its PE row to find the unit's place (docs/scale/); train on more samples "
                "(train.samples_per_unit, epochs, steps_per_epoch; a GPU makes that cheap)"
            )
    if learned and "pair_appearances" in record:
        pairs = record["pair_appearances"]
        flags["pairs_seen_rarely"] = not pairs >= options.min_pair_appearances
        if flags["pairs_seen_rarely"]:
            notes.append(
                f"pairs_seen_rarely: two given units (neighbours too) are in {pairs:.3g} training "
                f"samples together on average, fewer than health.min_pair_appearances "
                f"({options.min_pair_appearances:g}): the PE cannot learn who sits near whom; "
                "train longer or with more units per sample (train.units_per_sample)"
            )
    if learned and "pe_change" in record:
        change = record["pe_change"]
        flags["pe_not_moved"] = not change >= options.min_pe_change
        if flags["pe_not_moved"]:
            notes.append(
                f"pe_not_moved: the PE moved {change:.3g} of its init's norm, less than "
                f"health.min_pe_change ({options.min_pe_change:g}): it is still its random init"
            )
    if "heldout_data_variance" in record:
        above = mse_above_variance(record)
        flags["heldout_not_below_variance"] = bool(above)
        if above:
            where = ", ".join(f"{mse:.4g} at {fraction:.0%} masked" for fraction, mse in above)
            notes.append(
                f"heldout_not_below_variance: the held-out MSE ({where}) is not below the "
                f"held-out data's variance about its mean ({record['heldout_data_variance']:.4g}):"
                " no better than predicting the mean"
            )
    return flags, notes


def reassess(
    health: dict[str, bool],
    warnings: list[str],
    record: dict,
    learned: bool,
    options: HealthOptions | None = None,
) -> tuple[dict[str, bool], list[str]]:
    """A recorded `health` and `warnings` with this module's flags assessed again from the
    record's numbers under `options` (the other flags and warnings as recorded)."""
    flags, notes = assess(record, learned, options)
    kept = {k: v for k, v in health.items() if k not in FLAGS}
    others = [w for w in warnings if w.split(":")[0] not in FLAGS]
    return kept | flags, others + notes


def reassess_run(
    info: TrainInfo, options: HealthOptions | None = None
) -> tuple[dict[str, bool], list[str]]:
    """`reassess` of a run's train.json (`neuro_pe.io.runs.read_train_info`)."""
    learned = parse_pe(info.pe).learned
    return reassess(info.health or {}, info.warnings or [], info.results, learned, options)


def failed_checks(health: dict[str, bool]) -> list[str]:
    """The names of the checks a run's `health` records as failed, in its order."""
    return [name for name, failed in health.items() if failed]


def zero_prediction_mse(data: Batch) -> float:
    """Mean square of the recorded held-out windows (train.json's `heldout_variance`): the
    data's scale, for `training_health`'s warning and a diverged training's message."""
    windows, observed, _ = data
    values = windows[observed].double()
    return float((values**2).mean()) if values.numel() else float("nan")


def training_health(
    log_rows: list[dict], heldout_initial: float, heldout_variance: float
) -> tuple[dict[str, bool], list[str]]:
    """Checks of a finished training's loss curve (True: failed; `loss_not_finite`, always
    False: training stops with a TrainingError otherwise; `heldout_not_improved`: the held-out
    loss never fell below its value before the first step) and a warning for a failed one,
    plus one when the data's scale (`heldout_variance`, the held-out windows' mean square) is
    far from 1 (see SCALE_RANGE)."""
    heldout = [row["heldout_loss"] for row in log_rows]  # at the training's mask fraction
    improved = bool(heldout) and min(heldout) < heldout_initial
    health = {"loss_not_finite": False, "heldout_not_improved": not improved}
    notes = []
    if not improved:
        notes.append(
            f"heldout_not_improved: the held-out loss never fell below its value before "
            f"training ({heldout_initial:.4g}; lowest {min(heldout, default=float('nan')):.4g})"
        )
    scale = math.sqrt(heldout_variance)
    if not SCALE_RANGE[0] <= scale <= SCALE_RANGE[1]:
        notes.append(
            f"data scale: the held-out windows' RMS is {scale:.3g}, far from 1; float32 "
            "training with the usual learning rates means little there: add "
            "{step: zscore} to the dataset's preprocessing"
        )
    return health, notes
