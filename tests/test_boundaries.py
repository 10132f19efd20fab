"""Package boundaries that docs/ARCHITECTURE.md promises: what each package may import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import dflash_tui

PACKAGE_DIR = Path(dflash_tui.__file__).parent


def _all_dflash_tui_modules() -> list[str]:
    # From the file tree, not pkgutil.walk_packages: walking imports every package it visits.
    names = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def _loaded_after_importing(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    """Import `modules` in a fresh interpreter; the loaded modules that start with a prefix."""
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        f"print('\\n'.join(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_dashboard_never_imports_torch_or_the_trainer():
    # A fresh interpreter: importing every dashboard module must load neither torch nor the
    # trainer, not even indirectly; the dashboard depends only on the run-dir contract it owns.
    modules = _all_dflash_tui_modules()
    assert len(modules) > 5, modules
    loaded = _loaded_after_importing(modules, ("torch", "dflash_train"))
    assert not loaded, loaded[:5]


SRC = PACKAGE_DIR.parent


def _import_graph(package: str) -> dict[str, set[str]]:
    """module -> the modules of `package` it imports, function-local and TYPE_CHECKING ones included."""
    files = {}
    for path in sorted((SRC / package).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for name in names:
                target = resolve(name)
                # A package's own __init__ imported by its submodules is not a loop of design.
                if target and target != mod and not mod.startswith(target + "."):
                    graph[mod].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
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
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", ["dflash_tui", "dflash_train"])
def test_no_import_cycles(package):
    graph = _import_graph(package)
    assert len(graph) > 5
    assert _cycles(graph) == []


def test_headless_core_knows_nothing_of_the_ui():
    # --check must work without Textual: remote/, run/, gpu/, config and the schema may not
    # import dflash_tui.ui or textual.
    core = [n for n in _all_dflash_tui_modules()
            if not n.startswith("dflash_tui.ui") and n not in ("dflash_tui.cli", "dflash_tui.__main__")]
    assert not _loaded_after_importing(core, ("textual", "dflash_tui.ui"))


# docs/ARCHITECTURE.md, "Packages and what each may import": the layers, bottom to top. A
# package or top-level module imports only from layers below its own (function-local and
# TYPE_CHECKING imports counted); two of one layer import neither each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("contract", "verdicts"),
    ("words", "progress_regex", "small_file", "env_entry", "serve_auth", "import_warnings", "redaction"),
    ("table_values",),
    ("remote",),
    ("config", "gpu"),
    ("run",),
    ("backends",),
    ("watch",),
    ("fleet",),
    ("health",),
    ("bundle",),
    ("recording",),
    ("config_file",),
    ("ui",),
    ("cli",),
    ("__main__",),
)


def _unit(module: str) -> str:
    """dflash_tui.run.verdict.health -> "run"; dflash_tui.cli -> "cli"; the package itself -> "__init__"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _upward_imports(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    rank = {unit: i for i, layer in enumerate(layers) for unit in layer}
    rank["__init__"] = -1   # the package's own __init__ (its version) is below everything
    bad = []
    for mod, targets in sorted(graph.items()):
        for target in sorted(targets):
            u, v = _unit(mod), _unit(target)
            if u != v and rank.get(v, len(layers)) >= rank.get(u, -2):
                bad.append(f"{mod} imports {target}")
    return bad


def test_the_layer_check_finds_an_upward_import():
    graph = {"p.run.monitor": {"p.session"}, "p.session": {"p.run.launch"}, "p.run.launch": set()}
    assert _upward_imports(graph, (("run",), ("session",))) == ["p.run.monitor imports p.session"]
    assert _upward_imports({"p.config": {"p.gpu.sample"}}, (("config", "gpu"),)) == ["p.config imports p.gpu.sample"]


def test_every_package_is_in_a_layer():
    units = {_unit(m) for m in _all_dflash_tui_modules()} - {"__init__"}
    placed = {u for layer in LAYERS for u in layer}
    assert units <= placed, f"add {sorted(units - placed)} to LAYERS (and docs/ARCHITECTURE.md)"


def test_imports_go_down_the_layers_only():
    assert _upward_imports(_import_graph("dflash_tui"), LAYERS) == []


# run/'s rooms, bottom to top (src/dflash_tui/run/__init__.py): a room imports only from rooms
# below its own; two of one layer import neither each other.
RUN_LAYERS: tuple[tuple[str, ...], ...] = (
    ("attempts", "wrapper", "eager", "stacks"),
    ("evidence",),
    ("verdict",),
    ("launch",),
    ("history",),
)


def _run_graph() -> dict[str, set[str]]:
    """The import graph inside dflash_tui.run, with each module renamed so that _unit sees its room."""
    graph = _import_graph("dflash_tui")
    inside = {m for m in graph if m.startswith("dflash_tui.run.")}
    return {m.removeprefix("dflash_tui.run."): {t.removeprefix("dflash_tui.run.") for t in graph[m] if t in inside}
            for m in inside}


def _room(module: str) -> str:
    return module.split(".")[0]


def test_every_run_module_is_in_a_room():
    rooms = {_room(m) for m in _run_graph()}
    placed = {r for layer in RUN_LAYERS for r in layer}
    assert rooms <= placed, f"add {sorted(rooms - placed)} to RUN_LAYERS (and run/__init__.py)"


def test_run_rooms_import_down_only():
    # _upward_imports reads the second dotted part as the unit: prefix a root to reuse it.
    graph = {f"r.{m}": {f"r.{t}" for t in ts} for m, ts in _run_graph().items()}
    assert _upward_imports(graph, RUN_LAYERS) == []


def test_run_has_few_modules_at_its_top():
    top = [p for p in (PACKAGE_DIR / "run").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()]
    assert len(top) <= 20, sorted(p.name for p in top)


# recording/'s rooms, bottom to top (src/dflash_tui/recording/README.md): the store is the
# ground, the notifications and the goodput stand on it side by side, the recovery on those
# three; the modules at recording/'s top (the daemon and its doors) form the room "top".
RECORDING_LAYERS: tuple[tuple[str, ...], ...] = (
    ("store",),
    ("notify", "goodput"),
    ("recovery",),
    ("top",),
)


def _recording_graph() -> dict[str, set[str]]:
    """The import graph inside dflash_tui.recording, each module named ROOM.MODULE ("top" for the
    modules at recording/'s top) so that _unit sees its room."""
    graph = _import_graph("dflash_tui")
    inside = {m for m in graph if m.startswith("dflash_tui.recording.")}

    def named(module: str) -> str:
        rest = module.removeprefix("dflash_tui.recording.")
        return rest if (PACKAGE_DIR / "recording" / rest.split(".")[0] / "__init__.py").exists() else f"top.{rest}"
    return {named(m): {named(t) for t in graph[m] if t in inside} for m in inside}


def test_every_recording_module_is_in_a_room():
    rooms = {_room(m) for m in _recording_graph()}
    placed = {r for layer in RECORDING_LAYERS for r in layer}
    assert rooms <= placed, f"add {sorted(rooms - placed)} to RECORDING_LAYERS (and recording/README.md)"


def test_recording_rooms_import_down_only():
    graph = {f"r.{m}": {f"r.{t}" for t in ts} for m, ts in _recording_graph().items()}
    assert _upward_imports(graph, RECORDING_LAYERS) == []


def test_the_ui_holds_a_watch_and_nothing_under_it():
    # The dashboard's sources adapt a RunWatch (dflash_tui.watch, its package API); the Session,
    # the transport and the nodes' session under it are the watch's own.
    graph = _import_graph("dflash_tui")
    bad = [f"{m} imports {t}" for m, targets in sorted(graph.items()) if m.startswith("dflash_tui.ui")
           for t in sorted(targets) if t.startswith("dflash_tui.watch.")]
    assert bad == []


def test_a_backends_folder_is_imported_by_backends_only():
    # A launch backend is one folder (backends/NAME/): what the layers below it need of it goes
    # through the Launcher's declared slots (run/launch/launcher.py), never by importing it.
    graph = _import_graph("dflash_tui")
    folders = [p.name for p in (PACKAGE_DIR / "backends").iterdir() if (p / "__init__.py").exists()]
    assert folders, "no backend folder under backends/"
    bad = [f"{m} imports {t}" for m, targets in sorted(graph.items()) if not m.startswith("dflash_tui.backends")
           for t in sorted(targets) if any(t == f"dflash_tui.backends.{f}" or t.startswith(f"dflash_tui.backends.{f}.")
                                           for f in folders)]
    assert bad == []


def test_the_fleet_holds_run_watches_only():
    # The fleet polls each profile's RunWatch (one host or several nodes alike); what is under
    # the seam (HostWatch, NodesWatch, the Session) is the watch's own.
    under_the_seam = {"HostWatch", "NodesWatch", "Session", "NodesSession"}
    bad = []
    for path in sorted((PACKAGE_DIR / "fleet").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").lstrip(".").split(".")[0] == "watch":
                bad += [f"{path.name} imports {a.name}" for a in node.names if a.name in under_the_seam]
    assert bad == []
