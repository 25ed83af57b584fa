"""The package's parts depend on each other in one direction (DEVELOPERS.md: cli -> run -> lightning ->
{rollout, diagnostics, filtering, algorithms} -> {envs, models}), with no import cycle and no private
name borrowed across parts. Every import counts, lazy ones inside functions too; only
``if TYPE_CHECKING:`` blocks are left out (annotations, never executed)."""

from __future__ import annotations

import ast
from pathlib import Path

import agentcollapse

ROOT = Path(agentcollapse.__file__).parent
# Higher imports lower. Parts on one layer may import each other, but never in a cycle.
LAYERS = {
    "cli": 7,
    "run": 6,
    "sweep": 6,
    "analysis": 6,
    "lightning": 5,
    "config": 4,
    "rollout": 3,
    "diagnostics": 3,
    "filtering": 3,
    "algorithms": 3,
    "envs": 2,
    "models": 2,
    "records": 1,
    "errors": 0,
    "seeds": 0,
    "registry": 1,
    "progress": 0,
}


def _part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "agentcollapse" else None


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every import outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for child in node.body for n in ast.walk(child)}
    own = ".".join(("agentcollapse", *path.relative_to(ROOT).with_suffix("").parts))
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import: resolve against this module's package
                pkg = (
                    own.split(".")[: -node.level]
                    if not path.name == "__init__.py"
                    else own.split(".")[: len(own.split(".")) - node.level + 1]
                )
                base = ".".join([*pkg, base] if base else pkg)
            if base == "agentcollapse":  # ``from agentcollapse import envs``: each name is a part
                out += [(f"agentcollapse.{a.name}", []) for a in node.names]
            else:
                out.append((base, [a.name for a in node.names]))
    return out


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    edges: dict[str, set[str]] = {}
    private = []
    for path in ROOT.rglob("*.py"):
        src = _part("agentcollapse." + ".".join(path.relative_to(ROOT).with_suffix("").parts))
        if src is None or src == "__init__":
            continue
        for module, names in _imports(path):
            dst = _part(module)
            if dst is None or dst == src:
                continue
            edges.setdefault(src, set()).add(dst)
            private += [f"{path.relative_to(ROOT)} imports {module}.{n}" for n in names if n.startswith("_")]
            if any(p.startswith("_") and p != "__init__" for p in module.split(".")[2:]):
                private.append(f"{path.relative_to(ROOT)} imports private module {module}")
    return edges, private


def test_every_part_has_a_layer():
    edges, _ = _graph()
    assert set(edges) | {d for ds in edges.values() for d in ds} <= set(LAYERS)


def test_parts_only_import_their_own_layer_or_below():
    edges, _ = _graph()
    upward = [f"{s} -> {d}" for s, ds in edges.items() for d in ds if LAYERS[d] > LAYERS[s]]
    assert not upward, upward


def test_no_import_cycle_between_parts():
    edges, _ = _graph()

    def reaches(start: str, goal: str, seen: set) -> bool:
        for nxt in edges.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = sorted(p for p in edges if reaches(p, p, set()))
    assert not cycles, f"parts on an import cycle: {cycles}"


def test_no_private_helper_is_borrowed_across_parts():
    _, private = _graph()
    assert not private, private
