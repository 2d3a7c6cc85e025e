"""The import graph keeps the floors docs/design.md describes: every import (lazy ones inside functions too)
points down or sideways, never up, and no two packages import each other."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Bottom to top. A module belongs to the first floor whose prefix names it (longest prefix wins).
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("codespec", "codespec.errors", "codespec.fim", "codespec.modes", "codespec.flags", "codespec.stats",
              "codespec.framing", "codespec.tokenizer")),
    ("decode", ("codespec.decode",)),
    ("tiny models", ("codespec.tiny",)),
    ("context", ("codespec.context",)),
    ("models", ("codespec.models",)),
    ("assembly", ("codespec.engine_options",)),
    ("sessions", ("codespec.sessions",)),
    ("server", ("lsp",)),
    ("tools", ("codespec.benchmarks", "codespec.distill", "codespec.reliability", "codespec.llama_server",
               "codespec.generate", "codespec.demo")),
]
# Command modules wire several floors into one command line: they sit on top, whichever folder holds them.
COMMANDS = ("codespec.cli", "codespec.reliability.launch")

# Inside the decode core, bottom to top; `remote` speaks HTTP and needs only the interface.
DECODE_ORDER = ["codespec.decode.api", "codespec.decode.runtimes", "codespec.decode.sampling",
                "codespec.decode.drafters", "codespec.decode.eagle", "codespec.decode.engine"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every project module a file imports, at module level or inside a function (`from a import b` may name
    a module b or a name in a: both candidates are returned and only the existing one counts)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] in ("codespec", "lsp")}


def project_graph() -> dict[str, set[str]]:
    files = [p for top in ("codespec", "lsp") for p in (ROOT / top).rglob("*.py")]
    modules = {module_name(p): p for p in files}
    return {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}


def is_command(module: str) -> bool:
    return module in COMMANDS or module.endswith(".cli")


def floor_of(module: str) -> int:
    if is_command(module):
        return len(FLOORS)
    best, floor = -1, None
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            exact = prefix in ("codespec",)  # the top package itself is base; its subpackages are not
            if (module == prefix or (not exact and module.startswith(prefix + "."))) and len(prefix) > best:
                best, floor = len(prefix), index
    assert floor is not None, f"{module} is on no floor: add it to FLOORS (and to docs/design.md)"
    return floor


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "codespec" and len(parts) > 1 else parts[0]


def test_every_import_points_down_or_sideways():
    upward = []
    for module, targets in project_graph().items():
        for target in targets:
            if floor_of(target) > floor_of(module):
                upward.append(f"{module} ({FLOORS[floor_of(module)][0]}) imports {target}")
    assert not upward, "imports from a lower floor to a higher one:\n" + "\n".join(sorted(upward))


def test_no_two_packages_import_each_other():
    edges: dict[str, set[str]] = {}
    for module, targets in project_graph().items():
        if is_command(module):
            continue
        for target in targets:
            if package_of(target) != package_of(module):
                edges.setdefault(package_of(module), set()).add(package_of(target))
    cycles = sorted(f"{a} <-> {b}" for a, targets in edges.items() for b in targets
                    if a < b and a in edges.get(b, set()))
    assert not cycles, f"packages importing each other: {cycles}"


def test_decode_core_imports_point_one_way():
    def rank(module: str) -> int | None:
        for index, prefix in enumerate(DECODE_ORDER):
            if module == prefix or module.startswith(prefix + "."):
                return index
        return None

    graph = project_graph()
    wrong = []
    for module, targets in graph.items():
        if not module.startswith("codespec.decode."):
            continue
        for target in targets:
            if module.startswith("codespec.decode.remote"):
                if target.startswith("codespec.decode.") and target != "codespec.decode.api":
                    wrong.append(f"{module} -> {target} (remote needs only the interface)")
            elif target.startswith("codespec.decode.") and rank(module) is not None and rank(target) is not None:
                if rank(target) > rank(module):  # type: ignore[operator]
                    wrong.append(f"{module} -> {target}")
    assert not wrong, "decode core imports pointing up:\n" + "\n".join(sorted(wrong))


def test_the_floor_rules_catch_an_upward_import(tmp_path):
    # The checker itself can fail: a base module importing the server is reported.
    assert floor_of("codespec.errors") < floor_of("lsp.server") < floor_of("codespec.benchmarks.replay")
    assert floor_of("codespec.decode.runtimes.kv") < floor_of("codespec.models.load")
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from lsp.server import create_server\n")
    assert "lsp.server" in imports_of(bad)
