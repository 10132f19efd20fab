"""The checks' vocabulary: every CheckId has its label, and what leaves the engine (the JSON
of `--check --json`, the store) is the plain id string it always was."""

import json

from dflash_tui.run.verdict.checklist import Check, CheckId, CheckState


def test_every_check_id_has_one_label_and_a_plain_string_in_json():
    for cid in CheckId:
        assert cid.label and cid.label.strip() == cid.label
        d = Check.of(cid, CheckState.OK, "cause").to_dict()
        assert type(d["id"]) is str and d["id"] == cid.value
        assert json.loads(json.dumps(d))["id"] == cid.value
        assert f"{cid}" == cid.value and {cid: 1}.get(cid.value) == 1   # a dict keyed by either finds it


def test_the_ids_are_the_contracts_strings():
    # `--check --json` checks[].id: renaming one breaks scripts that read it (docs/ARCHITECTURE.md).
    assert {c.value for c in CheckId} >= {
        "launch_cmd", "launch_json", "train_log", "process", "exit", "traceback", "root_cause", "stop",
        "checkpoint", "status", "heartbeat", "threads", "steps", "errors", "progress", "stall_limit",
        "probe", "probe_files", "stacks", "stragglers", "cpu", "disk", "memory", "gpus", "transport", "slurm_job"}
