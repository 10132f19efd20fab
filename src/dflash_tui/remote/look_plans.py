"""LookPlans: the client's half of the agent's look plans (agent_server `observe_planned`).

A poll looks at the same run dir every second with nearly the same question (the same paths,
reads and listings; `known` and the log's offsets move now and then) and gets nearly the same
answer (most stats, listing entries and process-tree fields as the second before). So a look
goes to the agent as a plan: the first look of a run dir on a channel sends its arguments whole
and later ones only those that changed; the agent answers a stat, a listing entry or a tree
field only when it changed since its last answer to that plan, and this side fills in the rest
from the answer it kept.

What each side holds must be the same, so each plan's looks are numbered: the agent applies
only the next one (else it asks for the plan whole: `resend`), and an answer is decoded only
on top of the answer before it. One LookPlans belongs to one agent process: a new agent (a
reconnect, a restarted agent) gets a new LookPlans, so nothing kept for the old one is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .answers import filestat_from, proctree_from
from .base import OpRefused
from .ops import FileStat, ProcTree


@dataclass
class _Plan:
    sent: dict[str, Any]                   # the arguments the agent holds for this plan
    seq: int = 1                           # the number of the last look sent
    answered: int = 0                      # the number of the last answer decoded
    stats: list[FileStat] = field(default_factory=list)
    listings: dict[str, list[FileStat]] = field(default_factory=dict)
    tree: dict[str, Any] | None = None     # the last process tree, raw (ok answers only)
    tree_decoded: ProcTree | None = None   # and as a ProcTree


class OutOfStep(OpRefused):
    """An answer this side cannot decode on what it holds: the plan is sent whole next time."""


_MISSING = object()


class LookPlans:
    def __init__(self) -> None:
        self._ids: dict[tuple[str, ...], int] = {}
        self._plans: dict[int, _Plan] = {}

    def entry(self, look: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
        """(plan, seq, the request's entry) for one look (agent_server `observe_one`'s keyword
        arguments): the whole look for a plan new on this channel, else the arguments that
        changed."""
        key = tuple(look["paths"])
        plan_id = self._ids.get(key)
        if plan_id is None:
            plan_id = self._ids[key] = len(self._ids) + 1
        plan = self._plans.get(plan_id)
        if plan is None:
            self._plans[plan_id] = _Plan(sent=dict(look))
            return plan_id, 1, {"plan": plan_id, "seq": 1, "reset": True, "args": look}
        changed = {k: v for k, v in look.items() if plan.sent.get(k, _MISSING) != v}
        plan.sent.update(changed)
        plan.seq += 1
        entry: dict[str, Any] = {"plan": plan_id, "seq": plan.seq}
        if changed:
            entry["args"] = changed
        return plan_id, plan.seq, entry

    def forget(self, plan_id: int) -> None:
        """The agent asked for the plan whole, or its answer did not decode: send it whole."""
        self._plans.pop(plan_id, None)

    def failed(self, plan_id: int, seq: int) -> None:
        """Look `seq` was answered with an error: the agent kept its last answer, so does this side."""
        plan = self._plans.get(plan_id)
        if plan is not None and plan.answered == seq - 1:
            plan.answered = seq

    def decode(self, plan_id: int, seq: int, result: dict[str, Any]) -> dict[str, Any]:
        """The answer to look `seq`, whole: stats and listings as FileStats, the tree as a ProcTree."""
        plan = self._plans.get(plan_id)
        if plan is None or result.get("seq") != seq or (seq != 1 and plan.answered != seq - 1):
            self.forget(plan_id)
            raise OutOfStep(f"look plan {plan_id}: answer {result.get('seq')!r} does not follow answer "
                            f"{plan.answered if plan else None}")
        try:
            stats = _filled(plan.stats if seq != 1 else [], result["stats"])
            listings = {}
            for path, item in (result.get("listings") or {}).items():
                if item.get("ok"):
                    item = {"ok": True, "result": _filled(plan.listings.get(path, []) if seq != 1 else [],
                                                          item["result"])}
                listings[path] = item
            tree = result.get("proc_tree")
            raw_tree, decoded = None, None
            if tree is not None and "delta" in tree:
                if seq == 1 or plan.tree is None or plan.tree_decoded is None:
                    raise KeyError("tree")
                delta = tree["delta"]
                raw_tree = {**plan.tree, **delta}
                # A tree whose root and program stand still (most looks: only its CPU moved)
                # keeps their records; one that did not move at all is the last one.
                last = plan.tree_decoded
                decoded = last if not delta else proctree_from(
                    raw_tree, root=None if "root" in delta else last.root,
                    main_argv=None if "main_argv" in delta else last.main_argv)
            elif tree is not None and tree.get("ok"):
                raw_tree = tree["result"]
                decoded = proctree_from(raw_tree)
        except (KeyError, IndexError, TypeError, AttributeError):
            self.forget(plan_id)
            raise OutOfStep(f"look plan {plan_id}: answer {seq} names parts this side does not hold") from None
        plan.answered = seq
        plan.stats = stats
        plan.listings = {p: item["result"] for p, item in listings.items() if item.get("ok")}
        plan.tree, plan.tree_decoded = raw_tree, decoded
        if decoded is not None:
            tree = {"ok": True, "result": decoded}
        return {**result, "stats": stats, "listings": listings, "proc_tree": tree}


def _filled(last: list[FileStat], sent: list) -> list[FileStat]:
    """`sent` with each null the FileStat at its position in `last`."""
    return [last[i] if d is None else filestat_from(d) for i, d in enumerate(sent)]
