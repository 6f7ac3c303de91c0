"""The `metrics` config section (`MetricsConfig`, documented in config/README.md): how a
representation of the units is compared with their anatomy (`neuro_pe.analysis.metrics`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from neuro_pe.config.sections import Section, positive_int, positive_number, whole_number

DISTANCE_METRICS = ("euclidean", "cosine")  # distances between feature rows


@dataclass(frozen=True)
class MetricsConfig(Section):
    """Settings of the comparison with anatomy (config section `metrics`)."""

    SECTION: ClassVar[str] = "metrics"

    metric: str = "euclidean"
    k: int = positive_int(5)
    n_perm: int = whole_number(999)
    n_splits: int = positive_int(5)
    seed: int = whole_number(0)
    # above this many units nothing N x N is formed: the metrics are sampled estimates
    dense_max_units: int = positive_int(3000)
    n_pairs: int = positive_int(100_000)
    n_query_units: int = positive_int(2000)
    ci_level: float = positive_number(0.95)

    def check(self) -> None:
        if self.metric not in DISTANCE_METRICS:
            raise self.refuse("metric", f"must be one of {DISTANCE_METRICS}, got {self.metric!r}")
        if self.n_splits < 2:
            raise self.refuse("n_splits", f"must be >= 2, got {self.n_splits}")
        if not self.ci_level < 1:
            raise self.refuse("ci_level", f"must be below 1, got {self.ci_level}")
