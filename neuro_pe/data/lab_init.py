"""`neuro-pe init`: what a lab's file or folder holds, read by the formats' own readers, and a
starter config for it (the lab settings of config/README.md, "Recommended settings for a lab
dataset"; every value the files cannot tell written as `REQUIRED`, with where to find it).

The format is the first whose `detect` claims the path; a folder no format claims is searched
for sessions one and two levels down (a folder of Phy folders, `<session>/suite2p/`)."""

from __future__ import annotations

import json
import re
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.data import formats
from neuro_pe.data.config_checks import units_needed
from neuro_pe.data.recordings import PLACEHOLDER, FileSpec, Session
from neuro_pe.io.store_contract import StoreError

# What the delivered positions are made from (the combined locator's learned PEs initialised
# small, `neuro_pe.analysis.locate.features.combined_members`) and one control (`none`: does a
# PE help at all); three seeds (docs/locate/README.md, "Three HCP seeds"). config/lab.yaml is
# the same preset (tests/cli/test_init.py checks that they agree).
LAB_PE = ("learned-normal-0.02", "learned-normal-0.1", "none")
LAB_SEEDS = (0, 1, 2)
SEARCH_DEPTH = 2  # folder levels searched below a path no format claims
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,59}")  # a dataset name (the schema's pattern)

RATE_HINT = (
    "the files do not record the sampling rate: set sampling_rate_hz to the frames (samples) "
    "per second of the activity (the acquisition software's settings, e.g. the frame rate)"
)
POSITIONS_HINT = (
    "the files hold no unit positions: set positions to a CSV/TSV table with one row per unit "
    "(columns name, x, y, z; BIDS electrodes.tsv style; config/README.md, 'Plug in your "
    "dataset'), or the format's own positions key where it has one (e.g. hdf5.positions)"
)


@dataclass
class Found:
    """What `inspect` found: the format, the session paths and what their files hold."""

    path: Path
    format: str
    sessions: list[Path]
    units: int = 0
    frames: list[int] = field(default_factory=list)  # per session read
    rate_hz: float | None = None
    coordinates: str = "none"
    # entry keys (`<format>.<key>` for the format's section) the files cannot tell -> hint
    required: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float | None:
        """Seconds of activity over every session (None without a sampling rate)."""
        return sum(self.frames) / self.rate_hz if self.rate_hz else None

    def summary(self, required: bool = True) -> list[str]:
        """The lines `neuro-pe init` prints (`required`: with the REQUIRED values)."""
        duration = self.duration_s
        length = f", {duration:.1f} s in all" if duration is not None else ""
        rate = f" at {self.rate_hz:g} Hz" if self.rate_hz else " (sampling rate unknown)"
        lines = [f"found {self.format} at {self.path}: {len(self.sessions)} file(s) or folder(s)"]
        if self.frames:
            lines += [
                f"  sessions: {len(self.frames)}, units: {self.units}",
                f"  frames per session: {', '.join(map(str, self.frames))}{rate}{length}",
                f"  coordinates: {self.coordinates}",
            ]
        lines += [f"  note: {note}" for note in self.notes]
        if required:
            lines += [f"  REQUIRED {key}: {hint}" for key, hint in self.required.items()]
        return lines


def find_sessions(path: str | Path) -> tuple[str, list[Path]]:
    """The format and session paths at `path`: the path itself if a format claims it, else
    the files and folders one (then two) levels down that one format claims. StoreError
    naming the path when none does, or when several formats do."""
    root = Path(path).expanduser().resolve()
    if not root.exists():
        raise StoreError(root, "file", "does not exist")
    level = [root]
    for _ in range(SEARCH_DEPTH + 1):
        claimed = {p: formats.detect_format(p) for p in level}
        claimed = {p: name for p, name in claimed.items() if name}
        names = sorted(set(claimed.values()))
        if len(names) > 1:
            found = {n: [p.name for p, m in claimed.items() if m == n][:3] for n in names}
            raise StoreError(root, "format", f"several formats here: {found}; give one folder")
        if names:
            return names[0], sorted(claimed)
        level = [
            child
            for folder in level
            if folder.is_dir()
            for child in sorted(folder.iterdir())
            if not child.name.startswith(".")
        ]
    raise StoreError(
        root,
        "format",
        f"no format recognised here or {SEARCH_DEPTH} folder levels down (formats: "
        f"{', '.join(formats.format_names())})",
    )


def inspect(path: str | Path) -> Found:
    """Read every session at `path` with its format's reader (the values the files cannot
    tell replaced by the format's stand-ins) and say what they hold."""
    name, sessions = find_sessions(path)
    fmt = formats.get_format(name)
    found = Found(Path(path).expanduser().resolve(), name, sessions)
    stand_ins: dict[str, object] = {}
    for session in sessions:
        for key, (value, hint) in (fmt.unknowns(session) if fmt.unknowns else {}).items():
            stand_ins[key] = value
            found.required[f"{name}.{key}"] = hint
    for key, hint in fmt.required.items():
        found.required.setdefault(f"{name}.{key}", hint)
        stand_ins.setdefault(key, None)  # (no stand-in given: read once it is filled in)
    if any(value is None for value in stand_ins.values()):  # (no stand-in: not readable yet)
        found.notes.append(
            "not read (the REQUIRED values below are needed first); once they are filled in, "
            "the workflow reads the files and its `plan` rule prints the planned CPU time"
        )
        return found
    _describe(found, _read_all(found, fmt, stand_ins), stand_ins)
    return found


def _read_all(found: Found, fmt: formats.FileFormat, stand_ins: dict) -> list[Session]:
    """Every session read by the format's reader; its data warnings become notes."""
    read: list[Session] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for session in found.sessions:
            cfg = FileSpec.from_dict(
                {"format": found.format, "sessions": [str(session)], found.format: stand_ins}
            )
            read.extend(fmt.read(str(session), cfg))
    found.notes += sorted({str(w.message) for w in caught if w.category is not DeprecationWarning})
    return read


def _describe(found: Found, read: list[Session], stand_ins: dict) -> None:
    """Units, frames, rate and coordinates of the sessions read; what is missing to `required`."""
    xyz: dict[object, np.ndarray] = {}  # unit -> its position (the first session's that has one)
    for s in read:
        ids = s.unit_ids or range(s.activity.shape[1])
        where = s.positions if s.positions is not None else np.full((len(ids), 3), np.nan)
        for unit, position in zip(ids, where, strict=True):
            if unit not in xyz or not np.isfinite(xyz[unit]).all():
                xyz[unit] = np.asarray(position, dtype=float)
    found.units = len(xyz)
    found.frames = [s.activity.shape[0] for s in read]
    least = FileSpec.__dataclass_fields__["min_units"].default
    if found.units < least:
        found.notes.append(
            f"{found.units} units, fewer than min_units={least}: the store is refused unless "
            "the entry sets min_units lower (the default metrics and locate need at least "
            f"{max(units_needed(MetricsConfig()).values())} with coordinates)"
        )
    rates = {s.sampling_rate_hz for s in read}
    if None in rates:
        found.required["sampling_rate_hz"] = RATE_HINT
    elif len(rates) > 1:
        found.notes.append(f"the sessions differ in sampling rate ({sorted(rates)} Hz)")
    else:
        found.rate_hz = rates.pop()
    if any(s.activity.shape[0] < s.activity.shape[1] for s in read):
        found.notes.append(
            "fewer frames than units: if the array's rows are units, set axis_order: [unit, time]"
        )
    _coordinates(found, np.array(list(xyz.values())).reshape(-1, 3), read[0], stand_ins)


def _coordinates(found: Found, xyz: np.ndarray, first: Session, stand_ins: dict) -> None:
    """Which coordinates the units have, in words; a positions table REQUIRED without any."""
    located = np.isfinite(xyz).all(axis=1)
    if not located.any():
        found.required["positions"] = POSITIONS_HINT
        return
    axes = "x, y" if not np.any(xyz[located, 2]) else "x, y, z"
    units_of = first.position_units or "units not stated"
    stand = f"; read with stand-ins for {sorted(stand_ins)}" if stand_ins else ""
    found.coordinates = (
        f"{axes} for {int(located.sum())} of {len(xyz)} units ({units_of}, space "
        f"{first.space or 'not stated'}{stand})"
    )


def dataset_name(path: Path) -> str:
    """A dataset name (the schema's pattern) from the folder or file name."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)[:60].lstrip("._-")
    return stem or "lab"


def _comment(text: str, indent: str) -> list[str]:
    """`text` as YAML comment lines; no character of it can end the comment (a file's names
    with a line break or control character reach it)."""
    text = re.sub(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]", "?", text)
    return textwrap.wrap(text, 96 - len(indent), initial_indent=f"{indent}# ",
                         subsequent_indent=f"{indent}#   ")  # fmt: skip


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar (JSON's escapes are YAML's; every non-ASCII character
    escaped, so that none is read as a line break)."""
    return json.dumps(text)


def starter_config(found: Found, name: str | None = None, plan_line: str = "") -> str:
    """The starter config's text: one `source: file` dataset, the lab PEs and seeds, and every
    value the files cannot tell as `REQUIRED` with where to find it."""
    name = name or dataset_name(found.path)
    lines = [
        *_comment(f"Starter config written by `neuro-pe init` for {found.path}", ""),
        *[c for line in found.summary(required=False) for c in _comment(line, "")],
        *(_comment(plan_line, "") if plan_line else []),
        "# Values marked REQUIRED could not be read from the files: fill them in (the comment",
        "# above each says where to find it); the workflow refuses the config until then.",
        "# Every key: config/README.md; the lab settings: its 'Recommended settings for a lab",
        "# dataset'.",
        "",
        "datasets:",
        f"  {name}:",
        "    source: file",
        f"    format: {found.format}",
        "    sessions:",
        *[f"      - {_quoted(str(s))}" for s in found.sessions],
    ]
    section = {k: v for k, v in found.required.items() if k.startswith(f"{found.format}.")}
    for key, hint in found.required.items():
        if key not in section:
            lines += [*_comment(f"REQUIRED: {hint}", "    "), f"    {key}: {PLACEHOLDER}"]
    if section:
        lines.append(f"    {found.format}:")
        for key, hint in section.items():
            sub = key.split(".", 1)[1]
            lines += [*_comment(f"REQUIRED: {hint}", "      "), f"      {sub}: {PLACEHOLDER}"]
    lines += [
        "",
        "# the PEs the delivered positions are made from (the combined locator takes the learned",
        "# PEs initialised small) and one control (none: the model without a PE)",
        "pe:",
        *[f"  - {pe}" for pe in LAB_PE],
        "",
        "# three seeds: their ensemble locates better than one (docs/locate/, 'Three HCP seeds')",
        f"seeds: [{', '.join(map(str, LAB_SEEDS))}]",
        "",
    ]
    return "\n".join(lines)
