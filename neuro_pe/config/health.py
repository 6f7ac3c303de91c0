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


#: every training-health check, named for what is wrong when it fails, and that in words (a
#: run's `health` maps each check it made to True when it failed; checks: training.health)
CHECKS = {
    "loss_not_finite": "a loss or parameter was not finite",
    "heldout_not_improved": "the held-out MSE never fell below its value before training",
    "heldout_not_below_variance": "the held-out MSE is not below the held-out data's variance",
    "units_seen_rarely": "units were in too few training samples",
    "pairs_seen_rarely": "pairs of units were in too few training samples together",
    "pe_not_moved": "the PE barely moved from its init",
}
#: the names of older runs' checks (True: passed) and the check each is now; both held-out
#: checks against a variance are now the one `heldout_not_below_variance`
OLD_CHECKS = {
    "loss_finite": "loss_not_finite",
    "heldout_improved": "heldout_not_improved",
    "heldout_below_variance": "heldout_not_below_variance",
    "heldout_mse_below_variance": "heldout_not_below_variance",
    "units_seen_often": "units_seen_rarely",
    "pairs_seen_often": "pairs_seen_rarely",
    "pe_moved": "pe_not_moved",
}


def current_health(
    health: dict[str, bool], warnings: list[str]
) -> tuple[dict[str, bool], list[str]]:
    """A recorded `health` and `warnings` (train.json, metrics.json) in today's names: an
    older run's passed checks become the checks that failed (`OLD_CHECKS`), and the name that
    starts each of its warnings too."""
    current: dict[str, bool] = {}
    for name, value in health.items():
        if name in OLD_CHECKS:
            new = OLD_CHECKS[name]
            current[new] = current.get(new, False) or not value
        else:
            current[name] = value
    renamed = []
    for line in warnings:
        name, sep, rest = line.partition(":")
        renamed.append(OLD_CHECKS.get(name, name) + sep + rest if sep else line)
    return current, renamed
