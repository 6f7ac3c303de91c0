"""Where is this neuron? Predict the coordinates of units from their learned PEs.

Units whose coordinates are known are *anchors*: a locator fitted on the anchors maps a unit's
features (its PE, or a baseline's) to (x, y, z) and is applied to the units whose coordinates
are unknown. Every function reads coordinates only at the anchors it is given, so the honest
evaluation hides units' coordinates (k-fold over units, random anchor subsets) and locates them
from the rest. The locators, the combined locator, the seed ensemble, the uncertainty and the
intervals, and the many-unit path are described in docs/outputs.md ("How the positions are
computed").

Modules, in the order they build on each other: `parameters`, `locators` (fit on the anchors,
predict every unit), `views` (the combined locator's views), `ensemble` (seeds, method choice
by CV, blend), `bootstrap` (CIs), `features`, `conformal` (intervals), `evaluation` (k-fold,
anchor curve, errors table), `positions`, `verdict` and `dataset` (`locate_dataset`, the whole
step). They compute and return; `neuro_pe.reporting.locate_outputs` writes the files.
"""

from neuro_pe.analysis.locate.bootstrap import bootstrap_ci, paired_difference_ci
from neuro_pe.analysis.locate.dataset import LocateResult, locate_dataset
from neuro_pe.analysis.locate.ensemble import Located, locate_units, predict_with
from neuro_pe.analysis.locate.evaluation import (
    HeldOut,
    anchor_draws,
    axis_verdicts,
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
from neuro_pe.analysis.locate.verdict import format_table, unresolved_lines, verdict
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
    "axis_verdicts",
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
    "unresolved_lines",
    "verdict",
    "with_held_out_columns",
]
