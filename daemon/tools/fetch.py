"""`fetch_url`: a public web page, plain text or JSON, read as text the model can use.

One GET through httpx with the network guard under every connection (daemon/tools/netguard.py),
redirects followed here one hop at a time so each new URL is checked again (its scheme here,
its addresses by the guard when the hop connects). Everything is bounded: the whole fetch by
`timeout_s`, the body by `max_bytes` (read as a stream and stopped), the text by `max_chars`.
HTML becomes readable text through trafilatura, with a plain tag-stripped text when extraction
finds nothing. What comes back is data from the page, never instructions: the result opens
with a line saying where it came from, and the registry labels it tool output.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from daemon.settings import FetchSettings
from daemon.tools.netguard import NetworkGuard
from daemon.tools.registry import ToolError

if TYPE_CHECKING:
    import httpx

# httpx (and the guarded transport under it) is imported at the first fetch, not when the
# daemon builds its tools: with httpcore and what they find installed it is ~180 modules
# and ~0.16 CPU-seconds that a daemon nobody asks to fetch never needs.

_SCHEMES = ("http", "https")
# An HTTP error's body is shown only this far: enough to read what went wrong.
_ERROR_BODY_CHARS = 2_000
_USER_AGENT = "Reverie (fetch_url)"
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5"
_HTML_TYPES = {"text/html", "application/xhtml+xml"}
_TEXT_APPLICATION_TYPES = {
    "application/json",
    "application/xml",
    "application/javascript",
    "application/ecmascript",
    "application/x-ndjson",
    "application/yaml",
    "application/x-yaml",
    "application/toml",
    "application/sql",
    "application/graphql",
}
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


def _kind(mime: str) -> str | None:
    """ "html", "text", or None for a type fetch_url does not read."""
    if mime in _HTML_TYPES:
        return "html"
    if mime.startswith("text/") or mime in _TEXT_APPLICATION_TYPES:
        return "text"
    if mime.endswith("+json") or mime.endswith("+xml"):
        return "text"
    return None


def _sniff(body: bytes) -> str | None:
    """The kind of a body served without a content type: HTML, text, or binary (None)."""
    head = body[:1024].lower()
    if b"<html" in head or b"<!doctype html" in head:
        return "html"
    return None if b"\x00" in head else "text"


def checked_url(url: str | httpx.URL) -> httpx.URL:
    """`url` parsed, refused with a ToolError unless it is an http(s) URL with a host."""
    import httpx

    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url.strip())
    except (httpx.InvalidURL, ValueError) as exc:
        raise ToolError(f"not a valid URL: {url!r} ({exc})") from exc
    if parsed.scheme not in _SCHEMES:
        scheme = parsed.scheme or "no scheme"
        raise ToolError(
            f"refused: {str(url)[:200]!r} uses {scheme}; fetch_url reads http and https URLs only"
        )
    if not parsed.host:
        raise ToolError(f"not a valid URL: {str(url)[:200]!r} has no host")
    return parsed


@dataclass
class Page:
    """One fetched response, read as far as the limits allow."""

    requested: str
    url: str
    status: int
    reason: str
    mime: str
    content_type: str
    charset: str | None
    body: bytes = b""
    cut_at_bytes: bool = False
    redirects: list[str] = field(default_factory=list)


class _TextStripper(HTMLParser):
    """Visible text of an HTML document: tags dropped, scripts and styles skipped."""

    _SKIP: ClassVar = frozenset({"script", "style", "noscript", "template", "svg", "head"})
    _BLOCK: ClassVar = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skipping:
            self._skipping -= 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line)


def stripped_text(html: str) -> str:
    """The visible text of `html`, tags removed (the fallback when extraction finds nothing)."""
    stripper = _TextStripper()
    stripper.feed(html)
    stripper.close()
    return stripper.text()


def readable_text(html: str, url: str) -> str:
    """The main text of an HTML page (trafilatura), or its stripped text when that is empty.

    CPU-bound: callers run it in a worker thread.
    """
    # Imported here: trafilatura pulls in lxml and friends, which the daemon need not load
    # before the first page is fetched.
    import trafilatura

    text = trafilatura.extract(
        html, url=url, include_links=False, include_comments=False, include_images=False
    )
    return text.strip() if text and text.strip() else stripped_text(html)


def _decode(page: Page) -> str:
    charset = page.charset
    if charset is None and page.mime in _HTML_TYPES:
        found = _META_CHARSET.search(page.body[:4096])
        charset = found.group(1).decode("ascii") if found else None
    try:
        return page.body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return page.body.decode("utf-8", errors="replace")


class PageFetcher:
    """Fetches one URL under the guard and the `[tools.fetch]` limits."""

    def __init__(self, config: FetchSettings, guard: NetworkGuard | None = None) -> None:
        self.config = config
        self.guard = guard or NetworkGuard(config.allow_hosts)
        self._tls: ssl.SSLContext | None = None

    def _tls_context(self) -> ssl.SSLContext:
        # Built at the first fetch, not when the daemon starts, and shared by every fetch after.
        if self._tls is None:
            from daemon.tools.guarded_http import verifying_context

            self._tls = verifying_context()
        return self._tls

    async def fetch(self, url: str) -> Page:
        """GET `url`, following redirects (each hop checked), body read up to max_bytes.

        Raises ToolError for what the model should read (refusals, DNS, connection and TLS
        failures, the time limit); cancellation propagates and closes the connection.
        """
        start = checked_url(url)
        try:
            with anyio.fail_after(self.config.timeout_s):
                return await self._fetch(start)
        except TimeoutError as exc:
            raise ToolError(
                f"fetching {url} timed out after {self.config.timeout_s:g}s (the whole fetch)"
            ) from exc

    async def _fetch(self, start: httpx.URL) -> Page:
        import httpx

        from daemon.tools.guarded_http import GuardedTransport

        redirects: list[str] = []
        current = start
        async with httpx.AsyncClient(
            transport=GuardedTransport(self.guard, self._tls_context()),
            follow_redirects=False,
            # Nothing from the environment: no .netrc credentials sent to whatever a page names.
            # (Environment proxies are never used with an explicit transport; a proxy would
            # take the connection to its own address, out of the guard's sight.)
            trust_env=False,
            timeout=self.config.timeout_s,
            headers={"User-Agent": _USER_AGENT, "Accept": _ACCEPT},
        ) as client:
            while True:
                try:
                    async with client.stream("GET", current) as response:
                        location = response.headers.get("location")
                        if response.is_redirect and location:
                            if len(redirects) >= self.config.max_redirects:
                                raise ToolError(
                                    f"too many redirects: {start} redirected more than "
                                    f"{self.config.max_redirects} times (last to {location[:200]})"
                                )
                            redirects.append(str(current))
                            current = checked_url(current.join(location))
                            continue
                        return await self._read(response, start, current, redirects)
                except httpx.TimeoutException as exc:
                    raise TimeoutError from exc
                except httpx.ConnectError as exc:
                    raise ToolError(f"could not connect to {current.host}: {exc}") from exc
                except httpx.HTTPError as exc:
                    raise ToolError(
                        f"fetching {current} failed: {exc or type(exc).__name__}"
                    ) from exc

    async def _read(
        self, response: httpx.Response, start: httpx.URL, final: httpx.URL, redirects: list[str]
    ) -> Page:
        content_type = response.headers.get("content-type", "")
        mime = content_type.split(";", 1)[0].strip().lower()
        page = Page(
            requested=str(start),
            url=str(final),
            status=response.status_code,
            reason=response.reason_phrase,
            mime=mime,
            content_type=content_type[:120],  # shown in the header line
            charset=response.charset_encoding,
            redirects=redirects,
        )
        if mime and _kind(mime) is None:
            # Known binary: not a byte of the body is read.
            return page
        body = bytearray()
        limit = self.config.max_bytes
        # aiter_bytes yields decoded bytes (gzip undone), so the cap bounds what is held.
        async for chunk in response.aiter_bytes():
            room = limit - len(body)
            if len(chunk) > room:
                body += chunk[:room]
                page.cut_at_bytes = True
                break
            body += chunk
        page.body = bytes(body)
        return page

    async def render(self, page: Page, *, raw: bool) -> str:
        """The result the model reads: one header line, then the page's text."""
        kind = _kind(page.mime) if page.mime else _sniff(page.body)
        notes = [f"{page.status} {page.reason}".strip(), page.content_type or "no content type"]
        if page.redirects:
            notes.append(f"redirected from {page.requested}")
        failed = page.status >= 400
        if kind is None:
            if not failed:
                raise ToolError(
                    f"{page.url} is {page.mime or 'binary data'}, not text; fetch_url reads "
                    "web pages, plain text and JSON"
                )
            text = ""
        elif kind == "html" and not raw:
            text = await anyio.to_thread.run_sync(readable_text, _decode(page), page.url)
        else:
            text = _decode(page)
        limit = _ERROR_BODY_CHARS if failed else self.config.max_chars
        if page.cut_at_bytes:
            notes.append(f"cut: body longer than {self.config.max_bytes} bytes")
        if len(text) > limit:
            notes.append(f"cut: {limit} of {len(text)} characters shown")
            text = text[:limit]
        if failed:
            notes.append("HTTP error")
        header = f"[fetch_url {page.url} — {' — '.join(notes)}]"
        return f"{header}\n\n{text}" if text else f"{header}\n\n(no readable text)"
