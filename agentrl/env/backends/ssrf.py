"""The SSRF guard: which addresses a fetch may connect to.

Only http and https; every address a host resolves to must be globally routable (not loopback,
private, link-local — the cloud metadata address 169.254.169.254 included — multicast, reserved,
unspecified, shared or documentation space; IPv4-mapped IPv6 is unwrapped first). The fetcher then
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


def address_allowed(addr: str) -> bool:
    """True when ``addr`` is a globally routable unicast address."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return bool(ip.is_global) and not ip.is_multicast and not ip.is_reserved and not ip.is_unspecified


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
    parts = urlsplit(url)
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
