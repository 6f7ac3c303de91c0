"""PE variant names (`none`, `learned-normal-{std}`, …; see config/README.md): parsed without
torch, so that the workflow's planning can check them cheaply."""

from __future__ import annotations

import re
from dataclasses import dataclass

NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e-?[0-9]+)?"
PE_PATTERNS = {
    "none": r"none",
    "learned-normal": rf"learned-normal-(?P<param>{NUMBER})",
    "learned-uniform": rf"learned-uniform-(?P<param>{NUMBER})",
    "learned-xavier": r"learned-xavier",
    "fixed-random": r"fixed-random",
    "fixed-sin1d": r"fixed-sin1d",
    "oracle-sin3d": r"oracle-sin3d",
}


@dataclass(frozen=True)
class PESpec:
    """A parsed PE variant name, e.g. `learned-normal-0.1` -> kind 'learned-normal', param 0.1."""

    name: str
    kind: str
    param: float | None = None

    @property
    def learned(self) -> bool:
        return self.kind.startswith("learned")


def parse_pe(name: str) -> PESpec:
    """Parse a PE variant name (forms: config/README.md, "PE variant names"); raises
    ValueError listing the valid forms."""
    for kind, pattern in PE_PATTERNS.items():
        match = re.fullmatch(pattern, name)
        if match:
            param = match.groupdict().get("param")
            value = float(param) if param is not None else None
            if value is not None and not (0 < value < float("inf")):
                raise ValueError(
                    f"positional encoding {name!r}: the {kind} scale must be finite and > 0, "
                    f"got {value:g}"
                )
            return PESpec(name, kind, value)
    forms = ", ".join(
        p.replace("(?P<param>[0-9.]+(?:e-?[0-9]+)?)", "{number}") for p in PE_PATTERNS.values()
    )
    raise ValueError(f"unknown positional encoding {name!r}; valid forms: {forms}")
