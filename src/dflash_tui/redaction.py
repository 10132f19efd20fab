"""What of a text may leave this machine: secrets masked, failing closed.

One set of rules for every text the product hands to someone else (an evidence bundle, a
notification's error text): the values of names that look secret (`HF_TOKEN=...`,
`"db_password": "..."`), tokens of known shapes wherever they stand (Hugging Face `hf_...`,
AWS `AKIA...`, GitHub `ghp_...`, W&B's 40-hex keys, `Bearer ...`, the password of a
`scheme://user:password@host` URL, private key blocks), and every piece of a given URL that may
be a secret (the notify URLs: `url_pieces`). `leftover` runs the shapes again over a masked text:
whatever still matches is not shipped (the caller leaves it out), so a rule that misses a
form fails closed rather than open.

Stdlib only: recording/notify/redact.py (a notify URL shown as its scheme and host) builds on it.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, Iterable

MASK = "…"
_SHORTEST_SECRET = 3          # a piece shorter than this is not worth a mask (and would garble words)

# A name whose value is a secret: env vars, config keys, JSON keys, command-line flags.
_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "PWD", "CREDENTIAL",
                 "AUTH", "COOKIE", "SESSION", "PRIVATE", "SIGNATURE", "CERT", "DSN")
_SECRET_NAME = re.compile("|".join(_SECRET_WORDS), re.IGNORECASE)
# Names that hold one of those words but name no secret (the mask would only hide evidence).
_NOT_SECRET = frozenset({"KEYBOARD", "MONKEYPATCH", "AUTHOR", "AUTHORS", "OLDPWD_IS_NOT", "SORT_KEYS",
                         "KEYS", "HOTKEY"})

# Tokens of known shapes, wherever they stand (a log line, an argv, a stack's locals).
TOKEN_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("AWS access key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("W&B key", re.compile(r"(?<![0-9a-fA-F])[0-9a-f]{40}(?![0-9a-fA-F])")),   # a git hash too: masked alike
    ("OpenAI/Anthropic key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("bearer header", re.compile(r"(?i)\bbearer\s+(?!…)[A-Za-z0-9._~+/=-]{8,}")),
    ("authorization header", re.compile(r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*(?!\s*[\"']?…)[^\n]+")),
    ("URL password", re.compile(r"(?i)\b[a-z][a-z0-9+.-]{0,30}://[^\s/:@'\"]*:(?!…@)[^\s/@'\"]+@")),
    ("private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
)

# NAME=value / NAME: value / "NAME": "value" / --name value / "--name","value", with a
# secret-looking NAME.
_VALUE = r"""(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s,;)}\]"']+)"""
_ASSIGNMENT = re.compile(
    r"""(?P<name>["']?[A-Za-z_][A-Za-z0-9_.-]*["']?|--?[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>\s*[=:]\s*)""" + _VALUE
    # a flag and its value as the next word, quoted or not, or the next item of a listed argv
    + r"""|(?P<flag>--?[A-Za-z][A-Za-z0-9_.-]*)(?P<space>["']?(?:\s*,\s*|\s+)["']?)(?P<fvalue>[^\s"',-][^\s"',]*)""")


def secret_name(name: str) -> bool:
    """Whether a variable, key or flag named `name` holds a secret by its name."""
    bare = name.strip("\"'-").upper()
    return bool(_SECRET_NAME.search(bare)) and bare not in _NOT_SECRET


def url_pieces(url: str) -> set[str]:
    """Every part of `url` that may be a secret: all of it but the scheme and the bare host."""
    rest = url.partition("://")[2] if "://" in url else url
    pieces = {rest}
    try:
        parts = urllib.parse.urlsplit(url if "://" in url else "x://" + url)
        netloc, path, query, frag = parts.netloc, parts.path, parts.query, parts.fragment
    except ValueError:
        netloc, path, query, frag = rest, "", "", ""
    userinfo, _, hostport = netloc.rpartition("@")
    pieces |= {userinfo, *userinfo.split(":"), path, query, frag, hostport.partition(":")[0]}
    pieces |= set(re.split(r"[/?&=#;:@,]", rest))
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        pieces |= {key, value}
    decoded = {urllib.parse.unquote(p) for p in pieces}
    return {p for p in pieces | decoded if len(p) >= _SHORTEST_SECRET}


def scrub(text: str, url: str) -> str:
    """`text` with every piece of `url` that could be a secret replaced by a mask, longest
    first (a token inside a path goes with the path). The host goes too: where it is a token
    (tgram://BOT_TOKEN) it is one."""
    for piece in sorted(url_pieces(url), key=len, reverse=True):
        if piece in text:
            text = text.replace(piece, MASK)
    return text


class Redactor:
    """The rules with the secrets this product knows of itself (the notify URLs) added."""

    def __init__(self, urls: Iterable[str] = ()) -> None:
        self._pieces = sorted({p for u in urls for p in url_pieces(u)}, key=len, reverse=True)

    def text(self, text: str) -> str:
        """`text` with every secret masked."""
        for piece in self._pieces:
            if piece in text:
                text = text.replace(piece, MASK)
        for _, shape in TOKEN_SHAPES:   # before the names: `Authorization: Bearer X` whole
            text = shape.sub(_masked_token, text)
        return _ASSIGNMENT.sub(_masked_assignment, text)

    def value(self, value: Any, key: str = "") -> Any:
        """A JSON value with the values of secret-named keys masked whole, every string masked."""
        if isinstance(value, dict):
            return {self.text(str(k)): (MASK if secret_name(str(k)) and v not in (None, "", [], {}) else
                                        self.value(v, str(k))) for k, v in value.items()}
        if isinstance(value, (list, tuple)):   # an argv: `--hf-token VALUE` as two items
            out = []
            for i, v in enumerate(value):
                before = value[i - 1] if i else None
                flag = isinstance(before, str) and before.startswith("-") and "=" not in before
                out.append(MASK if flag and secret_name(before) and isinstance(v, str) and v
                           else self.value(v, key))
            return out
        if isinstance(value, str):
            return self.text(value)
        return value

    def leftover(self, text: str) -> str | None:
        """The name of the first secret shape or notify URL piece still in `text` (None: none)."""
        for piece in self._pieces:
            if piece in text:
                return "a notify URL"
        for name, shape in TOKEN_SHAPES:
            for m in shape.finditer(text):
                if MASK not in m.group(0):
                    return name
        return None


def _masked_assignment(m: re.Match[str]) -> str:
    # A value that is not masked whole is read again: a quoted value may hold assignments of
    # its own (`STATIC_JSON='..."--hf-token","VALUE"...'`). It is shorter than the match: this ends.
    if m.group("flag"):   # --hf-token VALUE
        if not secret_name(m.group("flag")) or MASK in m.group("fvalue"):
            return m.group("flag") + m.group("space") + _ASSIGNMENT.sub(_masked_assignment, m.group("fvalue"))
        return f"{m.group('flag')}{m.group('space')}{MASK}"
    value = m.group("value")
    if not secret_name(m.group("name")) or MASK in value or not value.strip("\"'"):
        return m.group("name") + m.group("sep") + _ASSIGNMENT.sub(_masked_assignment, value)
    quote = value[0] if value[0] in "\"'" else ""
    return f"{m.group('name')}{m.group('sep')}{quote}{MASK}{quote}"


def _masked_token(m: re.Match[str]) -> str:
    token = m.group(0)
    if MASK in token:
        return token
    if "://" in token:   # keep the scheme and the user, mask the password
        scheme, _, rest = token.partition("://")
        return f"{scheme}://{rest.partition(':')[0]}:{MASK}@"
    low = token.lower()
    if low.startswith("bearer"):
        return token[:6] + " " + MASK
    if "authorization" in low:
        head = re.match(r"(?i)(?:proxy-)?authorization[\"']?\s*[:=]\s*", token)
        return (head.group(0) if head else "") + MASK
    return MASK
