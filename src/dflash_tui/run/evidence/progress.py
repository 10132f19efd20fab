"""Progress read from a program's own output: the steps, loss and rate any trainer prints.

A program that knows nothing of status.json still says how far it is, in one of a few forms
this parser reads from train.log's new bytes:

    step 120 loss 2.31            "step N", "Step N/M", "iter N", "global_step=N", "loss X"
     45%|████▌     | 450/1000 [00:10<00:12, 44.3it/s, loss=2.1]     tqdm (carriage returns)
    Epoch 0:  45%|████▌ | 450/1000 [00:10<00:12, 44.30it/s, v_num=0, train_loss=2.10]  Lightning
    {'loss': 2.1, 'grad_norm': 0.9, 'learning_rate': 5e-05, 'epoch': 0.3}   transformers Trainer
    {"step": 10, "loss": 2.1}                                               JSON lines

    Epoch 0/9 ━━━━━━━━━━━━ 450/1000 0:00:10 • 0:00:12 44.30it/s train_loss: 2.10   rich (Lightning)

plus a profile's own `progress_regex` (named groups `step`, `loss`, `total`), tried first.
A carriage return, and a cursor movement up a line (how rich redraws a bar of several lines),
ends a segment like a newline does, so a bar that rewrites its line for minutes is read at every
update, and its latest state is read even before its line ends; every other terminal escape
(colours, erase, cursor shown or hidden, hyperlinks) is dropped before a segment is read. A
redraw that says what the last one said (rich redraws ten times a second, also while the program
hangs) is neither progress nor output.
Also noted: a checkpoint the program says it saved ("Saving model checkpoint to PATH",
"checkpoint: step N saved to PATH"), for the words of a STOPPED run.

Pure and bounded: segments longer than MAX_SEGMENT are cut, a dict line is parsed only when
short, and nothing here does I/O (run/evidence/observe.py's ProgressTracker feeds it). Every regular
expression here runs in time linear in the text it reads, whatever the log holds: a profile's
`progress_regex` is matched by RE2 (google-re2; what RE2 cannot bound, such as backreferences
and lookarounds, is refused when the config is read), and the built-in forms below are written
so that Python's engine never backtracks (possessive quantifiers, a lookbehind that starts a
number only at the start of its digits, a bounded gap in the checkpoint form).
tests/run/evidence/test_hostile_regex.py holds both to that on adversarial lines. The values shown (the last
progress line, a checkpoint path, a disk error) are made inert (contract/rundir.py `inert_text`).
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass

from ...contract.rundir import finite_number, inert_text
from ...progress_regex import compile_progress_regex

# One segment (a line, or one carriage-return update) is read up to this many characters.
MAX_SEGMENT = 4096
# Metric dicts longer than this are not parsed (ast/json on hostile input costs time).
MAX_DICT = 2048

# A number; the lookbehind starts it only where its digits start, so a long run of digits is
# tried once, not once per digit.
_NUM = r"(?<![\d.])[-+]?+(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][-+]?+\d++)?+"
_STEP = re.compile(r"\b(?:global[_ ]step|step|iter(?:ation)?)\b\s*+[:=#]?+\s*+(\d++)(?:\s*+(?:/|of)\s*+(\d++))?+",
                   re.IGNORECASE)
_BAR = re.compile(r"(?:\|\s*+|\s)(\d++)/(\d++)\s*+\[")         # tqdm: "| 450/1000 [00:10<..."
_LOSS = re.compile(r"\b(?:train[_ ])?loss\b\s*+[:=]?+\s*+(" + _NUM + r"|nan|inf)", re.IGNORECASE)
_RATE = re.compile(r"(" + _NUM + r")\s*+(it/s|s/it|tok(?:ens)?/s|samples/s)")
# The other order, "tok/s 18,450" (the bundled trainer's log): the unit, then its number.
_RATE_AFTER = re.compile(r"\b(it/s|s/it|tok(?:ens)?/s|samples/s)\s*+[:=]?+\s*+"
                         r"((?>\d{1,3}(?:,\d{3})++(?:\.\d++)?+|" + _NUM + r"))")
# An evaluation's line ("validate step: 20  loss: 6.5", TorchTitan): its loss is not the training's.
_EVAL_STEP = re.compile(r"\b(?:validate|validation|eval|evaluation)\s++step\b", re.IGNORECASE)
_EPOCH = re.compile(r"\bepoch\b\s*+[:=]?+\s*+(" + _NUM + r")", re.IGNORECASE)
# "checkpoint: step N saved to PATH": the gap between the two words is bounded, so a line of
# many "checkpoint" words costs a bounded look at each.
_CHECKPOINT = re.compile(r"(?:saving model checkpoint to|checkpoint\b.{0,200}?\bsaved to)\s++(\S++)", re.IGNORECASE)
_BAR_RICH = re.compile(r"[━╸╺]\s++(\d++)/(\d++)\b")   # rich: "━━━╸━━ 450/1000 0:00:10"
# Segment ends: a newline starts a new line; "\r" and a cursor-up (CSI n A / CSI n F) start a
# redraw of a line already written.
_SPLIT = re.compile(r"(\n|\r|\x1b\[[0-9]*+[AF])")
# Other escape sequences: CSI (colours, erase, cursor), OSC (titles, hyperlinks), two-byte ESC.
# The character classes of each part are disjoint and possessive: no backtracking.
_ESCAPES = re.compile(r"\x1b\[[0-?]*+[ -/]*+[@-~]|\x1b\][^\x07\x1b]*+(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_DISK_FULL = re.compile(r"No space left on device|\bENOSPC\b|Disk quota exceeded|\[Errno 28\]")
# Every progress form holds one of "step", "iter", "loss", "epoch", "/" (lower-cased): a
# substring test per line (_may_progress), at C speed, keeps the regular expressions off the
# lines that cannot match.
# Literal pieces, one of which every _DISK_FULL match contains, and a capital letter each of
# them holds (a one-character test runs at memchr speed, a word's at a tenth of it).
_DISK_FULL_WORDS = ("No space left on device", "ENOSPC", "Disk quota exceeded", "[Errno 28]")
_DISK_FULL_CHARS = ("N", "E", "D")
# The non-ASCII characters that `re` matches to an ASCII letter under IGNORECASE (İ, ı: i; ſ: s;
# the Kelvin sign: k); every other match of an ASCII word is ASCII letters.
_FOLDS_TO_ASCII = "\u0130\u0131\u017f\u212a"
_WRAPPER = "dflash-tui: "   # the wrapper's own lines in train.log
# Of one poll's new progress lines, only this many of the newest are parsed in full: the older
# ones are counted (they advanced) but their values would be overwritten by the newer ones.
DETAIL_LAST = 32
# A loss of NaN or Inf, looked for in a whole chunk at once (where a divergence began).
_NON_FINITE_LOSS = re.compile(r"\bloss\b\s*+[:=]?+\s*+[-+]?+(?:nan|inf)", re.IGNORECASE)
# (step, loss) pairs held between two takes (the newest DETAIL_LAST of a look are read in full).
MAX_LOSSES = 4096

_STEP_KEYS = ("step", "global_step", "iteration", "iter")
_LOSS_KEYS = ("loss", "train_loss")
_TOTAL_KEYS = ("total_steps", "max_steps", "total")


@dataclass
class LogProgress:
    """What the log said last about the run's progress (latest values, not maxima)."""

    step: int | None = None
    total: int | None = None
    loss: float | None = None
    rate: float | None = None
    rate_unit: str = ""             # "it/s", "s/it", "tok/s", "samples/s"
    epoch: float | None = None
    # The epoch a bar's step counts within, from the bar's own line (Lightning's "Epoch 2: 80%|
    # ...| 51/64": step 51 of the epoch's 64); None when the step's line named no epoch.
    step_epoch: float | None = None
    records: int = 0                # progress segments read so far: each new one is progress
    last_line: str = ""             # the latest progress segment, trimmed
    checkpoint: str = ""            # the latest checkpoint path the program said it saved
    output: int = 0                 # segments of the program's own output (not the wrapper's)
    disk_error: str = ""            # the latest line that said the disk is full (ENOSPC)

    @property
    def seen(self) -> bool:
        return self.records > 0


def _float(text: str) -> float | None:
    """A number as written, NaN and Inf included."""
    try:
        return float(text)
    except ValueError:
        return None


def _finite(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 <= value < 1 << 63:
        return value
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


def metrics_dict(seg: str) -> dict | None:
    """A JSON object or a Python dict literal on its own line (Trainer's `{'loss': ...}`)."""
    s = seg.strip()
    if not (s.startswith("{") and s.endswith("}")) or len(s) > MAX_DICT:
        return None
    try:
        obj = json.loads(s)
    except ValueError:
        try:
            obj = ast.literal_eval(s)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return None
    return obj if isinstance(obj, dict) else None


class ProgressParser:
    """Feed it a log's bytes in order (`feed`); `progress` holds what they said."""

    def __init__(self, regex=None) -> None:
        """`regex`: a profile's progress_regex, as text or from `compile_progress_regex`."""
        self.regex = compile_progress_regex(regex) if isinstance(regex, str) else regex
        self.progress = LogProgress()
        self._partial = ""
        self._partial_redraw = False     # the partial segment began with "\r" or a cursor-up
        self._up = 0                     # lines the cursor went up: their newlines redraw too
        self._said: tuple | None = None  # (step, total, loss, epoch) of the last progress segment
        self._step_form = ""             # the form of the line that gave the step: its total's
        # (step, loss) of each progress segment read in full that named a loss, NaN and Inf
        # kept (the divergence watch's); `take_losses` hands them over.
        self._losses: list[tuple[int, float]] = []

    def take_losses(self) -> list[tuple[int, float]]:
        """The (step, loss) pairs read since the last take, in order; a line without a step is
        put at the newest step the log named, else at its own count of progress lines."""
        out, self._losses = self._losses, []
        return out

    def reset(self) -> None:
        """The file was truncated or replaced: forget the partial segment, keep the values."""
        self._partial = ""
        self._partial_redraw = False
        self._up = 0

    def feed(self, data: bytes | str) -> int:
        """Parse the new text; return how many new progress segments it held."""
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        chunk = self._partial + text
        segs, redraws = self._split(chunk)
        self._partial = segs.pop()[-MAX_SEGMENT:]
        self._partial_redraw = redraws.pop()
        p = self.progress
        if ("n" in chunk or "N" in chunk) and _NON_FINITE_LOSS.search(chunk):
            self._first_non_finite(segs, p.records)
        escapes = "\x1b" in chunk
        # Rare lines: a substring test, then one search over the whole chunk, decide whether any
        # segment needs a look.
        disk = (any(c in chunk for c in _DISK_FULL_CHARS) and any(w in chunk for w in _DISK_FULL_WORDS)
                and _DISK_FULL.search(chunk) is not None)
        checkpoint = _may_hold_word(chunk, "checkpoint") and _CHECKPOINT.search(chunk) is not None
        if escapes or disk or checkpoint or any(redraws) or max(map(len, segs), default=0) > MAX_SEGMENT:
            counted, candidates = self._candidates(segs, redraws, escapes, disk, checkpoint)
        else:
            counted, candidates = self._newest_candidates(segs)
        p.records += counted
        found = counted
        for seg, redraw in candidates:
            got = self._segment(seg, redraw=redraw)
            found += got
            if redraw and got:
                p.output += 1
        # The unterminated tail is a bar's current state (tqdm and rich write "\r" first): read
        # its values now, count it once its segment ends.
        tail = _ESCAPES.sub("", self._partial) if "\x1b" in self._partial else self._partial
        if tail.strip() and not tail.startswith(_WRAPPER):
            self._segment(tail, count=False)
        return found

    def _first_non_finite(self, segs: list[str], records: int) -> None:
        """The first loss line of the chunk whose loss is NaN or Inf, into the (step, loss)
        pairs, though it is older than the lines read in full: where a divergence began. A
        line without a step is put at its own count of progress lines."""
        count = records
        before = None                    # the progress line before it, with its count
        done = segs[:-1]
        for i, seg in enumerate(done):
            if seg.startswith(_WRAPPER) or not _may_progress(seg):
                continue
            count += 1
            if not _NON_FINITE_LOSS.search(seg[:MAX_SEGMENT]):
                before = (seg, count)
                continue
            got = self._loss_of(seg, count)
            if got is None or got[1] - got[1] == 0.0:
                continue
            if (i == 0 and i + 1 < len(done) and not _STEP.search(seg[:MAX_SEGMENT])
                    and _STEP.search(done[1][:MAX_SEGMENT])):
                continue                 # the first line cut short by the window: its step is lost
            if before is not None:       # the last finite value before it, when that line said one
                prev = self._loss_of(*before)
                if prev is not None and prev[1] - prev[1] == 0.0 and prev[0] < got[0]:
                    self._losses.append(prev)
            if len(self._losses) < MAX_LOSSES:
                self._losses.append(got)
            return

    def _loss_of(self, seg: str, count: int) -> tuple[int, float] | None:
        seg = seg[:MAX_SEGMENT]
        lm = _LOSS.search(seg)
        raw = _float(lm.group(1)) if lm else None
        if raw is None:
            return None
        sm = _STEP.search(seg)
        return int(sm.group(1)) if sm else (self.progress.step if self.progress.step is not None else count), raw

    def _split(self, chunk: str) -> tuple[list[str], list[bool]]:
        """The chunk's segments, the last one unterminated, and whether each redraws a line."""
        if "\r" not in chunk and "\x1b" not in chunk:
            # Newlines only (the common log): a segment redraws only while the cursor is still
            # up from an earlier chunk.
            segs = chunk.split("\n")
            up, n = self._up, len(segs) - 1
            self._up = max(0, up - n)
            return segs, [self._partial_redraw, *(i < up for i in range(min(up, n))), *[False] * (n - min(up, n))]
        parts = _SPLIT.split(chunk)
        # parts alternate segment, separator, segment, ...: a segment after "\r" or a cursor-up
        # redraws a line; after "\n" it is a new line, unless the cursor went up before (a bar
        # of several lines redraws them all, newlines included).
        redraws = [self._partial_redraw]
        for sep in parts[1::2]:
            if sep == "\n":
                redraws.append(self._up > 0)
                self._up = max(0, self._up - 1)
            elif sep == "\r":
                redraws.append(True)
            else:
                self._up += int(sep[2:-1] or 1)
                redraws.append(True)
        return parts[0::2], redraws

    def _candidates(self, segs: list[str], redraws: list[bool], escapes: bool, disk: bool,
                    checkpoint: bool) -> tuple[int, list[tuple[str, bool]]]:
        """Every segment looked at in order: (older progress segments counted unread, the
        newest DETAIL_LAST candidates with whether each redraws a line)."""
        p = self.progress
        candidates = []
        for seg, redraw in zip(segs, redraws):
            seg = seg[:MAX_SEGMENT]
            if escapes:
                seg = _ESCAPES.sub("", seg)
            if not seg.strip() or seg.startswith(_WRAPPER):   # the wrapper's own lines
                continue
            if not redraw:
                p.output += 1          # a redraw is output only when it says something new (feed)
            if disk and _DISK_FULL.search(seg):
                p.disk_error = inert_text(" ".join(seg.split())[:200])
            saved = checkpoint and self._checkpoint(seg)
            if saved or self.regex is not None or seg.lstrip().startswith("{") or _may_progress(seg):
                candidates.append((seg, redraw))
        older = max(0, len(candidates) - DETAIL_LAST)
        # The older ones are counted unread (the newer say the latest values); an older redraw
        # is not: whether it said anything new is unknown, and the newer ones say where it got.
        return sum(1 for _, redraw in candidates[:older] if not redraw), candidates[older:]

    def _newest_candidates(self, segs: list[str]) -> tuple[int, list[tuple[str, bool]]]:
        """`_candidates` for plain new lines (no escapes, redraws, disk or checkpoint lines, none
        longer than MAX_SEGMENT), read from the newest back: the DETAIL_LAST newest candidates
        are kept, the lines before them only counted."""
        p = self.progress
        every = self.regex is not None
        newest: list[tuple[str, bool]] = []
        i = len(segs)
        while i and len(newest) < DETAIL_LAST:
            i -= 1
            seg = segs[i]
            if not seg or seg.isspace() or seg.startswith(_WRAPPER):
                continue
            p.output += 1
            if every or seg.lstrip().startswith("{") or _may_progress(seg):
                newest.append((seg, False))
        newest.reverse()
        output = [seg for seg in segs[:i] if seg and not seg.isspace() and not seg.startswith(_WRAPPER)]
        p.output += len(output)
        if every:
            return len(output), newest
        # _may_progress and the "{" test on every line, lowered in one call (lowering never
        # makes or takes a newline, so the lines stay the same lines).
        lowered = "\n".join(output).lower().split("\n") if output else []
        return sum(1 for low in lowered if "step" in low or "loss" in low or "/" in low or "iter" in low
                   or "epoch" in low or low.lstrip().startswith("{")), newest

    def _checkpoint(self, seg: str) -> bool:
        cp = _CHECKPOINT.search(seg)
        if cp:
            self.progress.checkpoint = inert_text(cp.group(1).rstrip(".,;"))
        return cp is not None

    def _segment(self, seg: str, count: bool = True, redraw: bool = False) -> int:
        p = self.progress
        step = total = None
        loss = rate = epoch = raw = None
        form = ""                        # "regex", "dict", "bar" (tqdm, rich, Lightning), "step"
        unit = ""
        hit = False
        if self.regex is not None:
            m = self.regex.search(seg)
            if m:
                gd = m.groupdict()
                step = _int_text(gd.get("step"))
                total = _int_text(gd.get("total"))
                raw = _float(gd["loss"]) if gd.get("loss") else None
                loss = _finite(gd["loss"]) if gd.get("loss") else None
                hit = step is not None or raw is not None
                form = "regex"
        if not hit:
            d = metrics_dict(seg)
            if d is not None:
                step = next((v for v in (_int(d.get(k)) for k in _STEP_KEYS) if v is not None), None)
                total = next((v for v in (_int(d.get(k)) for k in _TOTAL_KEYS) if v is not None), None)
                loss = next((v for v in (finite_number(d.get(k)) for k in _LOSS_KEYS) if v is not None), None)
                raw = loss if loss is not None else next(
                    (v for v in (d.get(k) for k in _LOSS_KEYS) if type(v) is float), None)
                epoch = finite_number(d.get("epoch"))
                hit = step is not None or loss is not None or epoch is not None
                form = "dict"
            else:
                # Each search only where the words it needs are (a substring test costs a tenth
                # of a search, and the newest DETAIL_LAST lines of every look come here).
                low = seg.lower()
                folds = not seg.isascii() and any(c in seg for c in _FOLDS_TO_ASCII)
                m = ((_BAR.search(seg) if "[" in seg and "/" in seg else None)
                     or (_BAR_RICH.search(seg) if not seg.isascii() else None)
                     or (_STEP.search(seg) if "step" in low or "iter" in low or folds else None))
                if m:
                    step, total = _int_text(m.group(1)), _int_text(m.group(2))
                    form = "step" if m.re is _STEP else "bar"
                lm = _LOSS.search(seg) if "loss" in low or folds else None
                # Every evaluation word holds "val", and no character folds to v, a or l.
                if lm and not ("val" in low and _EVAL_STEP.search(seg)):
                    raw = _float(lm.group(1))
                    loss = raw if raw is not None and math.isfinite(raw) else None
                if "/s" in seg or "s/it" in seg:
                    after = _RATE_AFTER.search(seg)
                    if after:
                        rate, unit = _finite(after.group(2).replace(",", "")), after.group(1)
                    else:
                        rm = _RATE.search(seg)
                        if rm:
                            rate, unit = _finite(rm.group(1)), rm.group(2)
                    unit = unit.replace("tokens/s", "tok/s")
                em = _EPOCH.search(seg) if "epoch" in low else None   # e, p, o, c, h: no folds
                if em:
                    epoch = _finite(em.group(1))
                hit = step is not None or raw is not None or rate is not None
        if not hit and not (_may_hold_word(seg, "checkpoint") and _CHECKPOINT.search(seg)):
            return 0
        said = (step, total, loss, epoch)
        if redraw and count and said == self._said:
            return 0                   # the same state drawn again: a bar's clock ticking, no progress
        if count:
            self._said = said
            if raw is not None and len(self._losses) < MAX_LOSSES:
                at = step if step is not None else (p.step if p.step is not None else p.records + 1)
                self._losses.append((at, raw))
        if step is not None:
            # A total said once holds for the later steps of the same form (a trainer's JSON
            # lines, its "step N/M" then "step N"); a step of another form (an exception's
            # "at step 120" under a Lightning bar's "51/64") never pairs with it.
            if total:
                p.total = total
            elif form != self._step_form:
                p.total = None
            self._step_form = form
            p.step = step
            p.step_epoch = epoch if form == "bar" else None
        if loss is not None:
            p.loss = loss
        if rate is not None:
            p.rate, p.rate_unit = rate, unit
        if epoch is not None:
            p.epoch = epoch
        p.last_line = inert_text(" ".join(seg.split())[:200])
        if count:
            p.records += 1
            return 1
        return 0


def _may_progress(seg: str) -> bool:
    low = seg.lower()
    return "step" in low or "loss" in low or "/" in low or "iter" in low or "epoch" in low


def _may_hold_word(text: str, word: str) -> bool:
    """False only when a case-insensitive search for the lower-case ASCII `word` cannot match
    `text`: a substring test of the lowered text, unless the text holds one of the four
    characters that Python's re matches to an ASCII letter under IGNORECASE (İ ı ſ K)."""
    return word in text.lower() or (not text.isascii() and any(c in text for c in _FOLDS_TO_ASCII))


def _int_text(text: str | None) -> int | None:
    if not text or not text.isdigit() or len(text) > 18:
        return None
    return int(text)


def parse_text(text: str, regex=None) -> LogProgress:
    """All of `text` at once (a log's tail, a test's sample)."""
    parser = ProgressParser(regex)
    parser.feed(text)
    return parser.progress
