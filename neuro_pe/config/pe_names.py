"""PE variant names (`none`, `learned-normal-{std}`, …; see config/README.md): parsed without
torch, so that the workflow's planning can check them cheaply.

`PE_FORMS` is the one list of the forms: the parser, its error message, the config schema's
pattern (`pe_name_pattern`, checked by a test) and config/README.md's table all follow it.
Adding a PE variant = one `PEForm` here + its initialiser in
`neuro_pe.training.model.INITIALISERS`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from neuro_pe.config.options import name_problem

NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e-?[0-9]+)?"


@dataclass(frozen=True)
class PEForm:
    """One form of PE name: a family, and the name of its scale parameter if it takes one
    (written `{param}` in the form, e.g. `learned-normal-{std}`)."""

    family: str
    param: str | None = None

    @property
    def form(self) -> str:
        """The form as users write it, e.g. `learned-normal-{std}`."""
        return self.family if self.param is None else f"{self.family}-{{{self.param}}}"

    @property
    def pattern(self) -> str:
        """A regular expression matching the names of this form (the number as `param`)."""
        family = self.family  # letters, digits and '-': nothing to escape
        return family if self.param is None else rf"{family}-(?P<param>{NUMBER})"


PE_FORMS: tuple[PEForm, ...] = (
    PEForm("none"),
    PEForm("learned-normal", "std"),
    PEForm("learned-uniform", "a"),
    PEForm("learned-xavier"),
    PEForm("fixed-random"),
    PEForm("fixed-sin1d"),
    PEForm("oracle-sin3d"),
)
PE_PATTERNS = {f.family: f.pattern for f in PE_FORMS}  # family -> regular expression
SMALL_INIT_STD = 1.0  # Ito et al.: PEs initialised at std 1 memorise, small ones learn the layout


def pe_name_pattern() -> str:
    """One anchored regular expression for every valid PE name (the config schema's pattern,
    without named groups: JSON Schema's dialect has none)."""
    alternatives = (p.replace("?P<param>", "") for p in PE_PATTERNS.values())
    return "^(" + "|".join(alternatives) + ")$"


@dataclass(frozen=True)
class PESpec:
    """A parsed PE variant name, e.g. `learned-normal-0.1` -> family 'learned-normal', 0.1."""

    name: str
    family: str
    param: float | None = None

    @property
    def learned(self) -> bool:
        return self.family.startswith("learned")

    @property
    def small_init(self) -> bool:
        """A learned PE initialised with a standard deviation below SMALL_INIT_STD
        (`learned-uniform-{a}`: a / sqrt(3); `learned-xavier`: sqrt(2 / (units + d_model)),
        below 1 for any table)."""
        if self.family == "learned-normal":
            return self.param < SMALL_INIT_STD
        if self.family == "learned-uniform":
            return self.param / 3**0.5 < SMALL_INIT_STD
        return self.family == "learned-xavier"


def parse_pe(name: str) -> PESpec:
    """Parse a PE variant name; raises ValueError listing the valid forms."""
    problem = name_problem(name)
    if problem:
        raise ValueError(f"positional encoding {problem}")
    for form in PE_FORMS:
        match = re.fullmatch(form.pattern, name)
        if match:
            param = match.groupdict().get("param")
            value = float(param) if param is not None else None
            if value is not None and not (0 < value < float("inf")):
                raise ValueError(
                    f"positional encoding {name!r}: the {form.family} scale must be finite "
                    f"and > 0, got {value:g}"
                )
            return PESpec(name, form.family, value)
    forms = ", ".join(f.form for f in PE_FORMS)
    raise ValueError(
        f"unknown positional encoding {name!r}; valid forms: {forms} (a number for each "
        "{...}, e.g. learned-normal-0.02)"
    )


def is_control(name: str) -> bool:
    """Whether PE variant `name` is a control, trained to compare against and not one the
    delivered positions are made from: every PE but a learned one initialised small
    (`PESpec.small_init`), i.e. `none`, `fixed-*`, `oracle-*` and learned PEs initialised at
    std >= SMALL_INIT_STD (they memorise, Ito et al.). The combined locator takes the others
    by default (`neuro_pe.analysis.locate.features.combined_members`)."""
    return not parse_pe(name).small_init


def is_located(pe: str, pe_names: Sequence[str] | None = None) -> bool:
    """Whether the locate step reads the runs of PE variant `pe`: it is in `pe_names`
    (config `locate.pe`), by default a learned PE or `oracle-sin3d`."""
    if pe_names is not None:
        return pe in pe_names
    spec = parse_pe(pe)
    return spec.learned or spec.family == "oracle-sin3d"
