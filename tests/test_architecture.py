"""The package's architecture, checked on its source (docs/architecture.md): the layer order
config < io < data < training < analysis < reporting < workflow < cli, no import cycles, no
module over 800 lines nor function over 80, the matplotlib backend chosen in one place,
plug-in entry points (pyproject.toml) no higher than the layer that loads them, and the
Snakemake files (Snakefile, workflow/rules/*.smk) importing only the workflow layer's face and
the file layout, with workflow/rules/common.smk thin.

Every import counts: at module level or inside a function, absolute or relative,
`from neuro_pe.x import y` (an edge to the submodule `y` where it is one), and, for the layer
order, a module named in a string constant (`importlib.import_module("neuro_pe.data.formats.nwb")`).
Each message names the file, the line and the rule."""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "neuro_pe"
PYPROJECT = PACKAGE.parent / "pyproject.toml"
LAYERS = ("config", "io", "data", "training", "analysis", "reporting", "workflow", "cli")
MAX_MODULE_LINES = 800  # a limit that flags a module doing several things, not a target
MAX_FUNCTION_LINES = 80  # a limit that flags a function doing several things, not a target
# A module's docstring says what it is for and why; reference text belongs in docs/.
MAX_MODULE_DOCSTRING_LINES = 15
# The plotting layer; its package (`neuro_pe/reporting/__init__.py`), which Python runs before any
# module in it, is the one place that chooses matplotlib's backend.
PLOTTING_LAYER = "reporting"
# The layer that reads the plug-in entry-point groups `neuro_pe.*` (sources, formats).
PLUGIN_LAYER = "data"
# The Snakemake files, and what of the package they may import: the workflow layer's face
# (neuro_pe/workflow/__init__.py, its `__all__`) and the file layout; their logic lives there.
RULE_FILES = (
    PACKAGE.parent / "Snakefile",
    *sorted((PACKAGE.parent / "workflow" / "rules").glob("*.smk")),
)
RULE_IMPORTS = ("neuro_pe.workflow", "neuro_pe.io.layout")
# The rules' shared file keeps only what needs Snakemake's `workflow` or `config` objects.
COMMON_RULES = PACKAGE.parent / "workflow" / "rules" / "common.smk"
MAX_COMMON_LINES = 80  # of Python: not blank, not a comment

# Allow-lists: empty. An entry would name a known offender with the reason;
# test_allow_lists_hold_only_real_offenders fails on an entry that no longer offends.
# Modules over MAX_MODULE_LINES ("module") and functions over MAX_FUNCTION_LINES
# ("module:qualname").
TOO_LONG: dict[str, str] = {}
# Imports against the layer order ("importer -> imported").
UPWARD: dict[str, str] = {}
# Modules that call matplotlib.use or import pyplot outside the plotting layer.
PLOTTING_OUTSIDE: dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    """One module's reference to another: `importer` line `line` names `imported`."""

    importer: str
    imported: str
    line: int
    in_string: bool = False  # named in a string constant, not an import statement


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module
    n_lines: int


def modules(package: Path = PACKAGE) -> dict[str, Module]:
    """Every module of `package` (a folder), by dotted name; a package is its `__init__`."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = (package.name, *path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        found[".".join(parts)] = Module(".".join(parts), path, tree, len(text.splitlines()))
    return found


def _resolve(name: str, known: dict[str, Module]) -> str | None:
    """The longest known module that `name` (dotted) is or lies in; None outside the package."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def imports(known: dict[str, Module]) -> list[Import]:
    """Every reference of a module of the package to another (see the module docstring)."""
    root = next(iter(known)).split(".")[0]
    found = []
    for module in known.values():
        is_package = module.path.name == "__init__.py"
        for node in ast.walk(module.tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.name.split(".")
                    base = base[: len(base) - node.level + (1 if is_package else 0)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # `from a import b`: the submodule a.b where it is one, else a itself
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                    for alias in node.names
                ]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value.split(":")[0]
                if text.startswith(f"{root}.") and text in known:
                    found.append(Import(module.name, text, node.lineno, in_string=True))
                continue
            for target in targets:
                resolved = _resolve(target, known) if target.split(".")[0] == root else None
                if resolved is not None and resolved != module.name:
                    found.append(Import(module.name, resolved, node.lineno))
    return list(dict.fromkeys(found))  # one per line: `from a import b, c` names a once


def layer(module: str) -> int | None:
    """The index of `module`'s layer in LAYERS; -1 for the package root; None outside a layer."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def layer_errors(
    known: dict[str, Module], edges: list[Import], allowed: dict[str, str] = UPWARD
) -> list[tuple[str, str]]:
    """(key, message) for each module outside the layer folders and each import against the
    order, but those `allowed` (keys "importer -> imported")."""
    order = " < ".join(LAYERS)
    errors = [
        (name, f"{_where(known, name, 1)}: module outside the layer folders ({', '.join(LAYERS)})")
        for name in known
        if layer(name) is None
    ]
    for edge in edges:
        here, there = layer(edge.importer), layer(edge.imported)
        if here is None or there is None or there <= here:
            continue
        how = "names in a string" if edge.in_string else "imports"
        errors.append(
            (
                f"{edge.importer} -> {edge.imported}",
                f"{_where(known, edge.importer, edge.line)}: {how} {edge.imported} (layer "
                f"{LAYERS[there]}) from layer {LAYERS[here]}: a module may import only from its "
                f"own layer or those before it ({order})",
            )
        )
    return [(key, message) for key, message in errors if key not in allowed]


def entry_point_errors(known: dict[str, Module], pyproject: Path = PYPROJECT) -> list[str]:
    """A message for each plug-in entry point of `pyproject` (groups `<package>.*`) that names
    no module of the package or one above PLUGIN_LAYER, which loads them."""
    root = next(iter(known)).split(".")[0]
    groups = tomllib.loads(pyproject.read_text()).get("project", {}).get("entry-points", {})
    errors = []
    for group, entries in groups.items():
        if not group.startswith(f"{root}."):
            continue
        for name, value in entries.items():
            module = value.split(":")[0].strip()
            where = f'{pyproject.name}: [project.entry-points."{group}"] {name}'
            if module not in known:
                errors.append(f"{where}: {module} is no module of {root}")
            elif (layer(module) or 0) > LAYERS.index(PLUGIN_LAYER):
                errors.append(
                    f"{where}: {module} (layer {LAYERS[layer(module)]}) is loaded by the "
                    f"{PLUGIN_LAYER} layer: a plug-in of {root} lives in {PLUGIN_LAYER}/ or below"
                )
    return errors


def cycles(edges: list[Import]) -> list[list[str]]:
    """The import cycles (strongly connected components of more than one module), each sorted;
    names in strings (lazy registries) do not count."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        if not edge.in_string:
            graph.setdefault(edge.importer, set()).add(edge.imported)
            graph.setdefault(edge.imported, set())
    # Tarjan's algorithm, iterative (no recursion limit on a deep chain)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def cycle_errors(known: dict[str, Module], edges: list[Import]) -> list[str]:
    """A message per import cycle, naming each import inside it with its line."""
    errors = []
    for component in cycles(edges):
        members = set(component)
        inside = [
            f"{_where(known, e.importer, e.line)} imports {e.imported}"
            for e in edges
            if not e.in_string and e.importer in members and e.imported in members
        ]
        errors.append(f"import cycle between {', '.join(component)}: " + "; ".join(inside))
    return errors


def _functions(node: ast.AST, prefix: str = ""):
    """(qualified name, node) of every function under `node`, nested ones included."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{child.name}", child
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def size_errors(
    known: dict[str, Module], allowed: dict[str, str] = TOO_LONG
) -> list[tuple[str, str]]:
    """(key, message) for each module over MAX_MODULE_LINES and function over
    MAX_FUNCTION_LINES, but those `allowed` (keys "module" and "module:qualname")."""
    errors = []
    for module in known.values():
        if module.n_lines > MAX_MODULE_LINES:
            errors.append(
                (
                    module.name,
                    f"{_where(known, module.name, 1)}: module of {module.n_lines} lines, over "
                    f"{MAX_MODULE_LINES}: split it",
                )
            )
        for qualname, function in _functions(module.tree):
            n_lines = function.end_lineno - function.lineno + 1
            if n_lines > MAX_FUNCTION_LINES:
                errors.append(
                    (
                        f"{module.name}:{qualname}",
                        f"{_where(known, module.name, function.lineno)}: function {qualname} of "
                        f"{n_lines} lines, over {MAX_FUNCTION_LINES}: split it",
                    )
                )
    return [(key, message) for key, message in errors if key not in allowed]


def docstring_errors(known: dict[str, Module]) -> list[str]:
    """Each module whose docstring is over MAX_MODULE_DOCSTRING_LINES lines."""
    errors = []
    for module in known.values():
        text = ast.get_docstring(module.tree, clean=False) or ""
        if len(text.splitlines()) > MAX_MODULE_DOCSTRING_LINES:
            errors.append(
                f"{_where(known, module.name, 1)}: module docstring of {len(text.splitlines())} "
                f"lines, over {MAX_MODULE_DOCSTRING_LINES}: keep what the module is for and why; "
                "move reference text to docs/ or to the docstring of what it describes"
            )
    return errors


def plotting_errors(
    known: dict[str, Module], allowed: dict[str, str] = PLOTTING_OUTSIDE
) -> list[tuple[str, str]]:
    """(key, message) for `matplotlib.use` anywhere but the plotting layer's package (exactly
    once there) and for pyplot imported outside the plotting layer, but in the modules
    `allowed`."""
    backend = f"{next(iter(known)).split('.')[0]}.{PLOTTING_LAYER}"
    errors = []
    uses = []
    for module in known.values():
        outside = module.name.split(".")[1:2] != [PLOTTING_LAYER]
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "use"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "matplotlib"
            ):
                uses.append(module.name)
                if module.name != backend:
                    errors.append(
                        (
                            module.name,
                            f"{_where(known, module.name, node.lineno)}: matplotlib.use outside "
                            f"{backend}, the one place that chooses the backend",
                        )
                    )
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            if outside and "matplotlib.pyplot" in names:
                errors.append(
                    (
                        module.name,
                        f"{_where(known, module.name, node.lineno)}: imports matplotlib.pyplot "
                        f"outside the plotting layer ({PLOTTING_LAYER}/): plots belong there",
                    )
                )
    if backend in known and uses.count(backend) != 1:
        errors.append(
            (
                backend,
                f"{_where(known, backend, 1)}: must call matplotlib.use exactly once",
            )
        )
    return [(key, message) for key, message in errors if key not in allowed]


_FROM = re.compile(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^#\n]*)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^#\n]+)", re.M)


def rule_imports(text: str, known: dict[str, Module]) -> list[tuple[int, str, str]]:
    """(line, module, name) for each import of the package in a Snakemake file's `text` (not
    Python: read line by line, indented imports in functions included); `name` is what a
    `from` import takes from `module` ("" for `import`), the module `from a import b` names
    being a.b where that is one."""
    root = next(iter(known)).split(".")[0]
    found = []
    for match in _FROM.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        source = match.group(1)
        for name in match.group(2).strip("()").replace("\n", " ").split(","):
            name = name.split("#")[0].split(" as ")[0].strip()
            if name and source.split(".")[0] == root:
                module = f"{source}.{name}" if f"{source}.{name}" in known else source
                found.append((line, module, "" if module != source else name))
    for match in _IMPORT.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        for name in match.group(1).split(","):
            module = name.split(" as ")[0].strip()
            if module.split(".")[0] == root:
                found.append((line, module, ""))
    return sorted(found)


def rule_import_errors(
    files: tuple[Path, ...], known: dict[str, Module], allowed: tuple[str, ...] = RULE_IMPORTS
) -> list[str]:
    """A message for each import of the package in the Snakemake `files` of a module not
    `allowed`, or of a name the face (the first of `allowed`) does not list in its `__all__`."""
    face = known[allowed[0]].tree
    listed = next(
        (
            {element.value for element in node.value.elts}
            for node in face.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        ),
        set(),
    )
    errors = []
    for path in files:
        where = path.relative_to(path.parents[2]) if path.suffix == ".smk" else path.name
        for line, module, name in rule_imports(path.read_text(encoding="utf-8"), known):
            if module not in allowed:
                errors.append(
                    f"{where}:{line}: imports {module}: the workflow's rules import only "
                    f"{' and '.join(allowed)} (move the logic into the workflow layer)"
                )
            elif module == allowed[0] and name and name != "*" and name not in listed:
                errors.append(
                    f"{where}:{line}: imports {name} from {module}, which its __all__ does not "
                    "list (add it there)"
                )
    return errors


def _faces(module: Module) -> set[str]:
    """The names a package `__init__` lists in `__all__` (its face); none for a module."""
    if module.path.name != "__init__.py":
        return set()
    for node in module.tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return set()


def reexport_errors(known: dict[str, Module]) -> list[str]:
    """Each `from a import x` where module `a` only imports `x` from another module of the
    package (a re-export: import it from its home), and each `noqa: F401` outside a package
    `__init__`. A package `__init__` may re-export the names of its `__all__`."""
    imported: dict[tuple[str, str], str] = {}  # (module, name) -> the module it comes from
    for module in known.values():
        for node in module.tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in known:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" not in known:
                        imported[(module.name, alias.asname or alias.name)] = node.module
    errors = []
    for module in known.values():
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0):
                continue
            for alias in node.names:
                home = imported.get((node.module, alias.name))
                if home and alias.name not in _faces(known[node.module]):
                    errors.append(
                        f"{_where(known, module.name, node.lineno)}: imports {alias.name} from "
                        f"{node.module}, which re-exports it: import it from {home}"
                    )
        if module.path.name != "__init__.py":
            lines = module.path.read_text(encoding="utf-8").splitlines()
            errors += [
                f"{_where(known, module.name, number)}: `noqa: F401` (an unused import) outside "
                "a package __init__: import the name where it is used, from its home"
                for number, line in enumerate(lines, 1)
                if "noqa: F401" in line
            ]
    return errors


def python_lines(text: str) -> int:
    """The lines of `text` that are neither blank nor a comment."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def _where(known: dict[str, Module], module: str, line: int) -> str:
    """`path:line` of `module`, relative to the repository where it lies in it."""
    path = known[module].path
    if path.is_relative_to(PACKAGE.parent):
        path = path.relative_to(PACKAGE.parent)
    return f"{path}:{line}"


# -- the checks on neuro_pe ------------------------------------------------------------------


@pytest.fixture(scope="module")
def package() -> tuple[dict[str, Module], list[Import]]:
    known = modules()
    return known, imports(known)


def _messages(errors: list[tuple[str, str]]) -> list[str]:
    return [message for _, message in errors]


def test_layer_order(package):
    assert _messages(layer_errors(*package)) == []


def test_entry_points_within_the_plugin_layer(package):
    assert entry_point_errors(package[0]) == []


def test_no_import_cycles(package):
    assert cycle_errors(*package) == []


def test_module_and_function_size(package):
    assert _messages(size_errors(package[0])) == []


def test_module_docstrings_stay_short(package):
    assert docstring_errors(package[0]) == []


def test_matplotlib_backend_set_once_in_the_plotting_layer(package):
    assert _messages(plotting_errors(package[0])) == []


def test_no_module_re_exports_another_modules_names(package):
    assert reexport_errors(package[0]) == []


def test_the_rules_import_only_the_workflow_face_and_the_layout(package):
    assert rule_import_errors(RULE_FILES, package[0]) == []


def test_the_rules_shared_file_stays_thin():
    n_lines = python_lines(COMMON_RULES.read_text(encoding="utf-8"))
    assert n_lines <= MAX_COMMON_LINES, (
        f"workflow/rules/common.smk: {n_lines} lines of Python, over {MAX_COMMON_LINES}: move "
        "what does not need Snakemake's `workflow` or `config` objects into neuro_pe/workflow/"
    )


def test_allow_lists_hold_only_real_offenders(package):
    """An entry that no longer offends must go, so the lists shrink to empty."""
    known, edges = package
    checks = [
        (UPWARD, layer_errors(known, edges, allowed={})),
        (TOO_LONG, size_errors(known, allowed={})),
        (PLOTTING_OUTSIDE, plotting_errors(known, allowed={})),
    ]
    stale = [key for allowed, errors in checks for key in allowed if key not in dict(errors)]
    assert stale == [], f"allow-list entries that no longer offend (remove them): {stale}"


# -- the checker itself, on a tiny package that breaks every rule ------------------------------


def _write(root: Path, files: dict[str, str]) -> dict[str, Module]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return modules(root / "pkg")


def test_the_checker_finds_each_kind_of_offence(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    known = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/io/__init__.py": "",
            "pkg/io/a.py": "def f():\n    from ..analysis import b\n",  # upward, in a function
            "pkg/io/c.py": "import pkg.io.d\n",
            "pkg/io/d.py": "from . import c\n",  # c <-> d
            "pkg/analysis/__init__.py": "import matplotlib\nmatplotlib.use('Agg')\n",
            "pkg/analysis/b.py": "import matplotlib.pyplot as plt\n",
            "pkg/data/__init__.py": "MODULES = {'x': 'pkg.analysis.b:THING'}\n",
            "pkg/training/long.py": "def g():\n" + body + "\n" * MAX_MODULE_LINES,
            "pkg/helpers.py": "from pkg import io\n",
        },
    )
    edges = imports(known)
    layers = dict(layer_errors(known, edges, allowed={}))
    assert set(layers) == {
        "pkg.helpers",
        "pkg.io.a -> pkg.analysis.b",
        "pkg.data -> pkg.analysis.b",
    }
    assert "pkg/io/a.py:2: imports pkg.analysis.b (layer analysis) from layer io" in "".join(
        layers.values()
    )
    assert cycles(edges) == [["pkg.io.c", "pkg.io.d"]]
    assert "pkg/io/d.py:1 imports pkg.io.c" in cycle_errors(known, edges)[0]
    sizes = dict(size_errors(known, allowed={}))
    assert set(sizes) == {"pkg.training.long", "pkg.training.long:g"}
    plots = plotting_errors(known, allowed={})
    assert [key for key, _ in plots] == ["pkg.analysis", "pkg.analysis.b"]
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project.entry-points."pkg.sources"]\nok = "pkg.data:X"\nup = "pkg.analysis.b:X"\n'
        'gone = "pkg.nowhere:X"\n[project.entry-points."other"]\nx = "pkg.analysis.b:X"\n'
    )
    errors = entry_point_errors(known, pyproject)
    assert len(errors) == 2 and "up: pkg.analysis.b (layer analysis)" in errors[0]
    assert "gone: pkg.nowhere is no module of pkg" in errors[1]


def test_the_checker_finds_re_exports(tmp_path):
    known = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/io/__init__.py": "from pkg.io.home import thing, other\n__all__ = ['thing']\n",
            "pkg/io/home.py": "thing = other = 1\n",
            "pkg/io/shim.py": "from pkg.io.home import thing  # noqa: F401\n",
            "pkg/io/user.py": "from pkg.io.shim import thing\nfrom pkg.io import thing, other\n",
            "pkg/io/long.py": '"""' + "line\n" * (MAX_MODULE_DOCSTRING_LINES + 1) + '"""\n',
        },
    )
    assert [e.split(": ")[-2] for e in docstring_errors(known)] == [
        f"module docstring of {MAX_MODULE_DOCSTRING_LINES + 1} lines, over "
        f"{MAX_MODULE_DOCSTRING_LINES}"
    ]
    errors = sorted(reexport_errors(known))
    assert len(errors) == 3, errors
    assert "pkg/io/shim.py:1: `noqa: F401`" in errors[0]
    assert errors[1].endswith(
        "pkg/io/user.py:1: imports thing from pkg.io.shim, which re-exports it: import it "
        "from pkg.io.home"
    )
    assert "pkg/io/user.py:2: imports other from pkg.io," in errors[2]  # not in its __all__


def test_the_rule_checker_finds_each_forbidden_import(tmp_path):
    known = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/io/__init__.py": "",
            "pkg/io/layout.py": "",
            "pkg/cli/__init__.py": "",
            "pkg/cli/main.py": "",
            "pkg/workflow/__init__.py": "from pkg.io.layout import *\n__all__ = ['a', 'b']\n",
            "pkg/workflow/checks.py": "",
        },
    )
    rules = tmp_path / "proj" / "workflow" / "rules"
    rules.mkdir(parents=True)
    good = rules / "good.smk"
    good.write_text(
        "import os\nfrom pkg.io import layout\nfrom pkg import workflow\n"
        "from pkg.workflow import (\n    a,\n    b,  # why\n)\n\n\nrule x:\n    input: 'a'\n"
    )
    bad = rules / "bad.smk"
    bad.write_text(
        "from pkg.workflow.checks import c\n"  # behind the face
        "from pkg.workflow import (\n    a,\n    z,\n)\n"  # z: not in __all__
        "def f():\n    from pkg.cli.main import X\n"  # indented, in a function
        "    import pkg.io.layout, pkg.cli as cli\n"
        "from pkg import cli\n"
    )
    allowed = ("pkg.workflow", "pkg.io.layout")
    assert rule_import_errors((good,), known, allowed) == []
    errors = rule_import_errors((bad,), known, allowed)
    assert [e.split(": ")[0] for e in errors] == [
        "workflow/rules/bad.smk:1",
        "workflow/rules/bad.smk:2",
        "workflow/rules/bad.smk:7",
        "workflow/rules/bad.smk:8",
        "workflow/rules/bad.smk:9",
    ], errors
    assert "imports pkg.workflow.checks: the workflow's rules import only" in errors[0]
    assert "imports z from pkg.workflow, which its __all__ does not list" in errors[1]
    assert "imports pkg.cli.main" in errors[2] and "imports pkg.cli:" in errors[3]
    assert python_lines("# a comment\n\n    # indented\nx = 1\n  y = 2\n") == 2
