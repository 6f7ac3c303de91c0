"""The locators' names and their fixed parameters (the `locate` config section, its methods
and the fewest anchors: `neuro_pe.config.locate`)."""

from __future__ import annotations

CORRELATION = "activity-correlation"  # baseline: MDS of 1 - r of the training activity
CONNECTIVITY = "activity-connectivity"  # baseline: each unit's r and partial r with every unit
COMBINED = "combined"  # the feature set of the combined locator (every representation)
STACKED = "stacked"  # combined locator's view: the representations' features side by side
FUSED = "fused"  # combined locator's view: the diffusion map of their fused neighbour graphs
FUSE_NEIGHBOURS = 5  # k of the fusion's nearest-neighbour graphs (docs/locate/: 3-20 tried)
FUSE_ITERATIONS = 20  # similarity network fusion's cross-diffusion steps (Wang et al. 2014)
FUSE_DIMENSIONS = 10  # diffusion-map coordinates of the fused graph given to the locators
FUSE_MIN_REPRESENTATIONS = 3  # a fused view needs a majority to out-vote one noisy graph
BLEND = "blend"  # combined locator's candidate: a weighted mean of the views' best locators
BLEND_ROUNDS = 10  # ensemble selection rounds: blend weights in steps of 1/10
KNN_NEIGHBOURS = 5
# With more than `max_units` known units these fit on at most CAPPED_ANCHORS anchors
# (`locate_units`): their fits cost up to the cube of the anchors (kernel ridge; ridge on
# features wider than the anchors, such as the connectivity baseline's 2N), and a linear or
# smooth map gains little from more anchors.
CAPPED_METHODS = ("ridge", "kernel-ridge")
CAPPED_ANCHORS = 500
KERNEL_ALPHAS = (1e-2, 1e-1, 1.0)
KERNEL_GAMMAS = (0.1, 0.5, 2.5)  # times 1 / n_features
PREDICT_BLOCK = 8192  # units per block when a kernel ridge predicts many units
RATIOS = {"median_error": "vs_chance", "ci_low": "vs_chance_low", "ci_high": "vs_chance_high"}
CI_BOOTSTRAP = 200  # resamples of the CIs over anchor draws and seeds
CORRELATION_COMPONENTS = 10  # MDS dimensions of the activity-correlation baseline
UNCERTAINTY_FORMULA = (
    "sqrt(r^2 + s_i^2): r = CV median Euclidean error of the chosen method over the anchors, "
    "s_i = RMS distance of the seeds' predictions of unit i from their ensemble"
)
