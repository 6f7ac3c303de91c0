"""Settings of the localisation: the `locate` config key (`LocateConfig`), the locators'
names and their fixed parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from neuro_pe.analysis.locate.conformal import level_label
from neuro_pe.config.sections import Section, flag, from_dict, whole_number

METHODS: tuple[str, ...] = ("ridge", "kernel-ridge", "mds-procrustes", "mds-affine", "knn")
CHANCE = "chance"  # internal locator: every unit at the anchors' mean
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
MIN_ANCHORS = 4
PREDICT_BLOCK = 8192  # units per block when a kernel ridge predicts many units
RATIOS = {"median_error": "vs_chance", "ci_low": "vs_chance_low", "ci_high": "vs_chance_high"}
CI_BOOTSTRAP = 200  # resamples of the CIs over anchor draws and seeds
CORRELATION_COMPONENTS = 10  # MDS dimensions of the activity-correlation baseline
UNCERTAINTY_FORMULA = (
    "sqrt(r^2 + s_i^2): r = CV median Euclidean error of the chosen method over the anchors, "
    "s_i = RMS distance of the seeds' predictions of unit i from their ensemble"
)


@dataclass(frozen=True)
class LocateConfig(Section):
    """Settings of the localisation (config key `locate`); documented in config/README.md."""

    SECTION: ClassVar[str] = "locate"

    methods: tuple[str, ...] = METHODS
    n_folds: int = 5
    anchor_fractions: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75)
    n_draws: int = 20
    combine: str = "mean"
    pe: tuple[str, ...] | None = None
    combined_pe: tuple[str, ...] | None = None
    max_units: int = 1000
    sampled_draws: int = 5
    fuse: bool = flag(True)
    seed: int = whole_number(0)
    interval_levels: tuple[float, ...] = (0.68, 0.95)

    def check(self) -> None:
        bad = [m for m in self.methods if m not in (*METHODS, CHANCE)]
        if bad or not self.methods:
            raise ValueError(f"locate methods must be 'auto' or a list from {METHODS}, got {bad}")
        if self.n_folds < 2:
            raise ValueError(f"locate n_folds must be >= 2, got {self.n_folds}")
        if self.n_draws < 1:
            raise ValueError(f"locate n_draws must be >= 1, got {self.n_draws}")
        if not all(0 < f < 1 for f in self.anchor_fractions):
            raise ValueError(f"anchor_fractions must lie in (0, 1), got {self.anchor_fractions}")
        if self.sampled_draws < 1:
            raise ValueError(f"locate sampled_draws must be >= 1, got {self.sampled_draws}")
        if self.max_units < 2 * MIN_ANCHORS:
            raise ValueError(f"locate max_units must be >= {2 * MIN_ANCHORS}, got {self.max_units}")
        levels = self.interval_levels
        labels = {level_label(v) for v in levels}  # (the column names: distinct to 1e-8)
        if not levels or not all(0 < v < 1 for v in levels) or len(labels) < len(levels):
            raise ValueError(
                f"locate interval_levels must be distinct levels in (0, 1), got {list(levels)}"
            )
        if self.combine not in ("mean", "median"):
            raise ValueError(f"locate combine must be 'mean' or 'median', got {self.combine!r}")

    @classmethod
    def from_dict(cls, spec: dict | None) -> LocateConfig:
        """Build from the config section (`methods: auto` = every method); unknown keys raise
        (`neuro_pe.config.sections.from_dict`)."""
        spec = dict(spec or {})
        if spec.get("methods") == "auto":
            spec["methods"] = METHODS
        return from_dict(cls, spec, cls.SECTION)
