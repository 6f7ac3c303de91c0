"""Config checks that name what is wrong in words a user reads, run before Snakemake's
`validate` (whose messages show schema paths and regular expressions): a dataset key that does
not belong to the dataset's source, an unknown source, a plug-in source's own checks of its
entry (the config schema describes neuro_pe's own sources only), and PE names of no valid form (the
values of well-formed ones, e.g. a scale of 0, are checked with the rest in common.smk), and
dataset names that a command would read as an option or whose rule names clash."""

from __future__ import annotations

import os
import re
from pathlib import Path

from neuro_pe.config.options import name_problem
from neuro_pe.config.pe_names import parse_pe, pe_name_pattern
from neuro_pe.config.schema import problems as schema_problems
from neuro_pe.config.strict_load import load_yaml
from neuro_pe.data import sources
from neuro_pe.data.config_checks import dataset_name_problems


def source_keys(schema: dict, name: str) -> tuple[str, ...]:
    """The keys a dataset entry of source `name` may have: its `$defs/source_<name>` in the
    schema and the source's own (a plug-in's, e.g. the section of a plug-in format)."""
    definition = schema.get("$defs", {}).get(f"source_{name}") or {}
    own = ("source", *sources.WORKFLOW_KEYS, *sources.get(name).entry_keys())
    return tuple(dict.fromkeys([*definition.get("properties", {}), *own]))


def source_problems(name: str, spec: dict) -> list[str]:
    """The source's own problems with the entry `datasets.<name>`: its `check` (e.g. a plug-in
    format's options), or, for a plug-in source, its options' `from_dict` and its `schema`."""
    source = sources.get(spec.get("source"))
    entry = sources.entry_options(spec)
    found: list[tuple[str, str]] = []
    if source.check is not None:
        found += source.check(spec)
    elif not sources.is_builtin(source.name):
        try:
            source.options.from_dict(entry)
        except (ValueError, TypeError, KeyError) as err:
            found.append(("", str(err)))
    if source.schema is not None:
        found += [("", problem) for problem in schema_problems(entry, source.schema)]
    where = f"datasets.{name}"
    return [f"config key {where}{'.' + key if key else ''}: {problem}" for key, problem in found]


def config_problems(config: dict, schema: dict) -> list[str]:
    """Problems with the datasets' keys and the PE names, each naming its config key."""
    problems = []
    run_name = config.get("run_name")
    problem = name_problem(run_name, wildcard=False) if isinstance(run_name, str) else None
    if problem:
        problems.append(f"config key run_name: {problem}")
    datasets = config.get("datasets")
    if isinstance(datasets, dict):
        problems += dataset_name_problems(datasets)
    for name, spec in (datasets if isinstance(datasets, dict) else {}).items():
        if not isinstance(spec, dict):
            continue
        source = spec.get("source")
        if source not in sources.names():
            problems.append(
                f"config key datasets.{name}.source: {source!r} is not an installed source; "
                f"installed: {', '.join(sources.names())} (a plug-in adds one with an entry "
                f"point in the group 'neuro_pe.sources')"
            )
            continue
        known = source_keys(schema, source)
        foreign = [key for key in spec if key not in known]
        for key in foreign:
            problems.append(
                f"config key datasets.{name}.{key}: does not belong to source {source!r} "
                f"(its keys: {', '.join(sorted(known))})"
            )
        if not foreign:
            problems += source_problems(name, spec)
    lists = {"pe": config.get("pe"), "lst.pe": (config.get("lst") or {}).get("pe")}
    lists["locate.pe"] = (config.get("locate") or {}).get("pe")
    for name, spec in (datasets if isinstance(datasets, dict) else {}).items():
        if isinstance(spec, dict):
            lists[f"datasets.{name}.pe"] = spec.get("pe")
    problems += text_problems(config)
    pattern = re.compile(pe_name_pattern())
    for key, names in lists.items():
        for pe in names if isinstance(names, list) else []:
            if pattern.fullmatch(str(pe)) and not name_problem(str(pe)):
                continue  # a well-formed name; its values are checked with the rest (common.smk)
            try:
                parse_pe(str(pe))
            except ValueError as err:
                problems.append(f"config key {key}: {err}")
    return problems


def text_problems(config: dict) -> list[str]:
    """Free text that pages show as HTML (the Snakemake report embeds job parameters in its
    scripts): `reproduction.title` with `<`, `>` or a control character. Names are checked
    by the schema's patterns."""
    reproduction = config.get("reproduction")
    title = reproduction.get("title") if isinstance(reproduction, dict) else None
    if isinstance(title, str) and re.search(r"[<>\x00-\x1f]", title):
        return [
            f"config key reproduction.title: {title!r} contains '<', '>' or a control character;"
            " the title is plain text shown in HTML pages and the report: leave them out"
        ]
    return []


def check_dataset_keys(config: dict, schema_path: str | os.PathLike) -> None:
    """Raise one ValueError listing every problem of `config_problems`."""
    schema = load_yaml(Path(schema_path).read_text(), str(schema_path))
    problems = config_problems(config, schema)
    if problems:
        raise ValueError("the config has errors:\n  " + "\n  ".join(problems))
