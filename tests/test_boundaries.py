"""Package boundaries that the design promises (DESIGN.md, Packages)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_dashboard_never_imports_torch():
    # A fresh interpreter: importing every dashboard module must not load torch, not even
    # indirectly (through dflash_tui.contract.rundir, say).
    modules = _all_dflash_tui_modules()
    assert len(modules) > 5, modules
    loaded = _loaded_after_importing(modules, ("torch",))
    assert not [m for m in loaded if m == "torch" or m.startswith("torch.")], loaded[:5]


def test_headless_core_knows_nothing_of_the_ui():
    # --check must work without Textual: remote/, run/, gpu/, config and the schema may not
    # import dflash_tui.ui or textual.
    core = [n for n in _all_dflash_tui_modules()
            if not n.startswith("dflash_tui.ui") and n not in ("dflash_tui.cli", "dflash_tui.__main__")]
    assert not _loaded_after_importing(core, ("textual", "dflash_tui.ui"))
