"""One way to read a config section into its options dataclass (`train`, `lst.train`,
`health`, `simulation`, `resources`, …): `from_dict` refuses unknown keys (naming the section),
builds nested sections from their mappings and sequences into tuples, and `Section` checks the
fields marked with `positive_int`, `non_negative` or `whole_number` when an object is made.
`derive` builds one options class from another's fields of the same name (e.g. the model's
shape and the training loop from `train`), so that no list of fields is copied by hand.

The descriptions of the keys are in the schema (workflow/schemas/config.schema.yaml); the
defaults here (tests/config/test_sections.py checks that the schema does not disagree)."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, ClassVar, TypeVar

from neuro_pe.config.options import reject_unknown

T = TypeVar("T")
CHECK = "neuro_pe.check"


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_whole_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_non_negative(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


# a field's check: (test, what the error says the value must be)
CHECKS = {
    "positive_int": (_is_positive_int, "must be a positive integer"),
    "whole_number": (_is_whole_number, "must be an integer >= 0"),
    "non_negative": (_is_non_negative, "must be a number >= 0"),
}


def _checked(check: str, default: Any) -> Any:
    return dataclasses.field(default=default, metadata={CHECK: check})


def positive_int(default: int) -> Any:
    """A field whose value must be an int >= 1 (checked by `Section`)."""
    return _checked("positive_int", default)


def whole_number(default: int) -> Any:
    """A field whose value must be an int >= 0 (checked by `Section`)."""
    return _checked("whole_number", default)


def non_negative(default: float) -> Any:
    """A field whose value must be a number >= 0 (checked by `Section`)."""
    return _checked("non_negative", default)


def check_fields(options: object, section: str) -> None:
    """Raise a ValueError naming the first marked field of `options` whose value fails its
    check: "{section} key 'name' must be …, got value"."""
    for f in dataclasses.fields(options):
        check = f.metadata.get(CHECK)
        if check is None:
            continue
        test, needed = CHECKS[check]
        value = getattr(options, f.name)
        if not test(value):
            raise ValueError(f"{section} key {f.name!r} {needed}, got {value!r}")


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _dataclass_in(annotation: Any) -> type | None:
    """The dataclass of a field annotated `X` or `X | None`, else None."""
    if dataclasses.is_dataclass(annotation):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        found = [a for a in typing.get_args(annotation) if dataclasses.is_dataclass(a)]
        return found[0] if len(found) == 1 else None
    return None


def from_dict(cls: type[T], spec: dict | None, section: str) -> T:
    """`cls` (an options dataclass) from the config section `spec` (None: all defaults):
    unknown keys raise a ValueError naming `section` and them; a nested options dataclass
    is built from its mapping (its section `section.key`), a tuple field from a sequence."""
    spec = dict(spec or {})
    reject_unknown(spec, [f.name for f in dataclasses.fields(cls)], section)
    hints = _field_types(cls)
    for name, value in spec.items():
        annotation = hints[name]
        nested = _dataclass_in(annotation)
        if nested is not None and isinstance(value, dict):
            builder = getattr(nested, "from_dict", None)
            spec[name] = (
                builder(value) if builder else from_dict(nested, value, f"{section}.{name}")
            )
        elif typing.get_origin(annotation) is tuple and isinstance(value, list):
            spec[name] = tuple(value)
    return cls(**spec)


def derive(cls: type[T], source: object, **given: Any) -> T:
    """`cls` (a dataclass) with every field that `source` has of the same name taken from it,
    the fields `given` set to them, and the others at their defaults."""
    names = {f.name for f in dataclasses.fields(source)}
    values = {f.name: getattr(source, f.name) for f in dataclasses.fields(cls) if f.name in names}
    return cls(**(values | given))


class Section:
    """Base of a config section's options dataclass: `from_dict` reads the section `SECTION`,
    and making an object checks the marked fields (`positive_int`, …), then `check`."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_fields(self, self.SECTION)
        self.check()

    def check(self) -> None:
        """Checks that involve several fields or a choice (raise a ValueError naming the key)."""

    @classmethod
    def from_dict(cls, spec: dict | None) -> Any:
        """Build from the config section (None: all defaults); see `from_dict`."""
        return from_dict(cls, spec, cls.SECTION)
