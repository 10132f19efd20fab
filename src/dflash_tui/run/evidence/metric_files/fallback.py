"""`metric_read` answered through the single ops of a target without the agent (ShellOps).

The same answers as remote/agent_server.py `op_metric_read` gives, from `stat`, `read` and
`list_dir`: one command each, so slower, and bounded the same way (depth, entries, bytes).
SQLite files need python3 on the target: their items answer with a note saying so.
"""

from __future__ import annotations

import base64
import fnmatch
import posixpath

from ....remote.base import TRANSPORT_FAILURES, TargetError
from . import trackio

# A shell lists a directory per command: fewer entries than the agent looks at.
MAX_ENTRIES = 2000


def _stat_dict(st) -> dict:
    return {"path": st.path, "exists": st.exists, "size": st.size, "mtime": st.mtime, "inode": st.inode,
            "is_dir": st.is_dir, "kind": st.kind or ("dir" if st.is_dir else "file" if st.exists else ""),
            "error": st.error}


async def _trackio_projects(ops, dirs) -> list[dict]:
    """trackio's project databases directly in the directories of `dirs` a profile named (""
    is the agent's own trackio directory, from its environment: a shell expands no "~"); their
    items answer with a note."""
    found = []
    for d in filter(None, dirs):
        try:
            entries = await ops.list_dir(d)
        except TRANSPORT_FAILURES:
            raise
        except TargetError:
            continue
        found += [{**_stat_dict(st), "under": False, "trackio": True} for st in entries[:MAX_ENTRIES]
                  if st.is_regular and trackio.is_project_file(posixpath.basename(st.path))]
    return found


async def _find(ops, roots, patterns, max_depth=4, max_entries=MAX_ENTRIES, max_found=512, skip_top=(),
                deeper_under=(), deeper_by=3, trackio_dirs=()) -> dict:
    found, notes = await _trackio_projects(ops, trackio_dirs), []
    for root in roots:
        (st,) = await ops.stat([root])
        if st.is_regular:            # a file named itself
            found.append({**_stat_dict(st), "under": False})
            continue
        queue, seen = [(root, 0, False)], 0
        while queue and len(found) < max_found:
            path, depth, deeper = queue.pop(0)
            try:
                entries = await ops.list_dir(path)
            except TRANSPORT_FAILURES:
                raise
            except TargetError as exc:
                notes.append(exc.message)
                continue
            for st in entries:
                seen += 1
                if seen > min(max_entries, MAX_ENTRIES):
                    notes.append(f"stopped looking in {root} after {MAX_ENTRIES} entries (in {path})")
                    queue = []
                    break
                name = posixpath.basename(st.path)
                if st.is_dir:
                    if name.startswith(".") or name == "__pycache__" or depth == 0 and name in skip_top:
                        continue
                    under = deeper or name in deeper_under
                    if depth < max_depth + (deeper_by if under else 0):
                        queue.append((st.path, depth + 1, under))
                elif st.is_regular and ((deeper and "/metrics/" in st.path)
                                        or any(fnmatch.fnmatchcase(name, p) for p in patterns)):
                    found.append({**_stat_dict(st), "under": bool(deeper)})
    return {"found": found, "notes": notes}


async def _read(ops, path, offset=0, max_bytes=1 << 20, inode=0, known=None, head=0) -> dict:
    (st,) = await ops.stat([path])
    out = {"stat": _stat_dict(st), "offset": int(offset), "data": "", "restarted": False, "head": ""}
    if not st.is_regular or st.error:
        return out
    if known is not None and list(known) == [st.inode, st.size, st.mtime]:
        return out
    if inode and (st.inode != inode or st.size < offset):
        offset, out["restarted"] = 0, True
    if st.size > offset:
        chunk = await ops.read(path, offset, max_bytes)
        out["data"] = base64.b64encode(chunk.data).decode("ascii")
        out["stat"].update(size=chunk.size, inode=chunk.inode)
    out["offset"] = offset
    if head and offset > 0:
        out["head"] = base64.b64encode((await ops.read(path, 0, head)).data).decode("ascii")
    return out


async def metric_read_over(ops, items: list[dict]) -> list[dict]:
    out = []
    for item in items:
        try:
            if "find" in item:
                out.append({"ok": True, "result": await _find(ops, **item["find"])})
            elif "read" in item:
                args = dict(item)
                out.append({"ok": True, "result": await _read(ops, args.pop("read"), **args)})
            else:
                out.append({"ok": False, "error": f"{item.get('sql', 'a database')}: SQLite files are read "
                                                  f"by the agent (python3 on the target)"})
        except TRANSPORT_FAILURES:
            raise
        except TargetError as exc:
            out.append({"ok": False, "error": exc.message})
    return out
