"""``open_url`` over HTTP: httpx GET with redirects followed by hand, every hop through the SSRF guard.

Each hop is resolved and checked (``ssrf.checked_target``), then requested from the checked
address with the original ``Host`` header (and TLS server name), never re-resolved; no userinfo,
cookie or other credential is sent, to the first host or any hop. Responses are
read as a stream and cut off at ``max_bytes``; HTML becomes text with selectolax, PDF with pypdf,
other text types are decoded, anything else is refused. Transport errors are retried a bounded
number of times with exponential backoff; HTTP errors are not.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import time
from http.cookiejar import CookieJar, DefaultCookiePolicy
from urllib.parse import urljoin

import httpx

from agentrl.env.backends.base import Page, ToolFailure
from agentrl.env.backends.extract import html_to_text, pdf_to_text
from agentrl.env.backends.ssrf import Resolver, checked_target, system_resolver
from agentrl.env.config import FetchConfig

__all__ = ["HttpFetch"]

_HTML = ("text/html", "application/xhtml+xml")
_TEXT = ("text/plain", "text/markdown", "application/json", "text/csv", "text/xml", "application/xml")


class HttpFetch:
    """The http fetch backend. Thread-safe (httpx.Client is)."""

    def __init__(self, config: FetchConfig, resolver: Resolver | None = None, exempt: tuple[str, ...] = ()):
        self.config = config
        self.resolver = resolver or system_resolver
        self.exempt = exempt
        # trust_env=False: an HTTP(S)_PROXY from the environment would connect on our behalf to
        # addresses the guard never saw. A jar that accepts no cookie: requests go to the checked
        # IP, so a kept cookie would be sent to every other site on that IP (a CDN's thousands),
        # and would carry one episode's session into the next.
        self._client = httpx.Client(
            timeout=httpx.Timeout(config.timeout_s),
            follow_redirects=False,
            trust_env=False,
            cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])),
            headers={
                "User-Agent": config.user_agent,
                "Accept": "text/html,application/pdf,text/plain;q=0.9,*/*;q=0.1",
            },
        )

    def fetch(self, url: str, *, before: dt.date | None = None, world: str | None = None) -> Page:
        """The text of ``url`` (``before`` and ``world`` are ignored: the live web has no clock and is one web)."""
        del before, world
        deadline = time.monotonic() + self.config.timeout_s * (self.config.max_redirects + 1)
        current = url.strip()
        for _ in range(self.config.max_redirects + 1):
            if time.monotonic() > deadline:
                raise ToolFailure(f"timed out fetching {url}")
            resp_status, headers, body = self._get(current)
            if resp_status in (301, 302, 303, 307, 308):
                location = headers.get("location")
                if not location:
                    raise ToolFailure(f"HTTP {resp_status} without a Location header at {current}")
                try:
                    current = urljoin(current, location)
                except ValueError as e:  # the server's Location header: a tool error, not a crash
                    raise ToolFailure(f"bad redirect Location {location!r} at {current} ({e})") from None
                continue
            if resp_status >= 400:
                raise ToolFailure(f"HTTP {resp_status} at {current}")
            return self._to_page(current, headers.get("content-type", ""), body)
        raise ToolFailure(f"too many redirects (more than {self.config.max_redirects}) from {url}")

    def _get(self, url: str) -> tuple[int, httpx.Headers, bytes]:
        parts, addr, port = checked_target(
            url, self.resolver, allow_private=self.config.allow_private, exempt=self.exempt
        )
        host_ip = f"[{addr}]" if isinstance(ipaddress.ip_address(addr), ipaddress.IPv6Address) else addr
        target = parts._replace(netloc=f"{host_ip}:{port}").geturl()
        host_header = parts.netloc.rsplit("@", 1)[-1]  # never forward userinfo
        extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" and parts.hostname else {}
        last: Exception | None = None
        for attempt in range(self.config.retries + 1):
            try:
                request = self._client.build_request(
                    "GET", target, headers={"Host": host_header}, extensions=extensions
                )
                response = self._client.send(request, stream=True)
                try:
                    size = int(response.headers.get("content-length") or 0)
                    if size > self.config.max_bytes:
                        raise ToolFailure(f"{url} is too large ({size} bytes, limit {self.config.max_bytes})")
                    chunks, total = [], 0
                    for chunk in response.iter_bytes():
                        total += len(chunk)
                        if total > self.config.max_bytes:
                            raise ToolFailure(
                                f"{url} is larger than the limit of {self.config.max_bytes} bytes"
                            )
                        chunks.append(chunk)
                    return response.status_code, response.headers, b"".join(chunks)
                finally:
                    response.close()
            except httpx.TransportError as e:  # connect/read errors and timeouts: retry with backoff
                last = e
                if attempt < self.config.retries:
                    time.sleep(min(2.0, 0.2 * 2**attempt))
        raise ToolFailure(f"cannot fetch {url}: {type(last).__name__}: {last}")

    def _to_page(self, url: str, content_type: str, body: bytes) -> Page:
        ctype = content_type.split(";", 1)[0].strip().lower()
        if ctype in _HTML or (not ctype and body.lstrip()[:1] == b"<"):
            title, text = html_to_text(body.decode(_charset(content_type), errors="replace"))
            return Page(url=url, title=title or url, text=text, content_type="text/html")
        if ctype == "application/pdf" or body[:5] == b"%PDF-":
            try:
                title, text = pdf_to_text(body)
            except Exception as e:  # pypdf raises many types on broken files; the policy sees one error
                raise ToolFailure(f"cannot read the PDF at {url}: {e}") from None
            return Page(url=url, title=title or url, text=text, content_type="application/pdf")
        if ctype in _TEXT or ctype.startswith("text/"):
            return Page(
                url=url,
                title=url,
                text=body.decode(_charset(content_type), errors="replace"),
                content_type=ctype,
            )
        raise ToolFailure(f"unsupported content type {ctype!r} at {url}")

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()


def _charset(content_type: str) -> str:
    for part in content_type.split(";")[1:]:
        k, _, v = part.strip().partition("=")
        if k.lower() == "charset" and v:
            try:
                "".encode(v.strip('"'))
                return v.strip('"')
            except LookupError:
                break
    return "utf-8"
