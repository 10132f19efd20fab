"""Per-poll cost of a run's health check over SSH into a container, three ways, one run.

    .venv/bin/python benchmarks/poll_cost.py [--polls-a 20] [--polls-b 20] [--polls-c 500]
                                             [--polls-d 10] [--append]

Starts its own loopback OpenSSH sshd and a pct stand-in container (a real PID namespace; needs
unshare and nsenter, and root or unprivileged user namespaces), launches a detached `sleep` with a log file in a run directory as
the "run", then measures one health check of that run:

  (a) the incident's way: a new `ssh host 'pct exec 200 -- bash -c "ls -la LOG; ps aux | grep"'`
      process per check (TCP + key exchange + auth + login shell + pct, every time);
  (b) a new channel per check on one reused asyncssh connection, same command;
  (c) this project's way: the persistent agent inside the container, started once over one
      channel: stat of the run files + pid_info of the run's pid, per check;
  (d) the same check through ShellOps, the fallback where the target has no python3.

Prints median and p95 per way and the ratios; --append writes the section into
benchmarks/RESULTS.md (replacing an earlier one of this script).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks.harness import pctl, replace_section  # noqa: E402

from dflash_tui.remote.agent import AgentOps  # noqa: E402
from dflash_tui.remote.container import ContainerTarget  # noqa: E402
from dflash_tui.remote.shell_ops import ShellOps  # noqa: E402
from dflash_tui.remote.ssh import SSHTarget  # noqa: E402
from dflash_tui.remote.ssh_dest import SSHDest  # noqa: E402
from tests.support.containers import Standins  # noqa: E402
from tests.support.sshd import SshdUnavailable, start_sshd  # noqa: E402

HEADING = "## remote: per-poll cost of a run check (benchmarks/poll_cost.py)"
CT = "200"


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children (the ssh clients of way (a))."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def summary(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), pctl(samples, 0.95)


def incident_check_script(log: str) -> str:
    # The incident's check, verbatim in shape: ls the log, grep ps for the trainer.
    return f"ls -la {log} 2>&1; ps aux | grep sleep | grep -v grep | head -2"


async def measure(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="dflash-pollcost-"))
    try:
        sshd = start_sshd(work / "sshd")
    except SshdUnavailable as exc:
        sys.exit(f"poll_cost: {exc}")
    standins = Standins(sshd.standin_dir)
    try:
        try:
            standins.container(f"pct:{CT}")
        except subprocess.CalledProcessError as exc:
            sys.exit(f"poll_cost: could not start the pct stand-in (needs root or unprivileged "
                     f"user namespaces, and util-linux): {exc.stderr.strip()}")
        run_dir = work / "run"
        run_dir.mkdir()
        log = run_dir / "train.log"
        # The "run": detached inside the container, output to the log, as the launcher does it.
        subprocess.run([str(sshd.bin_dir / "pct"), "exec", CT, "--", "sh", "-c",
                        f"setsid sleep 600 </dev/null >>'{log}' 2>&1 & echo $! > '{run_dir}/pid'"],
                       env=standins.env, check=True, timeout=30)
        run_pid = int((run_dir / "pid").read_text())
        files = [str(run_dir / n) for n in ("launch.json", "train.log", "status.json",
                                            "exit.json")]
        script = incident_check_script(str(log))
        results: dict = {}

        # (a) a new ssh process per check
        remote_cmd = f"pct exec {CT} -- bash -c '{script}'"
        results["load_before"] = os.getloadavg()[0]
        samples = []
        for i in range(args.polls_a + 2):
            if i == 2:
                cpu0 = cpu_seconds()
            t0 = time.perf_counter()
            res = subprocess.run(sshd.ssh_argv(remote_cmd), capture_output=True, text=True,
                                 timeout=60)
            dt = time.perf_counter() - t0
            if res.returncode != 0 or "train.log" not in res.stdout:
                sys.exit(f"poll_cost: incident check failed: {res.stderr or res.stdout}")
            if i >= 2:
                samples.append(dt)
        results["a"] = samples
        results["a_cpu"] = (cpu_seconds() - cpu0) / len(samples)

        host = SSHTarget(SSHDest(**sshd.profile()))
        ct = ContainerTarget(host, f"pct:{CT}")
        try:
            # (b) a new channel per check on one connection
            samples = []
            await host.connect()
            for i in range(args.polls_b + 2):
                if i == 2:
                    cpu0 = cpu_seconds()
                t0 = time.perf_counter()
                res = await ct.run(["bash", "-c", script])
                dt = time.perf_counter() - t0
                if not res.ok or "train.log" not in res.stdout:
                    sys.exit(f"poll_cost: channel check failed: {res.stderr}")
                if i >= 2:
                    samples.append(dt)
            results["b"] = samples
            results["b_cpu"] = (cpu_seconds() - cpu0) / len(samples)

            # (c) the agent in the container: stat of the run files + the run's pid
            t0 = time.perf_counter()
            ops = await AgentOps.start(ct)
            results["agent_start"] = time.perf_counter() - t0
            (own,) = await ops.pid_info([run_pid])   # container view of the pid
            samples = []
            for i in range(args.polls_c + 20):
                if i == 20:
                    cpu0 = cpu_seconds()
                t0 = time.perf_counter()
                stats, pids = await asyncio.gather(ops.stat(files), ops.pid_info([run_pid]))
                dt = time.perf_counter() - t0
                if not stats[1].exists or not pids[0].alive:
                    sys.exit(f"poll_cost: agent check saw no run: {stats} {pids}")
                if i >= 20:
                    samples.append(dt)
            results["c"] = samples
            results["c_cpu"] = (cpu_seconds() - cpu0) / len(samples)
            results["agent_python"] = ops.info.get("python")
            results["run_seen"] = own.alive
            await ops.close()

            # (d) the fallback for targets without python3: the same check as one-shot sh
            shell = await ShellOps.start(ct)
            samples = []
            for i in range(args.polls_d + 1):
                if i == 1:
                    cpu0 = cpu_seconds()
                t0 = time.perf_counter()
                stats, pids = await asyncio.gather(shell.stat(files), shell.pid_info([run_pid]))
                dt = time.perf_counter() - t0
                if not stats[1].exists or not pids[0].alive:
                    sys.exit(f"poll_cost: shell check saw no run: {stats} {pids}")
                if i >= 1:
                    samples.append(dt)
            results["d"] = samples
            results["d_cpu"] = (cpu_seconds() - cpu0) / len(samples)
            results["load_after"] = os.getloadavg()[0]
        finally:
            await host.close()
        return results
    finally:
        standins.stop_all()
        sshd.stop()


def report(results: dict, command: str) -> str:
    a_med, a_p95 = summary(results["a"])
    b_med, b_p95 = summary(results["b"])
    c_med, c_p95 = summary(results["c"])
    d_med, d_p95 = summary(results["d"])
    ms = lambda s: f"{s * 1e3:.2f} ms"   # noqa: E731
    lines = [
        HEADING,
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores (shared), "
        f"{platform.python_implementation()} {platform.python_version()}, loopback sshd "
        f"(OpenSSH), pct stand-in (tests/support/standin.py: a PID+mount namespace entered "
        f"with nsenter). One check = what the incident ran (`ls -la LOG; ps aux | grep`) for "
        f"(a) and (b); stat of 4 run files + pid_info of the run's pid for (c). Load average "
        f"{results['load_before']:.1f} before, {results['load_after']:.1f} after (other jobs "
        "share the cores, so wall times are inflated; the ratios come from the same run).",
        "",
        "| way | polls | median | p95 | median vs (c) | client CPU / poll |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| (a) new `ssh host 'pct exec {CT} -- bash -c ...'` per check (the incident) | "
        f"{len(results['a'])} | {ms(a_med)} | {ms(a_p95)} | {a_med / c_med:,.0f}x | "
        f"{ms(results['a_cpu'])} |",
        f"| (b) new channel per check, one asyncssh connection | {len(results['b'])} | "
        f"{ms(b_med)} | {ms(b_p95)} | {b_med / c_med:,.0f}x | {ms(results['b_cpu'])} |",
        f"| (c) persistent agent in the container (this project) | {len(results['c'])} | "
        f"{ms(c_med)} | {ms(c_p95)} | 1x | {ms(results['c_cpu'])} |",
        f"| (d) ShellOps, the fallback without python3: same check as 2 one-shot sh commands | "
        f"{len(results['d'])} | {ms(d_med)} | {ms(d_p95)} | {d_med / c_med:,.0f}x | "
        f"{ms(results['d_cpu'])} |",
        "",
        f"(c) is {a_med / c_med:,.0f}x cheaper per poll than (a) (target >= 100x: "
        f"{'met' if a_med / c_med >= 100 else 'NOT met'}) and "
        f"{b_med / c_med:,.0f}x cheaper than (b). Starting the agent once (bootstrap over "
        f"`pct exec`, python {results['agent_python']}) took {ms(results['agent_start'])}, "
        f"the price of {results['agent_start'] / a_med:.1f} incident-style checks, paid once. "
        "Client CPU is this process plus its ssh children. Note: on this machine the login "
        "shell sources a ~/.bashrc with `pyenv init` for every new SSH session (and bash "
        "inside the container does again, seeing SSH_CLIENT), which (a) and (b) pay on each "
        "check and (c) pays once; the real `pct` (Perl) also starts slower than the stand-in.",
        "",
    ]
    return "\n".join(lines)


def append(section: str) -> None:
    replace_section(HEADING, section)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--polls-a", type=int, default=20, help="checks the incident's way")
    ap.add_argument("--polls-b", type=int, default=20, help="checks with a channel each")
    ap.add_argument("--polls-c", type=int, default=500, help="checks through the agent")
    ap.add_argument("--polls-d", type=int, default=10, help="checks through ShellOps")
    ap.add_argument("--append", action="store_true", help="write into benchmarks/RESULTS.md")
    args = ap.parse_args()
    results = asyncio.run(measure(args))
    command = ".venv/bin/python benchmarks/poll_cost.py " + " ".join(sys.argv[1:])
    section = report(results, command.strip())
    print(section)
    if args.append:
        append(section)


if __name__ == "__main__":
    main()
