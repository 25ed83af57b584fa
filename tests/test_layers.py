"""The package's parts depend on each other in one direction (DEVELOPERS.md: cli -> run -> lightning ->
{rollout, diagnostics, filtering, algorithms} -> {envs, models} -> config), with no import cycle between
modules, inside one folder or across folders, and no private name borrowed across folders.

Every import counts: lazy ones inside functions and ``if TYPE_CHECKING:`` ones too (a lazy import still
runs, and an annotation-only one still ties the modules together). Importing ``agentcollapse.a.b`` from
outside ``a`` also runs ``a/__init__.py``, so it counts as an import of ``agentcollapse.a`` as well."""

from __future__ import annotations

import ast
from pathlib import Path

import agentcollapse

ROOT = Path(agentcollapse.__file__).parent
# Higher imports lower. Parts on one layer may import each other, but never in a cycle. A part is a
# folder (or a top-level module); a few modules of config/ sit above the registries they check.
LAYERS = {
    "cli": 7,
    "run": 6,
    "sweep": 6,
    "analysis": 6,
    "lightning": 5,
    "config.compose": 4,  # composition into a checked run config
    "config.validate": 4,  # names against the registries of the parts below
    "config.resolve": 4,  # algorithm presets (algorithms.presets)
    "rollout": 3,
    "diagnostics": 3,
    "filtering": 3,
    "algorithms": 3,
    "envs": 2,
    "models": 2,
    "config": 1,  # the schema and where conf/ is: pure data at the bottom
    "records": 1,
    "registry": 1,
    "errors": 0,
    "seeds": 0,
    "progress": 0,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("agentcollapse", *parts))


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every import in the file, lazy and TYPE_CHECKING ones included."""
    own = _module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import: resolve against this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:  # ``from agentcollapse.x import y``: y may be a submodule
                sub = f"{base}.{a.name}"
                where = ROOT / Path(*sub.split(".")[1:])
                out.append((sub, []) if where.with_suffix(".py").exists() or (where / "__init__.py").exists() else (base, [a.name]))
    return out


def _part(module: str) -> str | None:
    """The layer key of a package module: its folder, or ``folder.module`` where LAYERS names it."""
    parts = module.split(".")
    if parts[0] != "agentcollapse" or len(parts) < 2:
        return None
    return ".".join(parts[1:3]) if ".".join(parts[1:3]) in LAYERS else parts[1]


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    """Module -> imported package modules; and the private names borrowed across folders."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private = []
    for src, path in modules.items():
        for module, names in _imports(path):
            if _part(module) is None:
                continue
            targets = {module} if module in modules else set()
            # importing a.b.c runs a/__init__ and a/b/__init__ first, unless the importer is inside them
            parts = module.split(".")
            targets |= {".".join(parts[:i]) for i in range(2, len(parts)) if not (src + ".").startswith(".".join(parts[:i]) + ".")}
            edges[src] |= {t for t in targets if t in modules and t != src}
            if module.split(".")[1] != src.split(".")[1]:
                private += [f"{path.relative_to(ROOT)} imports {module}.{n}" for n in names if n.startswith("_")]
                if any(p.startswith("_") for p in module.split(".")[2:]):
                    private.append(f"{path.relative_to(ROOT)} imports private module {module}")
    return edges, private


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
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
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_part_has_a_layer():
    edges, _ = _graph()
    parts = {_part(m) for m in edges} | {_part(d) for ds in edges.values() for d in ds}
    assert parts - {None} <= set(LAYERS), sorted(parts - {None} - set(LAYERS))


def test_parts_only_import_their_own_layer_or_below():
    edges, _ = _graph()
    upward = sorted(f"{s} -> {d}" for s, ds in edges.items() if _part(s) for d in ds if LAYERS[_part(d)] > LAYERS[_part(s)])
    assert not upward, upward


def test_no_import_cycle_between_modules():
    edges, _ = _graph()
    edges.pop("agentcollapse", None)  # the package's own __init__ imports nothing of its parts
    assert not _cycles(edges), f"modules on an import cycle: {_cycles(edges)}"


def test_the_config_layer_imports_nothing_above_it():
    # models and envs import the config types; config.schema must not reach back up (a cycle even when lazy)
    edges, _ = _graph()
    for module in ("agentcollapse.config", "agentcollapse.config.schema", "agentcollapse.config.conf_files"):
        assert all(LAYERS[_part(d)] <= LAYERS["config"] for d in edges[module]), (module, edges[module])


def test_no_private_helper_is_borrowed_across_parts():
    _, private = _graph()
    assert not private, private


def test_the_cycle_finder_finds_a_lazy_cycle_inside_a_folder():
    assert _cycles({"a.pruning": {"a.study"}, "a.study": {"a.pruning"}, "a.x": set()}) == [["a.pruning", "a.study"]]
