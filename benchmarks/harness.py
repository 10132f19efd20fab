"""What the benchmarks share: a process's CPU from /proc, percentiles, the "before" side of a
side-by-side run (a module's source at a git ref loaded beside this tree's, or a child process
on another checkout), and RESULTS.md's sections (one per script, replaced when it runs again).

A script imports it after putting the repository root on sys.path:

    ROOT = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(ROOT))
    from benchmarks.harness import proc_cpu_s, pctl, replace_section
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of process `pid` (all its threads), in seconds, from /proc/PID/stat.
    The fields are read after the last ")" since the command name may hold spaces and brackets."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _children(pid: int | None) -> list[int]:
    """The live children of `pid` (this process by default): every thread's, from
    /proc/PID/task/*/children."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid or os.getpid()}/task").iterdir():
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            continue
    return kids


def _children_sum(pid: int | None, cpu):
    """`cpu(kid)` summed over the live children of `pid`; a child gone meanwhile counts 0."""
    total = 0
    for kid in _children(pid):
        try:
            total += cpu(kid)
        except OSError:
            continue
    return total


def children_cpu_s(pid: int | None = None) -> float:
    """utime + stime of the live children of `pid` (this process by default), in seconds."""
    return float(_children_sum(pid, proc_cpu_s))


def proc_cpu_ns(pid: int) -> int:
    """CPU time of process `pid`'s live threads in nanoseconds, from /proc/PID/task/*/schedstat
    (the scheduler's own count: no 10 ms tick, so a look of a few ms is measured, not sampled)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def children_cpu_ns(pid: int | None = None) -> int:
    """`children_cpu_s` in nanoseconds, from the scheduler's count (`proc_cpu_ns`)."""
    return _children_sum(pid, proc_cpu_ns)


def pctl(samples, q: float) -> float:
    """The q-th quantile (0..1) of `samples`, nearest rank; NaN for none."""
    s = sorted(samples)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def source_at(ref: str, path: str) -> str:
    """The text of `path` (relative to the repository root) at git ref `ref`: the "before" side."""
    return subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


def load_module(path: Path, name: str) -> ModuleType:
    """The module at `path` loaded under `name`, beside this tree's own copy of it."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def tree_env(tree: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (this process's by default) for a child that imports dflash_tui from the checkout
    `tree` (its src/, or `tree` itself when it is a bare copy of src's contents): one side of a
    side-by-side run of two trees."""
    src = tree / "src" if (tree / "src").is_dir() else tree
    return {**(os.environ if env is None else env), "PYTHONPATH": str(src)}


def replace_section(heading: str, section: str, path: Path = RESULTS) -> None:
    """Put `section` in RESULTS.md in place of the one that starts with `heading` (up to the next
    "## " heading), or append it; the rest of the file is kept."""
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    if heading in text:
        start = text.index(heading)
        nxt = text.find("\n## ", start + len(heading))
        text = text[:start] + section + (text[nxt + 1:] if nxt != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)
