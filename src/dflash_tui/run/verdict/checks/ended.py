"""The checks of a run that ended or is being stopped: its exit, its traceback, the stop
request, its last checkpoint, and the rank that failed first."""

from __future__ import annotations

from ....contract.rundir import ExitRecord, StopRecord
from ....words import age_at as _age, one_line as _one_line
from ...evidence.activity import Activity
from ...evidence.fault_dump import FaultDump
from ...evidence.tracebacks import exception_line
from ..checklist import Check, CheckId, CheckState
from .launch import DISK_HINT

OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING


def no_exit_check(why: str, hint: str, last_write: float | None) -> Check:
    """No exit.json: killed from outside (or the disk was too full to record the end)."""
    return Check.of(CheckId.EXIT, FAIL, _one_line(why), hint, last_write)


def exit_check(ex: ExitRecord, what: str, disk: str, hint: str = "") -> Check:
    """exit.json's code: ok for 0, failing otherwise (`what`: the code or signal, the root cause;
    `hint`: what to read, when not the traceback)."""
    if ex.exit_code == 0:
        return Check.of(CheckId.EXIT, OK, "exit code 0", "", ex.end_time)
    return Check.of(CheckId.EXIT, FAIL, what, DISK_HINT if disk else hint or "see the traceback and the log",
                    ex.end_time)


# The signals a crash in native code raises (faulthandler catches these): worth the words.
NATIVE_CRASH_SIGNALS = frozenset({"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT"})


def killed_by_signal(signal_name: str, dump: FaultDump | None) -> tuple[str, str]:
    """(what, hint) of a run its exit.json says a signal killed: a signal leaves no Python
    traceback; faulthandler's stacks, when it wrote them, say where native code died."""
    if dump is not None:
        where = f" in native code under {dump.where}" if dump.where else ""
        return (f"killed by {signal_name}{where} ({dump.error}), no traceback",
                f"the Python stacks faulthandler wrote are at line {dump.lines_from_end} from the end of "
                f"train.log (`tail -n {dump.lines_from_end} train.log`)")
    if signal_name in NATIVE_CRASH_SIGNALS:
        return (f"killed by {signal_name}, no traceback",
                "a crash in native code leaves no Python traceback: see the end of train.log; for the Python "
                "stacks set PYTHONFAULTHANDLER=1 in the profile's env (the wrapper sets it unless the env does)")
    return f"killed by {signal_name}", "a signal leaves no Python traceback: see the end of train.log"


def traceback_check(traceback: str, when: float | None, *, crashed: bool, cause: str = "") -> Check:
    """The log's last traceback: the cause of a crash (failing), a hint beside a kill (warn)."""
    if crashed:
        return Check.of(CheckId.TRACEBACK, FAIL, _one_line(cause), "read it at the end of train.log", when)
    return Check.of(CheckId.TRACEBACK, WARN, _one_line(exception_line(traceback)), "see the log", when)


def root_cause_check(words: str, when: float) -> Check:
    return Check.of(CheckId.ROOT_CAUSE, FAIL, _one_line(words, 300),
                    "its traceback is the cause; the other ranks' errors followed it", when)


def stopped_checks(how: str, ex: ExitRecord | None, stop: StopRecord, now: float) -> list[Check]:
    """How a run ended after a stop request for it, and who asked."""
    by = stop.requested_by or "?"
    return [Check.of(CheckId.EXIT, OK, f"{how}, after the stop request", "", ex.end_time if ex else None),
            Check.of(CheckId.STOP, OK, f"{stop.signal_sent or 'stop'} by {by} {_age(now, stop.requested_time)}", "",
                     stop.requested_time)]


def checkpoint_check(act: Activity | None) -> tuple[Check | None, str]:
    """The last checkpoint the log named, and "step 120 ckpt/120.pt" ("" for none)."""
    if act is None or not act.checkpoint:
        return None, ""
    step = f"step {act.checkpoint_step} " if act.checkpoint_step is not None else ""
    return Check.of(CheckId.CHECKPOINT, OK, _one_line(f"{step}{act.checkpoint}"), ""), f"{step}{act.checkpoint}"


def stop_lives_on_check(stop: StopRecord, sent: str, now: float, pid: int) -> Check:
    """The stop did not end it: past stop_grace_s and the SIGKILL wait, the process lives on."""
    by = stop.requested_by or "?"
    return Check.of(CheckId.STOP, FAIL, f"{sent} sent by {by} {_age(now, stop.requested_time)}, pid {pid} still alive",
                    "the stop did not end it: stop it again, or see why it lives on "
                    f"(`cat /proc/{pid}/stat` on the target)", stop.requested_time)


def stopping_check(stop: StopRecord, sent: str, now: float, how: str) -> Check:
    """A stop under way (STOPPING): it is saving or shutting down."""
    by = stop.requested_by or "?"
    return Check.of(CheckId.STOP, WARN, f"{sent} sent by {by} {_age(now, stop.requested_time)}",
                    f"it is saving or shutting down: {how}", stop.requested_time)
