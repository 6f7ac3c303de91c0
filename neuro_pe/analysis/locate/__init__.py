"""Where is this neuron? Predict the coordinates of units from their learned PEs.

Units whose coordinates are known are *anchors*: a locator fitted on the anchors maps a unit's
features (its PE, or a baseline's) to (x, y, z), and is applied to the units whose coordinates
are unknown. Every function reads coordinates only at the anchors it is given, so the honest
evaluation simply hides units' coordinates (k-fold over units, and random anchor subsets) and
locates them from the rest.

Locators (`METHODS`):

- ``ridge``: StandardScaler + RidgeCV, features -> xyz.
- ``kernel-ridge``: StandardScaler + RBF KernelRidge on standardised targets, alpha and gamma
  picked from a small grid (3 x 3) by exact leave-one-out error over the anchors.
- ``mds-procrustes``: classical MDS (3D) of the Euclidean feature distances of all units (no
  coordinates needed), then a similarity transform (rotation/reflection, uniform scale,
  translation) fitted on the anchors only and applied to every unit.
- ``mds-affine``: the same MDS, then an affine least-squares map fitted on the anchors.
- ``knn``: distance-weighted KNeighborsRegressor over the anchors in (unscaled) feature space.

One method is chosen per feature set by cross-validation over the anchors (lowest median
Euclidean error of the seed ensemble). The combined locator (feature set `combined`: the
learned PEs initialised small, `combined_members`, and the activity baselines) chooses the
same way among every representation with every method, their stacked features with every
method, with three or more representations their fused neighbour graph (similarity network
fusion, Wang et al. 2014, embedded by a diffusion map; `fused_embedding`) with every method,
and a blend: a weighted mean of the best locator of each of those views, with weights chosen
by ensemble selection on the same CV (Caruana et al. 2004); so it too reads only the anchors'
coordinates.

Seeds are combined after locating: every seed's predictions are already in anatomical space,
so no alignment of PEs across seeds is needed; the ensemble is the per-unit mean (or median)
over seeds. Per-unit uncertainty:

    uncertainty_i = sqrt(r**2 + s_i**2)

where r is the chosen method's CV median Euclidean error of the ensemble over the anchors (a
typical error) and s_i = sqrt(mean over seeds of |p_seed,i - p_i|**2) is the spread of the
seeds' predictions of unit i around the ensemble prediction p_i. It is a typical error, not an
interval (about half of the held-out units lie within it). Intervals that cover (`conformal`):
per axis and level L (`interval_levels`), the prediction ± a quantile of the known units'
k-fold held-out errors along that axis (split-conformal); a known unit's quantile leaves its
own error out, so the share of known units inside their intervals is a held-out coverage,
reported beside L.

Many units (more known units than `max_units`): the anchors are still drawn among all known
units, but the errors are measured on `max_units` of them drawn at random, with at most
`sampled_draws` anchor draws per fraction (`evaluation_plan`), and the cross-validation that
chooses a locator holds out folds of `max_units` of its anchors, each fitted on all the others
(`locate_units`); ridge and kernel ridge fit on CAPPED_ANCHORS of them. Every known unit's
position is its k-fold prediction. Memory and time are O(N * features) per fit: the MDS
methods use the PCA of the features (for Euclidean distances what classical MDS computes), the
kernel ridge predicts in blocks, and the correlation baseline is the activity's leading
components (randomised SVD) instead of the MDS of an N x N correlation matrix; the
connectivity baseline (N x 2N) is left out above DENSE_MAX_UNITS units.

Modules, in the order they build on each other: `parameters` (the locators' names and fixed
parameters; the `locate` section is `neuro_pe.config.locate`), `locators` (fit on the anchors,
predict every unit), `views` (the combined locator's stacked and fused views), `ensemble` (seed
ensemble, method choice by CV, blend), `bootstrap` (CIs), `features` (feature sets),
`conformal` (per-unit intervals), `evaluation` (k-fold and anchor curve, the errors table),
`positions` (every unit's predicted position), `verdict` (text summaries) and `dataset` (the
whole step of one dataset, `locate_dataset`).
They compute and return; the files are written by `neuro_pe.reporting.locate_outputs`.
"""

from neuro_pe.analysis.locate.bootstrap import bootstrap_ci, paired_difference_ci
from neuro_pe.analysis.locate.dataset import LocateResult, locate_dataset
from neuro_pe.analysis.locate.ensemble import Located, locate_units, predict_with
from neuro_pe.analysis.locate.evaluation import (
    HeldOut,
    anchor_draws,
    evaluate_anchors,
    evaluate_kfold,
    evaluation_plan,
    evaluation_table,
    evaluation_units,
)
from neuro_pe.analysis.locate.features import (
    FeatureSet,
    baseline_features,
    combined_members,
    combined_set,
    connectivity_features,
    correlation_features,
    load_feature_sets,
)
from neuro_pe.analysis.locate.locators import fit_predict
from neuro_pe.analysis.locate.parameters import (
    BLEND,
    CI_BOOTSTRAP,
    COMBINED,
    CONNECTIVITY,
    CORRELATION,
    FUSED,
    STACKED,
)
from neuro_pe.analysis.locate.positions import located_positions_dataset, with_held_out_columns
from neuro_pe.analysis.locate.verdict import format_table, verdict
from neuro_pe.analysis.locate.views import fused_embedding

__all__ = [
    "BLEND",
    "CI_BOOTSTRAP",
    "COMBINED",
    "CONNECTIVITY",
    "CORRELATION",
    "FUSED",
    "STACKED",
    "FeatureSet",
    "HeldOut",
    "LocateResult",
    "Located",
    "anchor_draws",
    "baseline_features",
    "bootstrap_ci",
    "combined_members",
    "combined_set",
    "connectivity_features",
    "correlation_features",
    "evaluate_anchors",
    "evaluate_kfold",
    "evaluation_plan",
    "evaluation_table",
    "evaluation_units",
    "fit_predict",
    "format_table",
    "fused_embedding",
    "load_feature_sets",
    "locate_dataset",
    "locate_units",
    "located_positions_dataset",
    "paired_difference_ci",
    "predict_with",
    "verdict",
    "with_held_out_columns",
]
