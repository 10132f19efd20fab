"""The sections of the config file (config.Section), each declared by the room that reads it and
handed to config's loader in config_file.SECTIONS: every one a room declares is registered, reads
its default back, and refuses a bad key in one line naming its table (exit 2 from the CLI)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dflash_tui
from dflash_tui import config
from dflash_tui.config import ConfigError, Section
from dflash_tui.config_file import SECTIONS, parse_config

PACKAGE_DIR = Path(dflash_tui.__file__).parent
PROFILES = '[profile.a]\nrun_dir = "/tmp/a"\n[profile.b]\nrun_dir = "/tmp/b"\n'
NAMES = [s.name for s in SECTIONS]


def declared_sections() -> list[tuple[str, str]]:
    """(module, name) of every module-level `NAME = Section(...)` (or `NAME: ... = Section(...)`)
    under src/dflash_tui, found in the source so that an unregistered one is found too."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.parse(path.read_text()).body:
            target = (node.targets[0] if isinstance(node, ast.Assign) else
                      node.target if isinstance(node, ast.AnnAssign) else None)
            call = getattr(node, "value", None)
            if (isinstance(target, ast.Name) and isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id == "Section"):
                found.append((module, target.id))
    return found


def test_every_section_a_room_declares_is_registered():
    declared = declared_sections()
    assert len(declared) >= 3, declared     # [watch], [notify], [recover] at least: the scan sees them
    missing = [f"{m}.{n}" for m, n in declared if getattr(importlib.import_module(m), n) not in SECTIONS]
    assert missing == [], f"add {missing} to config_file.SECTIONS"
    assert all(not m.startswith("dflash_tui.config") for m, _ in declared)   # config.py declares none


def test_the_section_names_are_distinct_and_none_is_profile():
    assert len(set(NAMES)) == len(NAMES) and "profile" not in NAMES
    assert NAMES == ["watch", "notify", "recover"]       # the order the unknown-table message names them


def written(settings: Any) -> str:
    """A table's body spelling `settings`' own values that TOML can write (numbers, flags, strings
    and lists of strings; None and nested tables are left to their default)."""
    lines = []
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
            value = [str(v) for v in value]
        if isinstance(value, (bool, int, float, str, list)):
            lines.append(f"{f.name} = {json.dumps(value)}")
    return "".join(line + "\n" for line in lines)


@pytest.mark.parametrize("section", SECTIONS, ids=NAMES)
def test_a_section_round_trips_its_default(section: Section[Any]):
    assert section.of(parse_config(PROFILES, "c.toml")) == section.default
    assert section.of(parse_config(PROFILES + f"[{section.name}]\n", "c.toml")) == section.default
    assert section.parse({}, ("a", "b")) == section.default
    spelled = parse_config(PROFILES + f"[{section.name}]\n" + written(section.default), "c.toml")
    assert section.of(spelled) == section.default
    # A config built without the file (the built-in profile) reads the default too.
    assert section.of(config.Config(path=None)) == section.default


@pytest.mark.parametrize("section", SECTIONS, ids=NAMES)
def test_a_bad_key_is_one_line_naming_the_section(section: Section[Any]):
    with pytest.raises(ConfigError) as err:
        parse_config(PROFILES + f"[{section.name}]\nno_such_key = 1\n", "c.toml")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"c.toml: [{section.name}]: unknown key 'no_such_key' (known: "), msg
    with pytest.raises(ConfigError) as err:
        parse_config(f"{section.name} = 3\n" + PROFILES, "c.toml")
    assert str(err.value) == f"c.toml: [{section.name}] must be a table"


@pytest.mark.parametrize("section", SECTIONS, ids=NAMES)
def test_config_alone_knows_no_section(section: Section[Any]):
    # config.py's loader without the rooms' sections refuses their tables: it names none of them.
    with pytest.raises(ConfigError) as err:
        config.parse_config(PROFILES + f"[{section.name}]\n", "c.toml")
    assert str(err.value) == (f"c.toml: unknown top-level key '{section.name}' "
                              "(profiles go under [profile.NAME])")


def test_an_unknown_table_names_every_section():
    with pytest.raises(ConfigError) as err:
        parse_config(PROFILES + "[wach]\n", "c.toml")
    assert str(err.value) == ("c.toml: unknown top-level key 'wach'; did you mean 'watch'? (profiles go under "
                              "[profile.NAME]; [watch], [notify] and [recover] are the others)")


@pytest.mark.parametrize("section", SECTIONS, ids=NAMES)
def test_the_cli_exits_2_with_one_line_naming_the_section(tmp_path, section: Section[Any]):
    cfg = tmp_path / "c.toml"
    cfg.write_text(PROFILES + f"[{section.name}]\nno_such_key = 1\n")
    res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--profile", "a", "--check"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and f"[{section.name}]: unknown key 'no_such_key'" in res.stderr, res.stderr
