"""The package's parts depend on each other in one direction (DEVELOPERS.md: cli -> run -> lightning ->
{rollout, diagnostics, filtering, algorithms} -> {envs, models} -> config), with no import cycle between
modules, inside one folder or across folders, no loop between the folders themselves (config at the
bottom floor: it imports nothing above it), and no private name borrowed across folders.

Every import counts: lazy ones inside functions and ``if TYPE_CHECKING:`` ones too (a lazy import still
runs, and an annotation-only one still ties the modules together). Importing ``agentcollapse.a.b`` from
outside ``a`` also runs ``a/__init__.py``, so it counts as an import of ``agentcollapse.a`` as well."""

from __future__ import annotations

import ast
from pathlib import Path

import agentcollapse

ROOT = Path(agentcollapse.__file__).parent
# Higher imports lower. Parts on one layer may import each other, but never in a cycle. A part is a
# folder (or a top-level module).
LAYERS = {
    "cli": 7,
    "run": 6,
    "sweep": 6,
    "analysis": 6,
    "lightning": 5,
    "integrations": 5,  # our callbacks inside other trainers (TRL): beside lightning, whose callbacks they reuse
    "rollout": 3,
    "diagnostics": 3,
    "filtering": 3,
    "algorithms": 3,
    "envs": 2,
    "models": 2,
    "sandbox": 1,  # runs untrusted code for any env (DeepCoder): the standard library only, nothing above
    "config": 1,  # the schema, where conf/ is and composition from it: pure data at the bottom
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


def _folder(module: str) -> str:
    """The folder (or top-level module) of a package module: ``agentcollapse.config.compose`` -> ``config``."""
    return module.split(".")[1]


def _folder_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Folder -> the folders its modules import (lazy and TYPE_CHECKING imports included)."""
    out: dict[str, set[str]] = {}
    for src, targets in edges.items():
        if src == "agentcollapse":
            continue
        out.setdefault(_folder(src), set()).update(_folder(t) for t in targets if t != "agentcollapse" and _folder(t) != _folder(src))
    return out


def test_no_import_loop_between_folders():
    # no file-level cycle is not enough: config.validate -> envs and envs -> config (a TYPE_CHECKING
    # import) made config and envs one tangle without any cycle between two files
    loops = _cycles(_folder_edges(_graph()[0]))
    where = {
        tuple(loop): sorted(
            f"{s} -> {d}" for s, ds in _graph()[0].items() for d in ds if {_folder(s), _folder(d)} <= set(loop) and _folder(s) != _folder(d)
        )
        for loop in loops
    }
    assert not loops, f"folders on an import loop, with the imports that make it: {where}"


def test_the_config_layer_imports_nothing_above_it():
    # envs, models, algorithms and diagnostics import the config types; no module of config/ may reach
    # back up (a loop even when lazy or TYPE_CHECKING only): names are checked by run.checks
    edges, _ = _graph()
    for module in (m for m in edges if m == "agentcollapse.config" or m.startswith("agentcollapse.config.")):
        assert all(LAYERS[_part(d)] <= LAYERS["config"] for d in edges[module]), (module, edges[module])


def test_no_private_helper_is_borrowed_across_parts():
    _, private = _graph()
    assert not private, private


def test_the_cycle_finder_finds_a_lazy_cycle_inside_a_folder():
    assert _cycles({"a.pruning": {"a.study"}, "a.study": {"a.pruning"}, "a.x": set()}) == [["a.pruning", "a.study"]]


def test_the_folder_graph_finds_a_loop_that_no_two_files_make():
    # config.validate -> envs.base, envs -> config.schema: no file cycle, one folder loop
    edges = {
        "agentcollapse.config.validate": {"agentcollapse.envs.base"},
        "agentcollapse.config.schema": set(),
        "agentcollapse.envs": {"agentcollapse.config.schema"},
        "agentcollapse.envs.base": set(),
    }
    assert not _cycles(edges)
    assert _cycles(_folder_edges(edges)) == [["config", "envs"]]


def test_lazy_and_type_checking_imports_are_edges():
    edges, _ = _graph()
    assert "agentcollapse.config" in edges["agentcollapse.envs"]  # only under ``if TYPE_CHECKING:``
    assert "agentcollapse.run.lifecycle" in edges["agentcollapse.run"]  # inside the package's __getattr__
