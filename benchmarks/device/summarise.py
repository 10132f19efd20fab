"""Merge evidence.py's JSON and `--check --json`'s into one file; print what the evidence says.
`summarise.py EVIDENCE CHECK OUT SECONDS_SINCE_LAUNCH`"""

import json
import sys


def load(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        return {"unreadable": str(exc)}


ev, check = load(sys.argv[1]), load(sys.argv[2])
merged = {"since_launch_s": int(sys.argv[4]), "evidence": ev, "check_json": check}
with open(sys.argv[3], "w") as fh:
    json.dump(merged, fh, indent=1)
cl = ev.get("checklist", {})
print("verdict:", check.get("verdict"), "|", check.get("summary"), "| evidence.py:", cl.get("verdict"))
hang = ev.get("hang", {})
for pid, dump in (hang.get("stack_dumps") or {}).items():
    print("dump pid", pid, dump.get("source"), [(t["name"], t["frames"][:2]) for t in dump.get("threads", [])])
for c in hang.get("collectives") or []:
    print("collective", {k: c[k] for k in ("rank", "last_enqueued_seq", "last_started_seq", "last_completed_seq",
                                            "pending_op", "pending_seq", "pending_since")})
print("root cause", hang.get("root_cause"), "problems", hang.get("problems"))
for g in (ev.get("gpu") or {}).get("gpus", []):
    print("gpu", g["index"], "util", g["util_sm_pct"],
          [(p["pid"], p["is_run_process"], p["sm_util_pct"], p["mem_util_pct"]) for p in g["processes"]])
for p in ev.get("probes", []):
    print("probe", p["pid"], "age", p["age_s"], "sig", p["stack_signal"],
          [(t["name"], t["frames"][:1]) for t in p["threads"]][:10])
