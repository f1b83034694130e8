"""HTTP backends against servers on 127.0.0.1: fetch (HTML, PDF, redirects, limits) and the SSRF guard."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler

import pytest

from agentrl.env import ResearchEnv
from agentrl.env.backends.base import ToolFailure
from agentrl.env.backends.http_fetch import HttpFetch
from agentrl.env.backends.http_search import HttpSearch
from agentrl.env.backends.ssrf import address_allowed
from agentrl.env.config import FetchConfig, SearchConfig
from tests.local_http import RecordingServer, start_server

from .conftest import call


def _pdf(text: str) -> bytes:
    """A minimal one-page PDF showing ``text`` (offsets computed, so pypdf reads it cleanly)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


class _Server:
    """A threaded HTTP server on 127.0.0.1 with fixed routes; ``hits`` counts requests per path."""

    def __init__(self, routes):
        self.hits: dict[str, int] = {}
        self.hosts: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _serve(self, body_in: bytes = b""):
                server.hits[self.path] = server.hits.get(self.path, 0) + 1
                server.hosts.append(self.headers.get("Host", ""))
                status, headers, body = routes(self.path, body_in)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._serve()

            def do_POST(self):
                self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        self.httpd = start_server(Handler)
        self.port = self.httpd.server_address[1]

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def target():
    """The server an attacker wants to reach (internal service)."""
    s = _Server(
        lambda path, _: (
            200,
            {"Content-Type": "text/html"},
            b"<html><title>secret</title><p>s3cret</p></html>",
        )
    )
    yield s
    s.close()


@pytest.fixture
def site(target):
    """A "public" site: pages, a PDF, redirects (some to the internal target), limits."""

    def routes(path, _):
        html = {"Content-Type": "text/html; charset=utf-8"}
        if path == "/page":
            return (
                200,
                html,
                b"<html><head><title>Q1</title><script>x()</script></head><body><p>Cloud $12.3 billion</p></body></html>",
            )
        if path == "/doc.pdf":
            return 200, {"Content-Type": "application/pdf"}, _pdf("Annual revenue 350 billion")
        if path == "/hop":
            return 302, {"Location": "/page"}, b""
        if path == "/to-internal":
            return 302, {"Location": target.url("/")}, b""
        if path == "/to-localhost":
            return 302, {"Location": target.url("/", host="localhost")}, b""
        if path == "/loop":
            return 302, {"Location": "/loop"}, b""
        if path == "/bad-hop":  # a Location urljoin refuses (an unclosed IPv6 bracket)
            return 302, {"Location": "http://[bad/x"}, b""
        if path == "/big":
            return 200, {"Content-Type": "text/plain"}, b"x" * 50_000
        if path == "/slow":
            time.sleep(1.0)
            return 200, html, b"<p>late</p>"
        if path == "/bin":
            return 200, {"Content-Type": "application/octet-stream"}, b"\x00\x01"
        return 404, html, b"<p>nope</p>"

    s = _Server(routes)
    yield s
    s.close()


def _fetcher(site, **kw):
    # The test site stands in for a public host: its one address is explicitly exempted, nothing else.
    return HttpFetch(FetchConfig(backend="http", timeout_s=5, **kw), exempt=(f"127.0.0.1:{site.port}",))


def test_fetch_html_pdf_and_redirects(site):
    f = _fetcher(site)
    page = f.fetch(site.url("/page"))
    assert page.title == "Q1" and "$12.3 billion" in page.text and "x()" not in page.text
    assert "350 billion" in f.fetch(site.url("/doc.pdf")).text
    assert "$12.3 billion" in f.fetch(site.url("/hop")).text


def test_fetch_limits(site):
    f = _fetcher(site, max_bytes=10_000, max_redirects=3)
    with pytest.raises(ToolFailure, match=r"too large|larger"):
        f.fetch(site.url("/big"))
    with pytest.raises(ToolFailure, match="unsupported content type"):
        f.fetch(site.url("/bin"))
    with pytest.raises(ToolFailure, match="too many redirects"):
        f.fetch(site.url("/loop"))
    with pytest.raises(ToolFailure, match="HTTP 404"):
        f.fetch(site.url("/missing"))
    with pytest.raises(ToolFailure, match="only http and https"):
        f.fetch("file:///etc/passwd")


def test_a_malformed_url_or_redirect_is_a_tool_error_not_a_crash(site):
    """``urlsplit`` and ``urljoin`` raise ``ValueError`` on an unclosed IPv6 bracket: a sampled URL
    (a CPU training run of the long-horizon suite died on one) or a server's Location header."""
    f = _fetcher(site)
    for url in ("https://[ir.example.com/news", "http://[::1/x", "https://a]b[/"):
        with pytest.raises(ToolFailure, match="not a valid URL"):
            f.fetch(url)
    with pytest.raises(ToolFailure, match="bad redirect Location"):
        f.fetch(site.url("/bad-hop"))


def test_ssrf_direct_loopback_is_blocked(target):
    f = HttpFetch(FetchConfig(backend="http"))
    for url in (
        target.url("/"),
        target.url("/", host="localhost"),
        "http://[::1]:1/",
        "http://169.254.169.254/latest/",
    ):
        with pytest.raises(ToolFailure, match="blocked"):
            f.fetch(url)
    assert target.hits == {}


def test_ssrf_redirect_hops_are_checked(site, target):
    f = _fetcher(site)
    for path in ("/to-internal", "/to-localhost"):
        with pytest.raises(ToolFailure, match="blocked"):
            f.fetch(site.url(path))
    assert site.hits["/to-internal"] == 1 and target.hits == {}


def test_ssrf_hostname_resolving_to_loopback_and_connection_to_checked_address(target):
    resolve = {"rebind.example": ["127.0.0.1"], "mixed.example": ["93.184.216.34", "127.0.0.1"]}
    guarded = HttpFetch(FetchConfig(backend="http"), resolver=lambda h, p: resolve[h])
    for host in ("rebind.example", "mixed.example"):
        with pytest.raises(ToolFailure, match="non-public"):
            guarded.fetch(target.url("/", host=host))
    assert target.hits == {}
    # With the guard off, the request goes to the resolved address with the original Host header:
    # "rebind.example" exists in no DNS, so reaching the server proves the checked address was used.
    open_ = HttpFetch(FetchConfig(backend="http", allow_private=True), resolver=lambda h, p: resolve[h])
    assert "s3cret" in open_.fetch(target.url("/", host="rebind.example")).text
    assert target.hosts[-1] == f"rebind.example:{target.port}"


def test_address_classes():
    for bad in (
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.1",
        "172.16.0.1",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "100.64.0.1",
        "fd00::1",
        "not-an-ip",
    ):
        assert not address_allowed(bad), bad
    for good in ("93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"):
        assert address_allowed(good), good


def test_env_open_url_over_http_is_guarded(site, small_suite):
    env = ResearchEnv({"suite": str(small_suite), "fetch": {"backend": "http"}})
    env.reset(seed=0)
    obs, *_, info = env.step(call("open_url", url=site.url("/page")))
    assert obs.startswith("Error: blocked") and info["tool_errors"] == 1
    env = ResearchEnv({"suite": str(small_suite), "fetch": {"backend": "http", "allow_private": True}})
    env.reset(seed=0)
    obs, *_ = env.step(call("open_url", url=site.url("/page")))
    assert "$12.3 billion" in obs


@pytest.fixture
def search_server():
    def routes(path, body):
        if path.startswith("/search"):
            data = {
                "results": [
                    {
                        "url": "https://a.example/1",
                        "title": "A",
                        "content": "alpha",
                        "publishedDate": "2025-01-02T00:00:00",
                    },
                    {"url": "https://b.example/2", "title": "B", "content": "beta"},
                ]
            }
            return 200, {"Content-Type": "application/json"}, json.dumps(data).encode()
        if path == "/retrieve":
            req = json.loads(body)
            docs = [
                {
                    "document": {"id": str(i), "contents": f'"Doc {i}"\ntext about {req["queries"][0]}'},
                    "score": 1.0 / (i + 1),
                }
                for i in range(req["topk"])
            ]
            return 200, {"Content-Type": "application/json"}, json.dumps({"result": [docs]}).encode()
        if path.startswith("/flaky"):
            return 503, {}, b""
        return 404, {}, b""

    s = _Server(routes)
    yield s
    s.close()


def test_searxng_and_retrieve_search(search_server):
    sx = HttpSearch(SearchConfig(backend="http", api="searxng", url=search_server.url("/search")))
    hits = sx.search("cloud", 5)
    assert [h.url for h in hits] == ["https://a.example/1", "https://b.example/2"] and hits[
        0
    ].date == "2025-01-02"
    r1 = HttpSearch(SearchConfig(backend="http", api="retrieve", url=search_server.url("/retrieve")))
    hits = r1.search("cloud revenue", 3)
    assert len(hits) == 3 and hits[0].title == "Doc 0" and "cloud revenue" in hits[0].snippet
    flaky = HttpSearch(SearchConfig(backend="http", url=search_server.url("/flaky"), retries=2))
    with pytest.raises(ToolFailure, match="unavailable"):
        flaky.search("x", 3)
    assert sum(v for k, v in search_server.hits.items() if k.startswith("/flaky")) == 3  # bounded retries


def test_env_with_http_search(search_server, small_suite):
    env = ResearchEnv(
        {"suite": str(small_suite), "search": {"backend": "http", "url": search_server.url("/search")}}
    )
    env.reset(seed=0)
    obs, *_ = env.step(call("search", query="anything"))
    assert "https://a.example/1" in obs


def test_slow_tool_call_times_out_as_an_error_observation(site, small_suite):
    cfg = {
        "suite": str(small_suite),
        "fetch": {"backend": "http", "allow_private": True},
        "budgets": {"tool_timeout_s": 0.2},
    }
    env = ResearchEnv(cfg)
    env.reset(seed=0)
    t0 = time.monotonic()
    obs, _, term, trunc, info = env.step(call("open_url", url=site.url("/slow")))
    assert time.monotonic() - t0 < 0.9
    assert "timed out" in obs and info["tool_timeouts"] == 1 and not term and not trunc


# IPv6 addresses that embed an IPv4 address are judged by it (issue #13): (address, embedded, allowed).
EMBEDDED = [
    ("2002:7f00:1::", "6to4 of 127.0.0.1", False),
    ("2002:a9fe:a9fe::1", "6to4 of 169.254.169.254", False),
    ("2002:c0a8:101::", "6to4 of 192.168.1.1", False),
    ("2002:808:808::1", "6to4 of 8.8.8.8", True),
    # Teredo: server IPv4 in bits 32-63, client IPv4 XOR 0xffffffff in the last 32 bits.
    ("2001:0:808:808::8000:80ff:fffe", "Teredo, client 127.0.0.1 (~0x7f000001)", False),
    ("2001:0:7f00:1::8000:f7f7:f7f7", "Teredo, server 127.0.0.1", False),
    ("2001:0:808:808::8000:f5ff:fefe", "Teredo, client 10.0.1.1", False),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "RFC 4380 example, client 192.0.2.45 (documentation)", False),
    ("2001:0:808:808::8000:f7f7:f7f7", "Teredo, server and client 8.8.8.8", True),
    ("64:ff9b::7f00:1", "NAT64 of 127.0.0.1", False),
    ("64:ff9b::a9fe:a9fe", "NAT64 of 169.254.169.254", False),
    ("64:ff9b::808:808", "NAT64 of 8.8.8.8", True),
    ("64:ff9b:1::808:808", "local-use NAT64: layout unknown, refused whole", False),
    ("::ffff:a00:1", "IPv4-mapped 10.0.0.1", False),
    ("::ffff:808:808", "IPv4-mapped 8.8.8.8", True),
    ("::7f00:1", "IPv4-compatible 127.0.0.1 (deprecated: refused whole)", False),
    ("::808:808", "IPv4-compatible 8.8.8.8 (deprecated: refused whole)", False),
    ("2001:4860:4860::8888", "plain global IPv6", True),
]


@pytest.mark.parametrize(("addr", "what", "allowed"), EMBEDDED, ids=[e[0] for e in EMBEDDED])
def test_addresses_embedding_ipv4_are_judged_by_it(addr, what, allowed):
    assert address_allowed(addr) is allowed, what


def test_every_resolved_address_and_every_hop_is_checked_for_embedded_ipv4(site, target):
    # A name whose AAAA records include 6to4-of-loopback is refused, even after a public address.
    resolve = {"six.example": ["93.184.216.34", "2002:7f00:1::"]}
    guarded = HttpFetch(FetchConfig(backend="http"), resolver=lambda h, p: resolve[h])
    with pytest.raises(ToolFailure, match=r"non-public address \(2002:7f00:1::\)"):
        guarded.fetch(target.url("/", host="six.example"))
    with pytest.raises(ToolFailure, match="blocked"):
        guarded.fetch("http://[64:ff9b::a9fe:a9fe]/latest/meta-data/")
    # A redirect hop to a literal embedded loopback is refused before any connection.
    hop = _Server(lambda path, _: (302, {"Location": f"http://[2002:7f00:1::]:{target.port}/"}, b""))
    try:
        with pytest.raises(ToolFailure, match="blocked"):
            HttpFetch(FetchConfig(backend="http"), exempt=(f"127.0.0.1:{hop.port}",)).fetch(hop.url("/"))
        assert hop.hits == {"/": 1} and target.hits == {}
    finally:
        hop.close()


def test_fetch_sends_no_credentials_to_any_host():
    """No userinfo, no cookie: not to the first host, not across a redirect, not on a later fetch."""
    other = RecordingServer(lambda path: (200, {"Content-Type": "text/plain"}, b"other"))
    first = RecordingServer(
        lambda path: (302, {"Location": other.url + "/landed", "Set-Cookie": "session=s3cret; Path=/"}, b"")
    )
    try:
        f = HttpFetch(FetchConfig(backend="http", allow_private=True, timeout_s=5))
        user_url = first.url.replace("http://", "http://alice:pa55@") + "/start"
        assert f.fetch(user_url).text == "other"
        assert f.fetch(first.url + "/again").text == "other"
        for server in (first, other):
            for _, headers in server.requests:
                assert "authorization" not in headers and "cookie" not in headers, headers
        assert len(first.requests) == 2 and len(other.requests) == 2
    finally:
        first.close()
        other.close()


def test_search_credentials_do_not_follow_a_redirect():
    other = RecordingServer(lambda path: (200, {"Content-Type": "application/json"}, b'{"results": []}'))
    hop = RecordingServer(lambda path: (307, {"Location": other.url + path}, b""))
    try:
        url = hop.url.replace("http://", "http://user:s3cret@") + "/search"
        with pytest.raises(ToolFailure, match="redirect, not followed"):
            HttpSearch(SearchConfig(backend="http", url=url)).search("x", 3)
        assert hop.header("authorization")[0].startswith("Basic ") and other.requests == []
    finally:
        hop.close()
        other.close()
