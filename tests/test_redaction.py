"""redaction.py: the rules for what leaves this machine, on the forms secrets really take."""

from __future__ import annotations

import pytest

from dflash_tui.redaction import MASK, Redactor, secret_name

CASES = [
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123", "hf_abcdefghijklmnopqrstuvwxyz0123"),
    ("logging in with hf_abcdefghijklmnopqrstuvwxyz0123 now", "hf_abcdefghijklmnopqrstuvwxyz0123"),
    ("url postgresql://trainer:hunter2pw@db:5432/x", "hunter2pw"),
    ("redis://:p:a:ss@h/0", "p:a:ss"),
    ("aws AKIAABCDEFGHIJKLMNOP here", "AKIAABCDEFGHIJKLMNOP"),
    ("gh ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("wandb key 0123456789abcdef0123456789abcdef01234567", "0123456789abcdef0123456789abcdef01234567"),
    ("Authorization: Bearer abc.def.ghi1234", "abc.def.ghi1234"),
    ('curl -H "Authorization: token tok3n-value-x"', "tok3n-value-x"),
    ('{"db_password": "s3cret!"}', "s3cret!"),
    ("WANDB_API_KEY='k3y-value-1'", "k3y-value-1"),
    ("python train.py --hf-token s3cr3t-a --lr 3", "s3cr3t-a"),
    ("exec '/p' '--hf-token' 's3cr3t-b'", "s3cr3t-b"),
    ('"argv":["/p","--hf-token","s3cr3t-c"]', "s3cr3t-c"),
    ("cfg(secret_key='s3cr3t-d')", "s3cr3t-d"),
    ("""STATIC_JSON='"argv":["/p","--hf-token","s3cr3t-e"],"x":1'""", "s3cr3t-e"),   # inside a quoted value
    ("A='B=1 HF_TOKEN=s3cr3t-f' C=2", "s3cr3t-f"),
    ("-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----"),
]


@pytest.mark.parametrize("text,secret", CASES)
def test_each_form_is_masked_and_nothing_is_left_over(text, secret):
    r = Redactor()
    out = r.text(text)
    assert secret not in out and MASK in out, out
    assert r.leftover(out) is None, out


def test_notify_urls_go_wherever_they_appear_and_values_by_key_name():
    r = Redactor(["ntfy://ntfy.example.com/tk_9f8e7d6c5b4a"])
    assert "tk_9f8e7d6c5b4a" not in r.text("sending to ntfy://ntfy.example.com/tk_9f8e7d6c5b4a failed")
    assert r.leftover("topic tk_9f8e7d6c5b4a") == "a notify URL"
    got = r.value({"env": {"HF_TOKEN": "x-y-z", "PATH": "/bin"}, "argv": ["t.py", "--api-key", "v-1", "--lr", "3"]})
    assert got == {"env": {"HF_TOKEN": MASK, "PATH": "/bin"}, "argv": ["t.py", "--api-key", MASK, "--lr", "3"]}


def test_a_shape_the_rules_left_is_found_by_leftover():
    assert Redactor().leftover("raw hf_abcdefghijklmnopqrstuvwxyz0123") == "Hugging Face token"


def test_names_that_hold_no_secret_stay():
    assert secret_name("HF_TOKEN") and secret_name("--api-key") and secret_name("db_password")
    assert not secret_name("PATH") and not secret_name("author") and not secret_name("stall_after_s")
    text = "step 10 loss 2.5 tokens/s 1200 lr=3e-4"
    assert Redactor().text(text) == text
