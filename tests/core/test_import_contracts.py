"""Import contracts (the layout's rules, ../README "How it works"), checked on the source with ast:

- the pure core (question flow, features, policy, launch plans, log parsing, classification) imports no I/O:
  no docker, no sqlite, no mcp, no subprocesses, sockets, threads or event loops, directly or through the modules
  it imports; of the rest of the package only its configuration (settings, paths) and the exception tree;
- the faces (the MCP server, the CLI) import services, never the store or the targets;
- nothing imports a face, and no module imports a service just for an exception (exceptions.py has them all).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

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


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    if node.level:
        base = module.split(".")[: len(module.split(".")) - node.level + (_modules()[module].name == "__init__.py")]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    names = [f"{target}.{a.name}" for a in node.names]
    # `from pkg import sub` imports the submodule when there is one, else a name defined in pkg.
    return [n if n in _modules() else target for n in names]


@cache
def imports_of(module: str) -> frozenset[str]:
    """Every module ``module`` imports anywhere in its file (lazy imports inside functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(_modules()[module].read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(_resolve(module, node))
    return frozenset(found)


def _ours(name: str) -> str | None:
    return name.removeprefix(f"{PACKAGE}.") if name.startswith(f"{PACKAGE}.") else None


def _in(name: str, families: tuple[str, ...]) -> bool:
    return any(name == f or name.startswith(f"{f}.") for f in families)


def _closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen or current not in _modules():
            continue
        seen.add(current)
        todo.extend(i for i in imports_of(current) if i.startswith(PACKAGE))
    return seen


def test_the_checker_sees_the_package() -> None:
    mods = _modules()
    assert f"{PACKAGE}.logs.classify" in mods and f"{PACKAGE}.targets.docker" in mods
    assert f"{PACKAGE}.store" in imports_of(f"{PACKAGE}.runs")  # a known edge is found
    assert "sqlite3" in imports_of(f"{PACKAGE}.store")


def test_the_pure_core_imports_no_io_and_nothing_impure_of_ours() -> None:
    problems = []
    for module in sorted(_modules()):
        short = _ours(module)
        if short is None or not _in(short, CORE):
            continue
        for dep in sorted(_closure(module)):
            dep_short = _ours(dep)
            if dep_short is not None and not _in(dep_short, CORE + CORE_MAY_USE):
                problems.append(f"{short} reaches {dep_short}")
        for dep in sorted(_closure(module)):
            for name in imports_of(dep):
                if _in(name, IO_MODULES):
                    problems.append(f"{short} reaches {name} (via {_ours(dep)})")
    assert sorted(set(problems)) == [], "\n".join(sorted(set(problems)))


def test_faces_use_services_not_the_store_or_targets() -> None:
    problems = []
    for face in FACES:
        for name in sorted(imports_of(f"{PACKAGE}.{face}")):
            short = _ours(name) or name
            if _in(short, NOT_FOR_FACES):
                problems.append(f"{face} imports {short}")
    assert problems == [], "\n".join(problems)


def test_nothing_imports_a_face() -> None:
    problems = []
    for module in sorted(_modules()):
        short = _ours(module)
        if short is None or _in(short, FACES) or short == "__main__":
            continue
        problems += [f"{short} imports {_ours(n)}" for n in imports_of(module) if _ours(n) and _in(_ours(n), FACES)]
    assert problems == [], "\n".join(problems)


def test_no_module_imports_a_service_for_an_exception() -> None:
    problems = []
    for module, path in sorted(_modules().items()):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in (f"{PACKAGE}.sessions", f"{PACKAGE}.runs"):
                problems += [f"{_ours(module)} imports {a.name} from {node.module}" for a in node.names
                             if a.name.endswith("Error")]  # fmt: skip
    assert problems == [], "\n".join(problems)
