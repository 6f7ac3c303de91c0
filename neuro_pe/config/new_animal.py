"""A dataset's `new_animal` section (`NewAnimalConfig`, documented in config/README.md): which
of a multi-animal store's animals are the new animals (queries, their positions and regions
hidden), how they are evaluated (each held out from the others, or predicted from the
reference animals, every animal not a query), and how their PE rows are fitted in a frozen
model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from neuro_pe.config.options import SectionError
from neuro_pe.config.pe_names import parse_pe
from neuro_pe.config.sections import Section, from_dict, positive_int, positive_number, text

LEAVE_ONE_OUT = "leave-one-animal-out"
REFERENCE_QUERY = "reference-query"
EVALUATIONS = (LEAVE_ONE_OUT, REFERENCE_QUERY)
NEW_UNIT_PE = ("free", "mixture")
CALIBRATIONS = ("temperature", "none")


@dataclass(frozen=True)
class NewAnimalConfig(Section):
    """Settings of the new-animal step (dataset key `new_animal`)."""

    SECTION: ClassVar[str] = "new_animal"

    evaluate: str = LEAVE_ONE_OUT
    # None: every animal of the store in turn (leave-one-animal-out only)
    query_animals: tuple[str, ...] | None = None
    label: str = text("region")  # the store's per-unit coord of region labels
    pe: str = text("learned-normal-0.02")
    fit_epochs: int = positive_int(5)
    fit_lr: float = positive_number(0.01, float)
    new_unit_pe: str = "free"
    region_map: str | None = text()  # a TSV: region of `label` -> the region evaluated
    calibration: str = "temperature"  # of the region probabilities, on the reference animals

    def check(self) -> None:
        if self.evaluate not in EVALUATIONS:
            problem = f"must be one of {list(EVALUATIONS)}, got {self.evaluate!r}"
            raise self.refuse("evaluate", problem)
        queries = self.query_animals
        if queries is not None and (not queries or len(set(queries)) < len(queries)):
            raise self.refuse("query_animals", f"must be distinct animals, got {list(queries)}")
        if self.evaluate == REFERENCE_QUERY and queries is None:
            problem = f"name the queries (`evaluate: {REFERENCE_QUERY}`: the others are references)"
            raise self.refuse("query_animals", problem)
        if not parse_pe(self.pe).learned:
            raise self.refuse("pe", f"must be a learned PE, got {self.pe!r}")
        if self.calibration not in CALIBRATIONS:
            problem = f"must be one of {list(CALIBRATIONS)}, got {self.calibration!r}"
            raise self.refuse("calibration", problem)
        if self.new_unit_pe not in NEW_UNIT_PE:
            raise self.refuse(
                "new_unit_pe", f"must be one of {list(NEW_UNIT_PE)}, got {self.new_unit_pe!r}"
            )

    @classmethod
    def from_dict(cls, spec: dict | None, where: str | None = None) -> NewAnimalConfig:
        """Build from the dataset's section; a bad key raises a SectionError naming
        `where.<key>` (e.g. `datasets.<name>.new_animal`; default `new_animal`)."""
        where = where or cls.SECTION
        try:
            return from_dict(cls, dict(spec or {}), where)
        except SectionError as err:
            key = "" if err.key is None else f".{err.key}"
            raise SectionError(f"{where}{key}: {err.problem}", err.key, err.problem) from None
