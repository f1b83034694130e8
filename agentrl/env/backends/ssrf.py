"""The SSRF guard: which addresses a fetch may connect to.

Only http and https; every address a host resolves to must be globally routable (not loopback,
private, link-local — the cloud metadata address 169.254.169.254 included — multicast, reserved,
unspecified, shared or documentation space). IPv6 addresses that embed IPv4 ones (mapped,
compatible, NAT64, 6to4, Teredo) are judged by the IPv4 addresses they embed. The fetcher then
connects to the checked address itself, so a DNS answer that changes between the check and the
connection (rebinding) cannot redirect it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from urllib.parse import SplitResult, urlsplit

from agentrl.env.backends.base import ToolFailure

__all__ = ["Resolver", "address_allowed", "checked_target", "system_resolver"]

#: ``(host, port) -> list of IP address strings``; injectable for tests.
Resolver = Callable[[str, int], list[str]]


def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver (``getaddrinfo``), in its order, deduplicated."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise ToolFailure(f"cannot resolve {host}: {e}") from None
    out: list[str] = []
    for info in infos:
        addr = str(info[4][0]).split("%", 1)[0]  # drop an IPv6 zone id
        if addr not in out:
            out.append(addr)
    return out


_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_TEREDO = ipaddress.IPv6Network("2001::/32")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _global(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return bool(ip.is_global) and not ip.is_multicast and not ip.is_reserved and not ip.is_unspecified


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address] | None:
    """The IPv4 addresses an IPv6 address stands for (mapped, NAT64, 6to4, Teredo), or None.

    A packet to one of these may end up at the IPv4 address (a tunnel or translator unwraps it),
    so each is judged like the IPv4 address it embeds.
    """
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64:
        return [low32]
    if ip in _SIX_TO_FOUR:
        return [ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)]
    if ip in _TEREDO:  # server IPv4 in bits 32-63, client IPv4 (inverted) in the last 32 bits
        server = ipaddress.IPv4Address((int(ip) >> 64) & 0xFFFFFFFF)
        return [server, ipaddress.IPv4Address(int(low32) ^ 0xFFFFFFFF)]
    return None


def address_allowed(addr: str) -> bool:
    """True when ``addr`` is a globally routable unicast address.

    An IPv6 address that embeds IPv4 addresses — IPv4-mapped ``::ffff:0:0/96``, NAT64
    ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo ``2001::/32`` (server and client) — is allowed
    exactly when every address it embeds is, so a public site behind NAT64 or 6to4 stays reachable.
    Refused whole, as part of the reserved ``::/8``: the deprecated IPv4-compatible ``::/96``
    (nothing legitimate uses it) and the local-use NAT64 prefix ``64:ff9b:1::/48`` (where it puts
    the IPv4 address is the operator's choice).
    """
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            return all(_global(v4) for v4 in embedded)
    return _global(ip)


def _port(parts: SplitResult) -> int:
    try:
        port = parts.port
    except ValueError:
        raise ToolFailure(f"bad port in {parts.geturl()}") from None
    return port or (443 if parts.scheme == "https" else 80)


def checked_target(
    url: str, resolver: Resolver, *, allow_private: bool, exempt: Iterable[str] = ()
) -> tuple[SplitResult, str, int]:
    """Check one hop: ``(parts, address to connect to, port)``; ``ToolFailure`` when blocked.

    ``exempt`` lists ``ip`` or ``ip:port`` strings let through even when not global (an operator's
    explicit allowance for one service); ``allow_private`` lets everything through.
    """
    try:
        parts = urlsplit(url)
    except ValueError as e:  # e.g. an unclosed IPv6 bracket: the policy's URL, so a tool error
        raise ToolFailure(f"not a valid URL ({e}): {url!r}") from None
    if parts.scheme not in ("http", "https"):
        raise ToolFailure(
            f"blocked: only http and https URLs can be opened, not {parts.scheme or 'no scheme'!r}"
        )
    host = parts.hostname
    if not host:
        raise ToolFailure(f"blocked: no host in {url!r}")
    port = _port(parts)
    try:  # a literal address needs no resolver
        addrs = [str(ipaddress.ip_address(host))]
    except ValueError:
        addrs = resolver(host, port)
    if not addrs:
        raise ToolFailure(f"cannot resolve {host}")
    if not allow_private:
        allowed = set(exempt)
        for a in addrs:
            if not address_allowed(a) and a not in allowed and f"{a}:{port}" not in allowed:
                raise ToolFailure(f"blocked: {host} resolves to a non-public address ({a})")
    return parts, addrs[0], port
