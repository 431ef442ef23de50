"""httpx and httpcore under the network guard: the connect step of every fetch checked.

The guard's policy (which addresses are public, `allow_hosts`) is daemon/tools/netguard.py;
this module is the plumbing that puts it under httpx's own transport, and is imported at the
first fetch, not when the daemon starts (httpx and httpcore with what they find installed —
trio, h2, click — are ~180 modules).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from daemon.tools.netguard import AddressRefused, NetworkGuard


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the guard on the one step that opens a TCP connection."""

    def __init__(self, guard: NetworkGuard, inner: httpcore.AsyncNetworkBackend | None = None):
        self._guard = guard
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        failure: Exception | None = None
        for address in await self._guard.addresses(host, port):
            try:
                # The checked address, never `host` again: no second lookup to be rebound.
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise AddressRefused("refused: fetch_url does not open unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport (request mapping, errors, TLS context) over the guarded backend."""

    def __init__(self, guard: NetworkGuard, ssl_context: ssl.SSLContext) -> None:
        # No proxy: it would take the connection to the proxy's address, and the target's
        # address would never be checked here. `ssl_context` is built once by the caller
        # (loading the CA bundle costs tens of milliseconds) and used as is.
        super().__init__(verify=ssl_context, proxy=None, retries=0)
        # The pool is the one thing replaced: httpx builds it without a way to pass a network
        # backend, and everything the pool does above the TCP connect (TLS with SNI and
        # certificate verification against the URL's host) stays httpx's default.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context, network_backend=GuardedBackend(guard), retries=0
        )


def verifying_context() -> ssl.SSLContext:
    """httpx's default TLS context: certificates verified against the system's CA bundle."""
    return httpx.create_ssl_context()
