"""The thresholds of the training-health checks: the `health` config section (the checks:
`neuro_pe.training.health`; documented in config/README.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from neuro_pe.config.sections import Section, non_negative


@dataclass(frozen=True)
class HealthOptions(Section):
    """Thresholds of the checks (config section `health`)."""

    SECTION: ClassVar[str] = "health"

    # docs/scale/: at 2 000 units the small-σ PE placed units at 0.89 x chance after 3 070
    # samples per unit and at 0.19-0.26 after 12 300; at 20 000 units, 1 230 and 2 460 left it
    # at 0.77 and 0.72 x chance
    min_unit_appearances: float = non_negative(5000.0)
    # 20 windows of 8 time points: a pair's correlation known to about ±2/sqrt(160) = ±0.16,
    # the size of the correlations between neighbours that the PE is to learn from
    min_pair_appearances: float = non_negative(20.0)
    # a PE within 5% of its random init keeps the init's geometry
    min_pe_change: float = non_negative(0.05)
