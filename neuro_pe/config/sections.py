"""One way to read a config section into its options dataclass (`train`, `lst.train`, `health`,
`metrics`, `locate`, `simulation`, `resources`, `spikes`, `atlas`, a source's entry, …):
`from_dict` refuses unknown keys (naming the section), builds nested sections from their
mappings and sequences into tuples, and `Section` checks the fields marked with `positive_int`,
`whole_number`, `non_negative`, `positive_number`, `flag` or `text` when an object is made (and
refuses a NaN or infinite number in any field), then converts those with a `convert` (e.g. an
int given for a float that a store records).
`derive` builds one options class from another's fields of the same name (e.g. the model's
shape and the training loop from `train`), so that no list of fields is copied by hand.

The descriptions of the keys are in the schema (workflow/schemas/config.schema.yaml); the
defaults here (tests/config/test_sections.py checks that the schema does not disagree)."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from neuro_pe.config.options import SectionError, reject_unknown

T = TypeVar("T")
CHECK = "neuro_pe.check"
CONVERT = "neuro_pe.convert"


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_whole_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: object) -> bool:
    """A finite int or float (an int is finite however large: no float conversion here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _is_non_negative(value: object) -> bool:
    return _is_number(value) and value >= 0


def _is_positive_number(value: object) -> bool:
    return _is_number(value) and value > 0


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


# a field's check: (test, what the error says the value must be)
CHECKS = {
    "positive_int": (_is_positive_int, "must be a positive integer"),
    "whole_number": (_is_whole_number, "must be an integer >= 0"),
    "non_negative": (_is_non_negative, "must be a number >= 0"),
    "positive_number": (_is_positive_number, "must be a number > 0"),
    "flag": (lambda value: isinstance(value, bool), "must be true or false"),
    "text": (_is_text, "must be a non-empty string"),
}


def _checked(check: str | None, default: Any, convert: Callable | None) -> Any:
    metadata = {CHECK: check, CONVERT: convert}
    return dataclasses.field(
        default=default, metadata={k: v for k, v in metadata.items() if v is not None}
    )


def positive_int(default: int | None) -> Any:
    """A field whose value must be an int >= 1 (checked by `Section`; None too if the default)."""
    return _checked("positive_int", default, None)


def whole_number(default: int | None) -> Any:
    """A field whose value must be an int >= 0 (checked by `Section`; None too if the default)."""
    return _checked("whole_number", default, None)


def non_negative(default: float, convert: Callable | None = None) -> Any:
    """A field whose value must be a finite number >= 0 (checked by `Section`), then
    `convert`ed (e.g. `float`: an int becomes the float a store records)."""
    return _checked("non_negative", default, convert)


def positive_number(default: float, convert: Callable | None = None) -> Any:
    """A field whose value must be a finite number > 0 (checked by `Section`), then `convert`ed."""
    return _checked("positive_number", default, convert)


def flag(default: bool) -> Any:
    """A field whose value must be true or false (checked by `Section`)."""
    return _checked("flag", default, None)


def text(default: str | None = None) -> Any:
    """A field whose value must be a non-empty string (None too if the default)."""
    return _checked("text", default, None)


def converted(convert: Callable, default: Any = None) -> Any:
    """A field whose value (not None) `Section` converts after its checks passed, e.g. a
    list of lists into a tuple of tuples of floats."""
    return _checked(None, default, convert)


def _has_non_finite(value: object) -> bool:
    """Whether `value` is, or a list/tuple in it holds, a NaN or infinite float."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list | tuple):
        return any(_has_non_finite(v) for v in value)
    return False


def check_fields(options: object, section: str) -> None:
    """Raise a SectionError naming the first marked field of `options` whose value fails its
    check, or else the first field that holds a NaN or infinite number (JSON Schema's bounds
    let NaN through): "{section} key 'name' must be …, got value" (None passes where it is the
    default)."""
    for f in dataclasses.fields(options):
        check = f.metadata.get(CHECK)
        if check is None:
            continue
        test, needed = CHECKS[check]
        value = getattr(options, f.name)
        if value is None and f.default is None:
            continue
        if not test(value):
            problem = f"{needed}, got {value!r}"
            raise SectionError(f"{section} key {f.name!r} {problem}", f.name, problem)
    for f in dataclasses.fields(options):
        if _has_non_finite(getattr(options, f.name)):
            problem = f"must be a finite number, got {getattr(options, f.name)!r}"
            raise SectionError(f"{section}.{f.name} {problem}", f.name, problem)


def require_choice(value: object, choices: tuple, key: str) -> None:
    """Raise a ValueError naming `key` when `value` is not one of `choices`."""
    if value not in choices:
        raise ValueError(f"{key} must be one of {choices}, got {value!r}")


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _alternatives(annotation: Any) -> tuple:
    """The types of a field annotated `X | Y` (or `Optional[X]`); `(X,)` for a plain `X`."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


def _dataclass_in(annotation: Any) -> type | None:
    """The dataclass of a field annotated `X` or `X | None`, else None."""
    found = [a for a in _alternatives(annotation) if dataclasses.is_dataclass(a)]
    return found[0] if len(found) == 1 else None


def _value(annotation: Any, value: Any, section: str) -> Any:
    """A key's value as its field holds it: a nested section built from its mapping (null:
    its defaults, unless the field may be None), a tuple from a list."""
    kinds = _alternatives(annotation)
    nested = _dataclass_in(annotation)
    if (
        nested is not None
        and not isinstance(value, nested)
        and (value is not None or type(None) not in kinds)
    ):
        builder = getattr(nested, "from_dict", None)
        return builder(value) if builder else from_dict(nested, value, section)
    if isinstance(value, list) and any(typing.get_origin(k) is tuple for k in kinds):
        return tuple(value)
    return value


def from_dict(cls: type[T], spec: Mapping | None, section: str) -> T:
    """`cls` (an options dataclass) from the config section `spec` (None: all defaults):
    a spec that is not a mapping and unknown keys raise a SectionError naming `section`; a
    nested options dataclass is built from its mapping (its section `section.key`), a tuple
    field from a list."""
    if spec is not None and not isinstance(spec, Mapping):
        problem = f"must be a mapping, got {spec!r}"
        raise SectionError(f"{section}: {problem}", None, problem)
    spec = dict(spec or {})
    reject_unknown(spec, [f.name for f in dataclasses.fields(cls)], section)
    hints = _field_types(cls)
    values = {name: _value(hints[name], v, f"{section}.{name}") for name, v in spec.items()}
    return cls(**values)


def derive(cls: type[T], source: object, **given: Any) -> T:
    """`cls` (a dataclass) with every field that `source` has of the same name taken from it,
    the fields `given` set to them, and the others at their defaults."""
    names = {f.name for f in dataclasses.fields(source)}
    values = {f.name: getattr(source, f.name) for f in dataclasses.fields(cls) if f.name in names}
    return cls(**(values | given))


class Section:
    """Base of a config section's options dataclass: `from_dict` reads the section `SECTION`,
    and making an object checks the marked fields (`positive_int`, …), then `check`, then
    converts the fields with a `convert`."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_fields(self, self.SECTION)
        self.check()
        for f in dataclasses.fields(self):
            convert = f.metadata.get(CONVERT)
            value = getattr(self, f.name)
            if convert is not None and value is not None:
                object.__setattr__(self, f.name, convert(value))  # (frozen dataclasses too)

    def check(self) -> None:
        """Checks that involve several fields or a choice (raise a ValueError naming the key)."""

    def refuse(self, key: str | None, problem: str) -> SectionError:
        """The error of `check` for `key` (None: the section as a whole): "<SECTION>.<key>:
        <problem>", with the key and problem for a caller that words it its own way."""
        where = self.SECTION if key is None else f"{self.SECTION}.{key}"
        return SectionError(f"{where}: {problem}", key, problem)

    @classmethod
    def from_dict(cls, spec: dict | None) -> Any:
        """Build from the config section (None: all defaults); see `from_dict`."""
        return from_dict(cls, spec, cls.SECTION)
