"""Import contracts (the layout's rules, ../README "How it works"), checked on the source with ast:

- the pure core (question flow, features, policy, launch plans, log parsing, classification) imports no I/O:
  no docker, no sqlite, no mcp, no subprocesses, sockets, threads or event loops, directly or through the modules
  it imports; of the rest of the package only its configuration (settings, paths) and the exception tree;
- the faces (every module under server/ and cli/) import services, never the store or the targets, and never
  reach the store or the secrets through the application context (``ctx.store``,
  ``ctx.secrets``): what a face shows comes from a service, which scrubs it;
- nothing imports a face, and no module imports a service just for an exception (exceptions.py has them all);
- the import graph has no cycle, counting imports made inside functions (``if TYPE_CHECKING:`` blocks excepted:
  they never run).

Each rule is a function of a ``Package`` (a source tree on disk), so the tests below also plant one violation of
each rule in a temporary copy of the package and check that the rule names it: a rule that cannot fail proves
nothing.
"""

from __future__ import annotations

import ast
import shutil
from functools import cache, cached_property
from pathlib import Path

import pytest

PACKAGE = "verl_async_dapo"
ROOT = Path(__file__).resolve().parents[2] / "skill" / PACKAGE

CORE = ("flow", "features", "policy", "rollout_policy", "categories", "redact", "answers", "runspec", "exceptions", "status",
        "slurm_options", "privileges",
        "records",
        "wording", "memory", "errors",
        "verl", "logs")
CORE_MAY_USE = ("settings", "paths")  # configuration: environment variables and directory names, read on demand
IO_MODULES = ("sqlite3", "docker", "mcp", "anyio", "asyncio", "subprocess", "socket", "threading", "requests",
              "urllib.request", "http", "starlette", "uvicorn", "swanlab", "shutil", "tempfile", "fcntl")  # fmt: skip
FACES = ("server", "cli")  # the packages, every module in them
NOT_FOR_FACES = ("store", "targets", "sqlite3", "docker")
CONTEXT_PARTS_NOT_FOR_FACES = ("store", "secrets")  # AppContext attributes a face must leave to the services


def _ours(name: str) -> str | None:
    return name.removeprefix(f"{PACKAGE}.") if name.startswith(f"{PACKAGE}.") else None


def _in(name: str, families: tuple[str, ...]) -> bool:
    return any(name == f or name.startswith(f"{f}.") for f in families)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(x) for x in ast.walk(node))
    return skip


@cache
def _parsed(source: str) -> ast.Module:
    """One parse per distinct text: the planted-violation tests re-read a copy of the package that differs from the
    original in one file. The trees are only walked, never changed."""
    return ast.parse(source)


class Package:
    """The modules of a source tree of the package and the imports of each, read with ast."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._imports: dict[tuple[str, bool], frozenset[str]] = {}  # closures ask for the same module many times

    def _module_name(self, path: Path) -> str:
        parts = list(path.relative_to(self.root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    @cached_property
    def modules(self) -> dict[str, Path]:
        return {self._module_name(p): p for p in self.root.rglob("*.py")}

    @cached_property
    def trees(self) -> dict[str, ast.Module]:
        return {m: _parsed(p.read_text()) for m, p in self.modules.items()}

    def _resolve(self, module: str, node: ast.ImportFrom) -> list[str]:
        if node.level:
            is_pkg = self.modules[module].name == "__init__.py"
            base = module.split(".")[: len(module.split(".")) - node.level + is_pkg]
            target = ".".join([*base, node.module] if node.module else base)
        else:
            target = node.module or ""
        names = [f"{target}.{a.name}" for a in node.names]
        # `from pkg import sub` imports the submodule when there is one, else a name defined in pkg.
        return [n if n in self.modules else target for n in names]

    def imports_of(self, module: str, *, runtime_only: bool = False) -> frozenset[str]:
        """Every module ``module`` imports anywhere in its file (lazy imports inside functions included);
        ``runtime_only``: without the ``if TYPE_CHECKING:`` blocks."""
        key = (module, runtime_only)
        if key not in self._imports:
            self._imports[key] = self._imports_of(module, runtime_only)
        return self._imports[key]

    def _imports_of(self, module: str, runtime_only: bool) -> frozenset[str]:
        tree = self.trees[module]
        skip = _type_checking_nodes(tree) if runtime_only else set()
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                found.update(self._resolve(module, node))
        return frozenset(found)

    def _closure(self, module: str) -> set[str]:
        seen, todo = set(), [module]
        while todo:
            current = todo.pop()
            if current in seen or current not in self.modules:
                continue
            seen.add(current)
            todo.extend(i for i in self.imports_of(current) if i.startswith(PACKAGE))
        return seen

    def _ours_imported(self, module: str) -> set[str]:
        """The package's modules that ``module`` depends on at run time (a name imported from a package counts
        as its ``__init__``; a package importing its own submodules is not a dependency on itself)."""
        out = set()
        for name in self.imports_of(module, runtime_only=True):
            while name and name not in self.modules:
                name = name.rpartition(".")[0]
            if name and name != module and name.startswith(PACKAGE):
                out.add(name)
        return out

    def faces(self) -> list[str]:
        return [m for m in sorted(self.modules) if _in(_ours(m) or "", FACES)]


def core_problems(pkg: Package) -> list[str]:
    problems = set()
    for module in sorted(pkg.modules):
        short = _ours(module)
        if short is None or not _in(short, CORE):
            continue
        for dep in sorted(pkg._closure(module)):
            dep_short = _ours(dep)
            if dep_short is not None and not _in(dep_short, CORE + CORE_MAY_USE):
                problems.add(f"{short} reaches {dep_short}")
            for name in pkg.imports_of(dep):
                if _in(name, IO_MODULES):
                    problems.add(f"{short} reaches {name} (via {_ours(dep)})")
    return sorted(problems)


def face_import_problems(pkg: Package) -> list[str]:
    """Every module of the faces, not only their ``__init__``: a store import in server/run_tools.py counts."""
    problems = []
    for module in pkg.faces():
        for name in sorted(pkg.imports_of(module)):
            short = _ours(name) or name
            if _in(short, NOT_FOR_FACES):
                problems.append(f"{_ours(module)} imports {short}")
    return problems


def face_context_problems(pkg: Package) -> list[str]:
    """``<anything>.store`` / ``.secrets`` in a face: the application context's store or secret store reached
    around the services (a face's own names are never called that, so any such attribute is the context's)."""
    problems = []
    for module in pkg.faces():
        for node in ast.walk(pkg.trees[module]):
            if isinstance(node, ast.Attribute) and node.attr in CONTEXT_PARTS_NOT_FOR_FACES:
                problems.append(f"{_ours(module)}:{node.lineno} reaches .{node.attr}")
    return problems


def face_importer_problems(pkg: Package) -> list[str]:
    problems = []
    for module in sorted(pkg.modules):
        short = _ours(module)
        if short is None or _in(short, FACES) or short == "__main__":
            continue
        problems += [f"{short} imports {_ours(n)}" for n in pkg.imports_of(module) if _ours(n) and _in(_ours(n), FACES)]
    return problems


def service_exception_problems(pkg: Package) -> list[str]:
    problems = []
    for module, tree in sorted(pkg.trees.items()):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in (f"{PACKAGE}.sessions", f"{PACKAGE}.runs"):
                problems += [f"{_ours(module)} imports {a.name} from {node.module}" for a in node.names
                             if a.name.endswith("Error")]  # fmt: skip
    return problems


def import_cycles(pkg: Package) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), function-level imports included."""
    graph = {m: pkg._ours_imported(m) for m in pkg.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(_ours(x) or x for x in component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


THE_PACKAGE = Package(ROOT)


def test_the_checker_sees_the_package() -> None:
    mods = THE_PACKAGE.modules
    assert f"{PACKAGE}.logs.classify" in mods and f"{PACKAGE}.targets.docker" in mods
    assert f"{PACKAGE}.store" in THE_PACKAGE.imports_of(f"{PACKAGE}.runs.start")  # a known edge is found
    assert "sqlite3" in THE_PACKAGE.imports_of(f"{PACKAGE}.store")
    assert f"{PACKAGE}.server.run_tools" in THE_PACKAGE.faces() and f"{PACKAGE}.cli.plan_cmds" in THE_PACKAGE.faces()


def test_the_pure_core_imports_no_io_and_nothing_impure_of_ours() -> None:
    problems = core_problems(THE_PACKAGE)
    assert problems == [], "\n".join(problems)


def test_faces_use_services_not_the_store_or_targets() -> None:
    problems = face_import_problems(THE_PACKAGE)
    assert problems == [], "\n".join(problems)


def test_faces_reach_neither_store_nor_secrets_through_the_context() -> None:
    problems = face_context_problems(THE_PACKAGE)
    assert problems == [], "\n".join(problems)


def test_nothing_imports_a_face() -> None:
    problems = face_importer_problems(THE_PACKAGE)
    assert problems == [], "\n".join(problems)


def test_no_module_imports_a_service_for_an_exception() -> None:
    problems = service_exception_problems(THE_PACKAGE)
    assert problems == [], "\n".join(problems)


def test_no_import_cycles_function_level_imports_included() -> None:
    cycles = import_cycles(THE_PACKAGE)
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


# --- each rule fails on a planted violation (a temporary copy of the package, one line added) ----------------

PLANTED = [
    # (file, line appended inside a function, the rule, what the rule must report)
    ("server/run_tools.py", "from verl_async_dapo.store import Store", face_import_problems,
     "server.run_tools imports store"),
    ("cli/status_view.py", "from verl_async_dapo.targets.registry import get_target", face_import_problems,
     "cli.status_view imports targets.registry"),
    ("server/training.py", "ctx.store.create_session()", face_context_problems, "server.training:"),
    ("cli/notify_cmds.py", "ctx.secrets.get('x')", face_context_problems, "cli.notify_cmds:"),
    ("policy.py", "import subprocess", core_problems, "policy reaches subprocess"),
    ("flow.py", "from verl_async_dapo.store import Store", core_problems, "flow reaches store"),
    ("runs/progress.py", "from verl_async_dapo.server import models", face_importer_problems,
     "runs.progress imports server"),
    ("supervisor/__init__.py", "from verl_async_dapo.runs import ResolveError", service_exception_problems,
     "supervisor imports ResolveError from verl_async_dapo.runs"),
    # a lazy import, inside a function, closing a cycle: exceptions is imported by settings
    ("exceptions.py", "from verl_async_dapo.settings import param_hint", import_cycles, "settings"),
    # a module importing its own package's facade
    ("verl/plan.py", "from verl_async_dapo.verl import build_plan", import_cycles, "verl.plan"),
]


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pkg") / PACKAGE
    shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.parametrize(("rel", "line", "rule", "expected"), PLANTED, ids=[f"{p[2].__name__}:{p[0]}" for p in PLANTED])
def test_each_rule_names_a_planted_violation(package_copy: Path, rel: str, line: str, rule, expected: str) -> None:
    path = package_copy / rel
    original = path.read_text()
    assert rule(Package(package_copy)) == [], "the copy must start clean"
    try:
        path.write_text(original + f"\n\ndef _planted(ctx):  # noqa\n    {line}\n")
        found = rule(Package(package_copy))
    finally:
        path.write_text(original)
    text = repr(found)
    assert expected in text, f"{rule.__name__} missed a planted {line!r} in {rel}: {found}"


def test_type_checking_imports_close_no_cycle(package_copy: Path) -> None:
    """An ``if TYPE_CHECKING:`` import never runs, so it closes no cycle (the context imports the store that way)."""
    path = package_copy / "exceptions.py"
    original = path.read_text()
    try:
        path.write_text(original + "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from verl_async_dapo.settings import param_hint\n")  # fmt: skip
        assert import_cycles(Package(package_copy)) == []
    finally:
        path.write_text(original)


# --- one import path per name ------------------------------------------------------------------------------------

# A name imported from a module that only passes it on, kept on purpose: the faces may not import the targets, so
# they take the container spec from the service that uses it.
PASSED_ON = {(f"{PACKAGE}.sessions", "CreateSpec")}
REPO = ROOT.parents[1]


def _defined_and_imported(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    defined: set[str] = set()
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    for node in tree.body:  # module-level imports: what a module passes on
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            imported.update({a.asname or a.name: node.module for a in node.names})
    return defined, imported


def passed_on_imports(pkg: Package, importers: list[Path]) -> list[str]:
    """``from M import X`` where M does not define X but imports it from elsewhere: a second path to X. A package
    may hand on its own submodules' names (its facade), never another package's."""
    facts = {m: _defined_and_imported(t) for m, t in pkg.trees.items()}
    found = []
    for path in importers:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module in pkg.modules and node.level == 0):
                continue
            defined, imported = facts[node.module]
            for alias in node.names:
                source = imported.get(alias.name)
                if alias.name in defined or f"{node.module}.{alias.name}" in pkg.modules or source is None:
                    continue
                own_facade = pkg.modules[node.module].name == "__init__.py" and source.startswith(f"{node.module}.")
                if not own_facade and (node.module, alias.name) not in PASSED_ON:
                    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
                    found.append(f"{where}:{node.lineno}: {alias.name} from {_ours(node.module)} "
                                 f"(defined in {_ours(source)})")  # fmt: skip
    return found


def _importers() -> list[Path]:
    return sorted(p for top in ("skill", "tests", "bench", "scripts") for p in (REPO / top).rglob("*.py")
                  if ".venv" not in p.parts)  # fmt: skip


def test_one_import_path_per_name() -> None:
    found = passed_on_imports(THE_PACKAGE, _importers())
    assert found == [], "import each name from the module that defines it:\n" + "\n".join(found)


def test_a_planted_second_path_is_named(package_copy: Path, tmp_path: Path) -> None:
    importer = tmp_path / "test_planted.py"
    importer.write_text("from verl_async_dapo.runs.start import TrainingSettings\n"
                        "from verl_async_dapo.verl import build_plan\n")  # fmt: skip
    found = passed_on_imports(Package(package_copy), [importer])
    assert len(found) == 1 and "TrainingSettings from runs.start (defined in settings)" in found[0], found
