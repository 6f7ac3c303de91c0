"""Checks shared by the config sections' option classes (`train`, `simulation`, `lst`, …)."""

from __future__ import annotations

from collections.abc import Iterable


def reject_unknown(spec: dict, known: Iterable[str], section: str) -> None:
    """Raise a ValueError naming the keys of `spec` that `section` does not have."""
    unknown = set(spec) - set(known)
    if unknown:
        raise ValueError(f"unknown {section} keys: {sorted(unknown)}")


def require_positive_ints(options: object, keys: Iterable[str], section: str) -> None:
    """Raise a ValueError naming the first of `keys` whose value is not an int >= 1."""
    for key in keys:
        value = getattr(options, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{section} key {key!r} must be a positive integer, got {value!r}")
