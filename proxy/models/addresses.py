"""Which addresses an outbound model call may connect to, checked on the address actually connected to.

A model registered at runtime (GoodMem ``/v1/embedders``, ``/v1/rerankers``, ``/v1/llms``, or an ml-commons
connector) names a URL chosen by whoever registered it. Matching that URL against a pattern is not enough:
a host name can resolve to anything (and resolve differently a second later: DNS rebinding), and an IP can
be written in forms no pattern foresees (``2130706433``, ``0x7f.1``, ``[::ffff:127.0.0.1]``). So the rule is
applied where the socket is made: aiohttp hands every resolved address (and every literal one, which it does
not resolve) to the connector's ``socket_factory`` right before ``connect()``, and :class:`AddressPolicy`
refuses it there. Nothing connects to an address that was not checked.

Refused unless the operator allows them (``--allow-private-model-endpoints``): every address that is not
publicly routable (unspecified, loopback, private, link-local with the cloud metadata address, carrier-grade
NAT, multicast, and the other special-purpose ranges), including IPv4 addresses written inside IPv6 forms
(IPv4-mapped, IPv4-compatible, 6to4, NAT64). The cluster memproxy keeps its data in is refused always.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OPEN",
    "AddressPolicy",
    "IPAddress",
    "RefusedAddress",
    "classify",
    "literal_ip",
    "parse_allowed",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# What aiohttp gives a socket factory: getaddrinfo's (family, type, proto, canonname, sockaddr).
AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]


def _nets(*cidrs: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# Named ranges, in the order they are reported; the names are also what --allow-private-model-endpoints
# accepts besides CIDRs.
RANGES: dict[str, tuple[IPNetwork, ...]] = {
    "unspecified": _nets("0.0.0.0/8", "::/128"),
    "loopback": _nets("127.0.0.0/8", "::1/128"),
    "private": _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"),
    "link-local": _nets("169.254.0.0/16", "fe80::/10"),
    "carrier-grade NAT": _nets("100.64.0.0/10"),
    "multicast": _nets("224.0.0.0/4", "ff00::/8"),
}
# Names the setting accepts: the ranges an operator may have a model server in. The others (unspecified,
# multicast, ...) can still be opened by an explicit CIDR, which says the operator meant it.
ALLOWABLE_NAMES = ("loopback", "private", "link-local")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V4_COMPAT = ipaddress.ip_network("::/96")


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, 6to4, NAT64), if any."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or (ip in _V4_COMPAT and int(ip) > 1):  # ::/128 and ::1 are themselves, not IPv4
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def classify(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address (a range name), or None when it is publicly routable."""
    for candidate in (embedded_ipv4(ip), ip):  # the IPv4 inside first: its range is the real one
        if candidate is None:
            continue
        for name, nets in RANGES.items():
            if any(candidate.version == n.version and candidate in n for n in nets):
                return name
        if not candidate.is_global:  # documentation, benchmarking, reserved, broadcast, ...
            return "reserved"
    return None


def literal_ip(host: str) -> IPAddress | None:
    """The address a URL host names without DNS: an IPv6 or dotted IPv4 literal, or one of the forms the
    C resolver also reads as IPv4 (``2130706433``, ``0x7f000001``, ``0177.1``, ``127.1``). None for a name."""
    text = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if text and all(c in "0123456789abcdefxABCDEFX." for c in text) and text[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def parse_allowed(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """``--allow-private-model-endpoints`` entries (range names or CIDRs) as networks; ValueError for
    anything else."""
    nets: list[IPNetwork] = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        if entry in ALLOWABLE_NAMES:
            nets.extend(RANGES[entry])
            continue
        try:
            nets.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                f"{entry!r} is neither one of {', '.join(ALLOWABLE_NAMES)} nor a CIDR (10.1.0.0/16)"
            ) from None
    return tuple(nets)


class RefusedAddress(OSError):
    """Raised by the socket factory instead of connecting. Every instance has the same text (aiohttp keeps
    the exception type only when all the addresses it tried failed alike); ``reason`` says which rule."""

    def __init__(self, reason: str) -> None:
        super().__init__("memproxy does not connect a model call to this address")
        self.reason = reason


@dataclass(frozen=True)
class AddressPolicy:
    """The addresses one client may connect to: public ones, those in ``allowed``, never ``forbidden``.

    ``allow_all``: every address (models the operator named at start-up), ``forbidden`` still refused.
    ``forbidden`` holds (address, port) pairs: the cluster's own, as resolved at start-up.
    """

    allowed: tuple[IPNetwork, ...] = ()
    allow_all: bool = False
    forbidden: frozenset[tuple[IPAddress, int]] = frozenset()

    def refusal(self, ip: IPAddress, port: int | None) -> str | None:
        """Why a connection to ``ip``:``port`` is refused, or None when it is allowed."""
        forms = [ip] + [v4 for v4 in (embedded_ipv4(ip),) if v4 is not None]
        if port is not None and any((form, port) in self.forbidden for form in forms):
            return "it is the OpenSearch cluster memproxy stores its data in"
        if self.allow_all:
            return None
        kind = classify(ip)
        if kind is None:
            return None
        if any(form.version == n.version and form in n for form in forms for n in self.allowed):
            return None
        return (
            f"{ip} is a {kind} address, which memproxy does not call for a registered model unless "
            "--allow-private-model-endpoints names it"
        )

    def socket_factory(self, addr_info: AddrInfo) -> socket.socket:
        """aiohttp's ``TCPConnector(socket_factory=...)``: the socket for one resolved address, or
        :class:`RefusedAddress` when the policy refuses it (nothing is connected then)."""
        family, type_, proto, _, sockaddr = addr_info
        host, port = str(sockaddr[0]), int(sockaddr[1])
        ip = ipaddress.ip_address(host.split("%", 1)[0])
        reason = self.refusal(ip, port)
        if reason is not None:
            raise RefusedAddress(reason)
        return socket.socket(family=family, type=type_, proto=proto)

    def with_forbidden(self, hosts: Iterable[tuple[str, int]]) -> AddressPolicy:
        """This policy also refusing every address the (host, port) pairs resolve to now (the cluster's)."""
        pairs = set(self.forbidden)
        for host, port in hosts:
            literal = literal_ip(host)
            if literal is not None:
                pairs.add((literal, port))
                continue
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError:
                continue  # unresolvable now: the cluster cannot be reached at that name either
            for info in infos:
                pairs.add((ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]), port))
        return AddressPolicy(self.allowed, self.allow_all, frozenset(pairs))


# Every address: the default of a bare ProviderClient (tests, tools). The registry always passes its own.
OPEN = AddressPolicy(allow_all=True)
