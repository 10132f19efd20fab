"""`dflash-tui --serve` against malformed and hostile requests, over raw sockets: every one gets
a 4xx (a cookie that is not UTF-8 is 403, never 500), the server logs no traceback, `/static/`
lists nothing even with the token, and the token's cookie is named for the served port (a
browser sends a host's cookies to every port of it). Where it cannot listen (a port in use, an
address not on this host) it says so in one line and exits 2. Requests come from a seeded generator
(DFLASH_FUZZ_SEED); one real server is shared by the module.
"""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
import time

import pytest

from tests.support.ports import free_port
from tests.support.serve import served_dashboard

pytestmark = [pytest.mark.timeout(180)]

SEED = int(os.environ.get("DFLASH_FUZZ_SEED", "20261201"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with served_dashboard(tmp_path_factory.mktemp("serve")) as served:
        yield served


def raw(port: int, request: bytes, timeout: float = 5.0) -> bytes:
    """What the server answers to these exact bytes (b"" if it just closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks)


def status(answer: bytes) -> int | None:
    m = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
    return int(m.group(1)) if m else None


def get(path: bytes, *headers: bytes, method: bytes = b"GET") -> bytes:
    return b"\r\n".join([method + b" " + path + b" HTTP/1.1", b"Host: 127.0.0.1", *headers, b"Connection: close",
                         b"", b""])


def hostile_requests(rng: random.Random, token: str) -> list[tuple[str, bytes]]:
    t = token.encode()
    cookie_bytes = [b"\xff\xfe", b"\xc3\x28", b"\x80" * 10, b"\xed\xa0\x80", bytes(rng.randrange(128, 256) for _ in range(16))]
    cases = [(f"non-UTF-8 cookie {c!r}", get(b"/", b"Cookie: dflash_token=" + c)) for c in cookie_bytes]
    cases += [(f"non-UTF-8 cookie name {c!r}", get(b"/", b"Cookie: " + c + b"=" + t)) for c in cookie_bytes[:2]]
    cases += [
        ("bad percent-encoding", get(b"/?token=%zz%" + t[:3])),
        ("percent-encoded non-UTF-8 token", get(b"/?token=%ff%fe")),
        ("non-UTF-8 path", get(b"/\xff\xfe")),
        ("non-UTF-8 query", get(b"/?token=\xff" + t)),
        ("huge header", get(b"/", b"X-Big: " + b"a" * (rng.randint(9, 40) << 10))),
        ("many headers", get(b"/", *[b"X-H%d: v" % i for i in range(rng.randint(120, 400))])),
        ("bad method", get(b"/", method=rng.choice([b"BREW", b"G\x00T", b"GE T", b"\xffGET"]))),
        ("garbage request line", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(rng.randrange(256) for _ in range(64))),
        ("bad version", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n"),
        ("no host, absolute URI", b"GET http://evil/ HTTP/1.1\r\n\r\n"),
        ("header without colon", get(b"/", b"NoColonHere")),
        ("control in header", get(b"/", b"X-A: a\x01b")),
        ("bad content-length", get(b"/", b"Content-Length: -5", method=b"POST")),
        ("bad chunked body", get(b"/", b"Transfer-Encoding: chunked", method=b"POST") + b"zz\r\n"),
        ("websocket without key", get(b"/ws", b"Upgrade: websocket", b"Connection: Upgrade")),
        ("path traversal", get(b"/static/../../../../etc/passwd")),
        ("encoded traversal", get(b"/static/%2e%2e/%2e%2e/etc/passwd")),
    ]
    rng.shuffle(cases)
    return cases


def test_malformed_requests_get_4xx_and_no_traceback_is_logged(server):
    port, token, log_path = server
    rng = random.Random(SEED)
    bad = []
    for what, req in hostile_requests(rng, token):
        answer = raw(port, req)
        code = status(answer)
        if code is not None and not 400 <= code < 500:
            bad.append(f"{what}: {answer[:120]!r}")
        if what.startswith("non-UTF-8 cookie") and code != 403:
            bad.append(f"{what}: {code}, expected 403")
    time.sleep(0.3)
    log = log_path.read_text(errors="replace")
    assert "Traceback" not in log and '  File "' not in log and "\u2502" not in log, log[-3000:]
    assert not [c for c in log if ord(c) < 0x20 and c != "\n"], log[-3000:]
    assert not bad, "\n".join(bad)
    # Still serving, and still guarding.
    assert status(raw(port, get(b"/"))) == 403
    assert status(raw(port, get(b"/?token=" + token.encode()))) == 200


def test_static_lists_nothing_even_with_the_token(server):
    port, token, _ = server
    cookie = b"Cookie: dflash_token_%d=%s" % (port, token.encode())
    for path in (b"/static/", b"/static", b"/static/js/", b"/static/css/"):
        answer = raw(port, get(path + b"?token=" + token.encode()))
        assert status(answer) in (403, 404), (path, answer[:300])
        assert b"Index of" not in answer and b"<a href" not in answer, (path, answer[:300])
        assert status(raw(port, get(path, cookie))) in (403, 404), path
    # A file the page needs is served.
    assert status(raw(port, get(b"/static/js/textual.js", cookie))) == 200


def test_the_token_cookie_is_named_for_the_served_port(server):
    port, token, _ = server
    answer = raw(port, get(b"/?token=" + token.encode()))
    cookies = re.findall(rb"Set-Cookie: ([^=]+)=", answer)
    assert cookies == [b"dflash_token_%d" % port], answer[:600]
    # The cookie of another port's server (same host, so the browser sends it here too) is refused.
    assert status(raw(port, get(b"/", b"Cookie: dflash_token=" + token.encode()))) == 403
    assert status(raw(port, get(b"/", b"Cookie: dflash_token_%d=%s" % (port + 1, token.encode())))) == 403
    assert status(raw(port, get(b"/", b"Cookie: dflash_token_%d=%s" % (port, token.encode())))) == 200


def serve_cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[profile.web]\nrun_dir = "{tmp_path / "run"}"\n')
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    return subprocess.run([sys.executable, "-m", "dflash_tui", "--serve", "--config", str(cfg), *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path):
    """Another program listens on the port (a real listener on 127.0.0.1): one line naming the
    port and the fix, exit 2, and no URL printed for a server that never listened."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        res = serve_cli(tmp_path, "--port", str(port))
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == "" and res.stderr == (f"dflash-tui: --serve: port {port} on 127.0.0.1 is in use by another "
                                               "program; pick a free one with --port\n"), res.stderr


def test_an_address_not_on_this_host_is_one_line_and_exit_2(tmp_path):
    res = serve_cli(tmp_path, "--host", "192.0.2.7", "--port", str(free_port()))   # TEST-NET-1: nobody's
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == "" and len(res.stderr.splitlines()) == 1, res.stderr
    assert "--host 192.0.2.7 is not an address of this machine; use 127.0.0.1" in res.stderr, res.stderr
