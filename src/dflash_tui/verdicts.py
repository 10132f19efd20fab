"""The verdicts, and what each one is: one type on every floor.

The engine decides a run's verdict (run/verdict/health.py `evaluate`; a scheduler's backend for
its job's states). Everything that acts on a verdict (the exit codes, config's `[recover] on`,
the recovery, notifications, goodput, the fleet's cadence, the panes' colours) asks it what it
is through its properties (`failing`, `ended`, `restartable`, ...), never by a list of words
of its own: a new verdict says its classes on its one line below, and each reader follows.

A state the watcher records or the fleet shows is a verdict, or a `TargetState` when there is
no verdict to show (the target did not answer, the profile cannot make one). What was written
down as words (the watcher's store, the recovery log) is read back to these types once, where it
is read (`state_named`); past that, nothing compares words.

Stdlib only, on the ground floor (tests/test_boundaries.py LAYERS), so that every floor, those
below run/ included, reads the same type.
"""

from __future__ import annotations

from enum import Flag, StrEnum, auto


class _Is(Flag):
    """A verdict's classes, as its row below declares them."""

    HEALTHY = auto()          # the run is well: it progresses, or it ended as it should
    FAILING = auto()          # someone must act: the run failed, or cannot go on as it is
    ENDED = auto()            # over: its program ended, or never ran; nothing more comes of this run
    FINAL = auto()            # stands until a new launch, though its process may live on
    ALIVE = auto()            # its program runs by itself (no stop under way)
    STUCK = auto()            # alive but making no progress: the time it lasts is lost
    IN_QUEUE = auto()         # waiting in a scheduler's queue, nothing started yet
    PROGRAM_FAILED = auto()   # the program's own failing end, which a scheduler's end may be behind
    NAMES_A_NODE = auto()     # the scheduler named a node at fault: a relaunch avoids it
    RESTARTED_BY_DEFAULT = auto()   # in `[recover] on` when the config does not name its own


_NONE = _Is(0)
HEALTHY, FAILING, ENDED, FINAL, ALIVE, STUCK, IN_QUEUE = (_Is.HEALTHY, _Is.FAILING, _Is.ENDED, _Is.FINAL, _Is.ALIVE,
                                                          _Is.STUCK, _Is.IN_QUEUE)
PROGRAM_FAILED, NAMES_A_NODE, BY_DEFAULT = _Is.PROGRAM_FAILED, _Is.NAMES_A_NODE, _Is.RESTARTED_BY_DEFAULT


class Verdict(StrEnum):
    """A run's verdict: its word (what `--check --json`, the store and every view say) and its
    classes. The verdict table (docs/ARCHITECTURE.md; run/verdict/health.py `evaluate`)."""

    def __new__(cls, word: str, classes: _Is = _NONE) -> "Verdict":
        member = str.__new__(cls, word)
        member._value_ = word
        member._classes = classes
        return member

    NEVER_STARTED = "NEVER STARTED", FAILING | ENDED         # no launch.json by the deadline: the launch never ran
    # launch.json but no train.log: the wrapper opens it before it starts the program, so it never
    # comes; the program may still run without it (not ENDED)
    LOG_MISSING = "LOG MISSING", FAILING | FINAL
    FINISHED = "FINISHED", HEALTHY | ENDED                   # pid gone, exit.json code 0
    CRASHED = "CRASHED", FAILING | ENDED | PROGRAM_FAILED | BY_DEFAULT   # pid gone, exit.json non-zero / signal
    KILLED = "KILLED", FAILING | ENDED | PROGRAM_FAILED | BY_DEFAULT     # pid gone, no exit.json
    STALLED = "STALLED", FAILING | ALIVE | STUCK | BY_DEFAULT   # pid alive, nothing advanced for the stall limit
    RUNNING = "RUNNING", HEALTHY | ALIVE                     # pid alive, progress advancing (steps, output, events)
    # Not failures, not yet healthy:
    STARTING = "STARTING", ALIVE                             # pid alive, log present, no progress yet / compiling
    NO_RUN = "NO RUN"                                        # nothing was ever launched in this run dir
    NOT_LAUNCHED = "NOT LAUNCHED", FAILING | ENDED           # a --launch that preflight refused; nothing started
    # From run/verdict/health.py `with_gpu_check`: the run's process is alive (it was STARTING or
    # RUNNING) but a GPU of its host fell off the bus; the run cannot go on.
    GPU_LOST = "GPU LOST", FAILING | ALIVE | STUCK
    # The run ended after a stop request for it (stop.json), whatever its exit code or signal.
    STOPPED = "STOPPED", HEALTHY | ENDED
    # A stop request for it (stop.json), its process still alive within the grace period and the
    # stopper's wait: no verdict yet (STOPPED, or a failing stop, follows).
    STOPPING = "STOPPING"
    # A Slurm job's own states (backends/slurm/verdict.py), beside the evidence-based ones:
    QUEUED = "QUEUED", IN_QUEUE                              # pending, with Slurm's reason in words (no verdict yet)
    BLOCKED = "BLOCKED", FAILING | IN_QUEUE                  # pending and never starting by itself
    PREEMPTED = "PREEMPTED", FAILING | ENDED | BY_DEFAULT    # ended by preemption
    TIMEOUT = "TIMEOUT", FAILING | ENDED | BY_DEFAULT        # hit its time limit
    OUT_OF_MEMORY = "OUT OF MEMORY", FAILING | ENDED         # killed for exceeding its memory limit
    NODE_FAIL = "NODE FAIL", FAILING | ENDED | NAMES_A_NODE | BY_DEFAULT   # a node of the job failed
    CANCELLED = "CANCELLED", FAILING | ENDED                 # cancelled from outside (no stop request in the run dir)
    # From run/verdict/health.py `evaluate`: pid alive and moving (it was STARTING or RUNNING),
    # but its watched training loss went NaN/Inf or left its own band for good
    # (run/evidence/divergence.py): the steps it takes are wasted. Not restarted by default.
    DIVERGED = "DIVERGED", FAILING | ALIVE

    _classes: _Is

    @property
    def healthy(self) -> bool:
        """Exit 0; a green badge."""
        return HEALTHY in self._classes

    @property
    def failing(self) -> bool:
        """Exit 1; a red badge; notified as `failing`."""
        return FAILING in self._classes

    @property
    def ended(self) -> bool:
        """The run is over and its process gone (or it never ran): seen at the watcher's first
        look, it happened before anyone watched."""
        return ENDED in self._classes

    @property
    def final(self) -> bool:
        """The verdict stands until a new launch: every ended one, and LOG MISSING, whose
        process may live on but whose log never comes (goodput's wall ends at it)."""
        return bool(self._classes & (ENDED | FINAL))

    @property
    def settled(self) -> bool:
        """Nothing changes on the target without a new launch, once no process of the run lives:
        a final verdict, or nothing launched at all (the fleet polls such a target slowly)."""
        return self.final or self is Verdict.NO_RUN

    @property
    def ended_well(self) -> bool:
        """Over as it should be (FINISHED, STOPPED): healthy and ended; each one its own
        `[notify] on` event."""
        return self.healthy and self.ended

    @property
    def alive(self) -> bool:
        """Its program runs by itself: a restart must stop it first (STOPPING's is on its way out)."""
        return ALIVE in self._classes

    @property
    def stuck(self) -> bool:
        """Alive, with no progress to wait for (STALLED, GPU LOST): goodput counts it stalled."""
        return STUCK in self._classes

    @property
    def queued(self) -> bool:
        """Waiting in a scheduler's queue (goodput counts it queued)."""
        return IN_QUEUE in self._classes

    @property
    def program_failed(self) -> bool:
        """The program's own failing end (CRASHED, KILLED): a scheduler's end of the job (a node
        failure, a preemption) may be behind it and is waited for before the recovery acts."""
        return PROGRAM_FAILED in self._classes

    @property
    def names_a_node(self) -> bool:
        """The scheduler named a node at fault (NODE FAIL): the relaunch asks it to avoid it."""
        return NAMES_A_NODE in self._classes

    @property
    def restartable(self) -> bool:
        """What `[recover] on` may name: every failing verdict (a stop by a person never is)."""
        return self.failing

    @property
    def restarted_by_default(self) -> bool:
        """In `[recover] on` when the config names none."""
        return BY_DEFAULT in self._classes


class TargetState(StrEnum):
    """A state with no verdict to show: what the fleet's row and the watcher's store say when the
    engine had nothing to judge. Never a verdict `evaluate` returns."""

    UNREACHABLE = "UNREACHABLE"     # the target did not answer (the store records it; notified)
    CONNECTING = "CONNECTING"       # the fleet's first poll is in flight
    CONFIG_ERROR = "CONFIG ERROR"   # the profile's fields cannot make a target


State = Verdict | TargetState       # a run's state as the fleet shows it and the watcher records it

_BY_WORD: dict[str, State] = {s.value: s for s in (*Verdict, *TargetState)}


def state_named(word: object) -> State | None:
    """The state a written-down word names (the store's column, the recovery log's JSON); None
    for anything this program never writes there."""
    return _BY_WORD.get(word) if isinstance(word, str) else None


def verdict_named(word: object) -> Verdict | None:
    """The verdict a written-down word names; None for a target state or any other word."""
    state = state_named(word)
    return state if isinstance(state, Verdict) else None
