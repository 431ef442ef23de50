"""The network guard: `fetch_url` reaches public hosts only, checked where the socket opens.

A URL names a host; what matters is the address the connection goes to. The guard resolves the
host once (every address it has), refuses the fetch when any of them is loopback, private,
link-local (the cloud metadata service lives at 169.254.169.254 and fd00:ec2::254), carrier-
grade NAT, unspecified, multicast, reserved or otherwise not public — IPv4 addresses wrapped in
IPv6 judged as the IPv4 address they carry — and then connects to exactly the address it
checked. Checking a name and letting the HTTP client resolve it again would leave a window in
which a hostile DNS server answers a public address to the check and 127.0.0.1 to the connect
(DNS rebinding).

How the connection reaches the checked address while TLS still speaks to the name: httpx
hands the TCP connect to httpcore's network backend as (host name, port), and only once that
stream is open does httpcore start TLS on it with `server_hostname` = the URL's host. The
`GuardedBackend` (daemon/tools/guarded_http.py, imported at the first fetch: httpx and
httpcore are ~180 modules a daemon that never fetches does not load) replaces that one step — resolve, check, connect to the checked IP — and
leaves everything above it alone: the Host header, SNI and the certificate check (against the
name, with the default verifying context) are exactly those of a normal httpx request, so an
https fetch is as strict as it would be without the guard. Every new connection goes through
the check, so every redirect hop to a new host is checked the same way.

`[tools.fetch] allow_hosts` exempts hosts on purpose (a service on the person's own network):
a name (`wiki.lan`), an address (`10.0.0.5`), a CIDR range (`10.0.0.0/8`), or a name or
address with a port (`127.0.0.1:8080`, `[::1]:8080`) that exempts only that port.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

import anyio

from daemon.log import get_logger
from daemon.tools.registry import ToolError

log = get_logger("tools.netguard")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) -> every address the host has, as strings.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

_CARRIER_GRADE_NAT = ipaddress.IPv4Network("100.64.0.0/10")
# RFC 6052's well-known NAT64 prefix: the last 32 bits are an IPv4 address.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class AddressRefused(ToolError):
    """The host resolves to an address a fetch may not reach."""


class HostUnresolved(ToolError):
    """The host name has no address."""


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, NAT64, 6to4), if it carries one."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def non_public_reason(address: IPAddress) -> str | None:
    """Why `address` is not a public internet address ("loopback", …), or None when it is."""
    inner = _embedded_ipv4(address)
    if inner is not None:
        why = non_public_reason(inner)
        if why is not None:
            return f"{why} (IPv4 {inner} inside IPv6)"
        if isinstance(address, ipaddress.IPv6Address) and (
            address.ipv4_mapped is not None or address in _NAT64
        ):
            # The wrapper itself is in ::/8, which the ipaddress module counts as reserved; the
            # IPv4 address it carries is the one the packets reach.
            return None
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local (where cloud metadata services answer)"
    if address in _CARRIER_GRADE_NAT:
        return "carrier-grade NAT"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    if not address.is_global:
        return "non-public"
    return None


@dataclass(frozen=True)
class _Exemption:
    name: str | None = None
    network: IPNetwork | None = None
    port: int | None = None

    def covers(self, host: str, port: int, address: IPAddress) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.name is not None:
            return self.name == host
        assert self.network is not None
        inner = _embedded_ipv4(address)
        return address in self.network or (inner is not None and inner in self.network)


def _normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


def _exemption(entry: str) -> _Exemption:
    text = entry.strip()
    port: int | None = None
    bracketed = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?", text)
    if bracketed:
        text, port = bracketed.group(1), int(bracketed.group(2)) if bracketed.group(2) else None
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
        if port_text.isdigit():
            text, port = host, int(port_text)
    try:
        return _Exemption(network=ipaddress.ip_network(text, strict=False), port=port)
    except ValueError:
        return _Exemption(name=_normal_host(text), port=port)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address of `host` from the system resolver (run off the event loop by anyio)."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class NetworkGuard:
    """Resolves a host once and refuses it unless every address is public or exempted."""

    def __init__(self, allow_hosts: Iterable[str] = (), *, resolver: Resolver | None = None):
        self._exemptions = tuple(_exemption(e) for e in allow_hosts if e.strip())
        self._resolve = resolver or system_resolve

    def exempt(self, host: str, port: int, address: IPAddress) -> bool:
        """Whether `allow_hosts` names this host, this address or a range holding it."""
        name = _normal_host(host)
        return any(e.covers(name, port, address) for e in self._exemptions)

    async def addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for `host`, each checked; AddressRefused/HostUnresolved.

        An address literal is checked as it is (no lookup); a name is resolved once and refused
        when any of its addresses is not public and not exempted, so a name cannot slip a
        private address in among public ones.
        """
        found: Sequence[str]
        if _is_address(host):
            found = [host]
        else:
            try:
                found = await self._resolve(host, port)
            except socket.gaierror as exc:
                raise HostUnresolved(f"could not resolve host {host!r}: {exc.strerror}") from exc
            if not found:
                raise HostUnresolved(f"could not resolve host {host!r}: no addresses")
        unique = list(dict.fromkeys(found))
        for text in unique:
            address = ipaddress.ip_address(text.split("%", 1)[0])
            why = non_public_reason(address)
            if why is not None and not self.exempt(host, port, address):
                shown = host if host == text else f"{host} ({text})"
                raise AddressRefused(
                    f"refused: {shown} is a {why} address; fetch_url reaches public hosts only "
                    "(a host the person trusts can be listed in [tools.fetch] allow_hosts)"
                )
        return unique
