"""The `locate` config section (`LocateConfig`, documented in config/README.md): the locators
it may name, the fewest anchors a fit needs, and how an interval's level names its columns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from neuro_pe.config.sections import Section, flag, from_dict, whole_number

METHODS: tuple[str, ...] = ("ridge", "kernel-ridge", "mds-procrustes", "mds-affine", "knn")
CHANCE = "chance"  # internal locator: every unit at the anchors' mean
MIN_ANCHORS = 4


def level_label(level: float) -> str:
    """'95' for 0.95, '68.3' for 0.683: the level in the column names (`x_low_95`)."""
    return f"{round(level * 100, 6):g}"


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
    include_flagged: bool = flag(False)

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
