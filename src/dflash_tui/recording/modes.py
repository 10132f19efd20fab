"""The CLI's recording modes: `--watch` (and `--install-service`) and `--timeline` (`--trace`).

cli.py parses the flags (flags.py) and calls `run_mode`; every problem is a ConfigError (one line, exit 2).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..config import Config, ConfigError
from .store.change import inert
from .daemon import run_watcher
from .goodput.goodput import goodput
from .recovery.recovery_log import stop_times
from .recovery.recovery_state import read_actions
from .notify.sender import check_urls
from .notify.settings import NOTIFY_SECTION
from .store.settings import WATCH_SECTION
from .goodput.spend import spend_json, spend_words
from .service import install, watch_command
from .store.store import ChangeStore, store_path
from .recovery.bundles import kept_bundles
from .goodput.timeline import bands, render_text, timeline_json
from .goodput.trace_export import trace

EXIT_OK, EXIT_NOT_STARTED = 0, 1


def run_mode(args, config: Config) -> int:
    if args.install_service and not args.watch:
        raise ConfigError("--install-service goes with --watch")
    if args.trace and not args.timeline:
        raise ConfigError("--trace goes with --timeline")
    if args.store and not (args.watch or args.timeline):
        raise ConfigError("--store goes with --watch or --timeline")
    if args.watch:
        if args.json or args.wait or args.all:
            raise ConfigError("--json, --wait and --all do not go with --watch")
        profiles = [config.profile(args.profile)] if args.profile else config.file_profiles()
        problem = check_urls(tuple(u for p in profiles for u in NOTIFY_SECTION.of(config).for_profile(p.name)))
        if problem:
            raise ConfigError(f"{config.path}: {problem}")
        if args.install_service:
            try:
                done = install(watch_command(config=config.path, profile=args.profile, store=args.store))
            except OSError as exc:
                raise ConfigError(f"cannot write the systemd unit ({exc.strerror}: {exc.filename}); "
                                  "check that ~/.config/systemd/user is writable") from None
            # One line, whatever the paths in it hold.
            print(f"dflash-tui: {inert(done.message, 4000)}", file=sys.stdout if done.started else sys.stderr)
            return EXIT_OK if done.started else EXIT_NOT_STARTED
        s = WATCH_SECTION.of(config)
        with ChangeStore(store_path(s, args.store), retention_days=s.retention_days,
                         max_rows_per_run=s.max_rows_per_run) as store:
            return run_watcher(config, profiles, store)
    return _timeline(args, config)


def _timeline(args, config: Config) -> int:
    """--profile's timeline; without it, every profile of the config file's (the only one's
    alone: one JSON object; several: a JSON list of them, a trace with a process each)."""
    profiles = [config.profile(args.profile)] if args.profile else config.file_profiles()
    path = store_path(WATCH_SECTION.of(config), args.store)
    read: list[tuple[str, list, int]] = []          # (profile, its changes, damaged rows skipped)
    if path.exists():
        with ChangeStore(path, readonly=True) as store:
            for p in profiles:
                before = store.skipped
                read.append((p.name, store.changes(p.name), store.skipped - before))
    elif args.store:
        raise ConfigError(f"{path}: no such store; check the --store path")
    else:
        read = [(p.name, [], 0) for p in profiles]
    now = time.time()
    stall = {p.name: p.stall_after_s for p in profiles}
    timelines = [(name, bands(changes, now), skipped) for name, changes, skipped in read]
    goods = {name: goodput(changes, now, stall[name], stop_times(read_actions(path, name)))
             for name, changes, _ in read}
    spent = {name: (spend_json(changes, goods[name]), spend_words(changes, goods[name]))
             for name, changes, _ in read}
    if args.trace:
        doc = trace([(n, b) for n, b, _ in timelines])
        doc["otherData"]["goodput"] = (goods[timelines[0][0]].to_json() if len(timelines) == 1
                                       else {n: g.to_json() for n, g in goods.items()})
        try:
            Path(args.trace).write_text(json.dumps(doc, allow_nan=False))
        except OSError as exc:
            raise ConfigError(f"--trace {args.trace}: cannot write it ({exc.strerror})") from None
        names = ", ".join(n for n, _, _ in timelines)
        print(f"dflash-tui: wrote {sum(len(b) for _, b, _ in timelines)} bands of {names} to {args.trace} "
              "(open it in https://ui.perfetto.dev)")
        return EXIT_OK
    kept = {n: kept_bundles(config, n) for n, _, _ in timelines}
    if args.json:
        docs = [{**timeline_json(n, b, str(path), skipped), "goodput": goods[n].to_json(), **spent[n][0],
                 "bundles": [{"path": k.path, "time": k.time, "bytes": k.size} for k in kept[n]]}
                for n, b, skipped in timelines]
        print(json.dumps(docs[0] if len(docs) == 1 else docs, allow_nan=False))
    else:
        texts = [render_text(n, b, str(path), skipped) + (f"\n{goods[n].words()}" if b else "")
                 + (f"\n{spent[n][1]}" if spent[n][1] else "")
                 + "".join(f"\nevidence bundle {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(k.time))}  "
                           f"{k.size / 1024:.0f} KiB  {k.path}" for k in kept[n])
                 for n, b, skipped in timelines]
        print("\n\n".join(texts))
    return EXIT_OK
