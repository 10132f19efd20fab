"""What of a member may leave this machine: its secrets masked, nothing a terminal acts on.

Fails closed: a member that cannot be scanned (not UTF-8 text, a NUL byte, bigger than
SCAN_MAX_BYTES) is left out, and so is one in which a secret shape is still found after masking
(redaction.py `leftover`); the manifest names each and says why. A JSON member is masked value
by value (a secret-named key's value whole) and written back as ASCII JSON; a text member is
masked, then made inert (contract/rundir.py `inert_text`: ESC and every other control as its
escape, newlines kept).
"""

from __future__ import annotations

import json

from ..contract.rundir import inert_text
from ..redaction import MASK, Redactor
from .member import Member, Missing, safe_name

SCAN_MAX_BYTES = 32 << 20


def cleaned(member: Member, redactor: Redactor) -> tuple[Member, int] | Missing:
    """(the member as it may be shipped, how many masks it carries), or why it may not be."""
    name = safe_name(member.name)
    if len(member.data) > SCAN_MAX_BYTES:
        return Missing(name, member.what, f"{len(member.data)} bytes, too big to be scanned for secrets")
    try:
        text = member.data.decode("utf-8")
    except UnicodeDecodeError:
        return Missing(name, member.what, "not UTF-8 text, so it cannot be scanned for secrets")
    if "\x00" in text:
        return Missing(name, member.what, "binary (a NUL byte), so it cannot be scanned for secrets")
    shipped, plain = _json(text, redactor) if name.endswith(".json") else (None, None)
    if shipped is None:
        plain = inert_text(redactor.text(text), keep_newlines=True)
        shipped = plain
    left = redactor.leftover(plain)
    if left is not None:
        return Missing(name, member.what, f"{left} still found after masking: left out (fail closed)")
    return (Member(name, member.what, shipped.encode("utf-8"), member.taken_at, inert_text(member.where)),
            plain.count(MASK) - text.count(MASK))


def _json(text: str, redactor: Redactor) -> tuple[str | None, str | None]:
    """(ASCII JSON to ship, the same unescaped for the leftover scan); (None, None): not JSON."""
    try:
        value = json.loads(text, strict=False)   # a raw control character in a string: escaped on the way out
    except ValueError:
        return None, None
    masked = redactor.value(value)
    return json.dumps(masked, indent=1, ensure_ascii=True), json.dumps(masked, indent=1, ensure_ascii=False)
