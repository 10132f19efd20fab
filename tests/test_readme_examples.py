"""The README's examples are what the program takes: its `command = [...]` profile parses, and
its run-view keys table names every tab's number key."""

from __future__ import annotations

import re
from pathlib import Path

from dflash_tui.config_file import parse_config
from dflash_tui.ui.panes import TAB_PANES

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_the_readme_shows_a_command_profile_that_parses():
    blocks = re.findall(r"```toml\n(.*?)```", README, re.S)
    mine = [b for b in blocks if "\ncommand = [" in b]
    assert mine, "no `command = [...]` example in the README"
    for block in mine:
        cfg = parse_config(block, "README.md")
        for name in cfg.profiles:
            p = cfg.profile(name)
            if p.command is not None:
                assert p.command[0] and p.env, p


def test_the_keys_table_names_every_tab():
    row = next(line for line in README.splitlines() if line.startswith("| `1`–"))
    assert row.startswith(f"| `1`–`{len(TAB_PANES)}` |"), row
    for pane in TAB_PANES:
        assert pane.TITLE in row, (pane.TITLE, row)
