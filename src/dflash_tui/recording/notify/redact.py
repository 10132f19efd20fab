"""What of a notify URL may be printed or logged: its scheme and host, nothing else.

A notify URL is a credential: tokens sit in its user part, its path (webhook ids), its GET
parameters, its `+Header=` and `:payload=` extras, and for some services in the host itself
(`tgram://BOT_TOKEN/...`), where Apprise's privacy form masks them. So a URL is shown as its
scheme and the host of Apprise's privacy form, and any text a delivery failure brings back (an
HTTP library's "Max retries exceeded with url: /path?token=...") has every piece of the URL but
those two written out of it (`scrub`, from redaction.py: the one set of rules for what
leaves this machine).
"""

from __future__ import annotations

import re
import urllib.parse

import apprise

from ...redaction import MASK, scrub

__all__ = ["MASK", "masked", "scheme_of", "scrub"]

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,19}")


def scheme_of(url: str) -> str | None:
    """The URL's scheme when it has one (`scheme://`), else None: then nothing of it is shown."""
    head, sep, _ = url.partition("://")
    return head.lower() if sep and _SCHEME.fullmatch(head) else None


def _private(url: str) -> str | None:
    try:
        plugin = apprise.Apprise.instantiate(url)
        return plugin.url(privacy=True) if plugin else None
    except Exception:   # a plugin's own bug on a hostile URL: shown as unparsable
        return None


def masked(url: str) -> str:
    """`scheme://host/…`: the host as Apprise's privacy form shows it (a token in the host is
    masked there); "a URL without a scheme" when it has none."""
    scheme = scheme_of(url)
    if scheme is None:
        return "a URL without a scheme"
    private = _private(url)
    try:
        host = urllib.parse.urlsplit(private).hostname if private else None
    except ValueError:
        host = None
    if not host or not re.fullmatch(r"[A-Za-z0-9._~\-\[\]:]+", host):
        return f"{scheme}://{MASK}"
    rest = url.partition("://")[2]
    return f"{scheme}://{host}" + (f"/{MASK}" if rest.strip("/") != host else "")
