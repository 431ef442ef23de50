"""Mask secrets before anything the journal writes reaches a file, the index or the context.

A transcript can hold a pasted API key or a password; the journal repeats what happened, so
it must not repeat those. The default patterns cover the common shapes (Anthropic, OpenAI,
AWS, GitHub and Slack keys, bearer tokens, `password=` / `password:` / `password is`
assignments, private key blocks); `journal.redact_patterns` adds more. A match is replaced by
`[redacted:<kind>]`, so a reader knows something was there without learning what.

What the person asked to keep is kept (docs/trust.md, "Secrets"): a named secret told in the
conversation and stored as a fact ("remember that the guest wifi password is …") is a value
the person chose to give their agent, so the files written from the day (session summaries,
`WAKE.md`, dream entries) repeat it (`keep`). A key-shaped secret — an API key, a token, a
private key — is masked everywhere, in a fact too (`withhold`), and so is a named secret in
untrusted words (a tool's output — a file, a web page — or an import).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.settings import Settings

_SECRET_NAMES = (
    r"(?:password|passwd|pwd|passphrase|api[_-]?key|secret[_-]?key|client[_-]?secret|"
    r"access[_-]?token|auth[_-]?token|refresh[_-]?token)"
)
# (kind, pattern): order matters — the specific key shapes run before the generic ones, so an
# Anthropic key is reported as one and not as an OpenAI key.
DEFAULT_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "private-key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
    ),
    ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_\-]{16,}"),
    ("openai-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
    ("aws-key", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    ("aws-secret", r"(?i)\baws_secret_access_key\b\s*[=:]\s*['\"]?[A-Za-z0-9/+=]{40}['\"]?"),
    (
        "github-token",
        r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}\b|\bgithub_pat_[A-Za-z0-9_]{40,}\b",
    ),
    ("slack-token", r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    ("bearer-token", r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{16,}=*"),
    (
        "password",
        rf"(?i)\b{_SECRET_NAMES}\b\s*(?:=|:|\bis\b)\s*"
        r"(?:\"[^\"\n]+\"|'[^'\n]+'|[^\s,;]+)",
    ),
)


@dataclass(frozen=True, kw_only=True)
class Rule:
    kind: str
    pattern: re.Pattern[str]


class Redactor:
    """Mask every configured pattern in text; count what was masked.

    `keep`: values of named secrets the person asked to keep; a `password`-kind match whose
    value is one of them is left as it is (key-shaped and custom patterns are always masked).
    """

    def __init__(
        self, *, defaults: bool = True, extra: Sequence[str] = (), keep: Iterable[str] = ()
    ) -> None:
        rules = (
            [Rule(kind=k, pattern=re.compile(p)) for k, p in DEFAULT_PATTERNS] if defaults else []
        )
        rules += [Rule(kind="custom", pattern=re.compile(p)) for p in extra]
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.keep = frozenset(v for v in keep if v)
        self.masked = 0

    def mask(self, text: str) -> str:
        """`text` with every secret replaced by `[redacted:<kind>]`."""
        if not text:
            return text
        for rule in self.rules:
            text, n = rule.pattern.subn(self._replacement(rule), text)
            self.masked += n
        return text

    def withhold(self, text: str, *, named_too: bool) -> tuple[str, list[str]]:
        """`text` with its key-shaped secrets masked (and its named ones, `named_too`), and
        the kinds masked, each once: what a fact may not keep."""
        kinds: list[str] = []
        for rule in self.rules:
            if rule.kind == "password" and not named_too:
                continue
            text, n = rule.pattern.subn(self._replacement(rule), text)
            if n and rule.kind not in kinds:
                kinds.append(rule.kind)
        return text, kinds

    def _replacement(self, rule: Rule) -> str | Callable[[re.Match[str]], str]:
        if rule.kind == "password":
            # Keep the name so the entry still says what was set ("password=[redacted:password]").
            return self._keep_name
        return f"[redacted:{rule.kind}]"

    def _keep_name(self, found: re.Match[str]) -> str:
        head = _NAME.match(found.group(0))
        name = head.group(1) if head else ""
        if self.keep and _value(found.group(0)[len(name) :]) in self.keep:
            return found.group(0)  # the person asked to keep this very value
        return name + "[redacted:password]"

    def mask_all(self, items: Iterable[str]) -> list[str]:
        return [self.mask(i) for i in items]


_NAME = re.compile(rf"(?i)^(.*?\b{_SECRET_NAMES}\b\s*(?:=|:|\bis\b)\s*)")


_NAMED = re.compile(dict(DEFAULT_PATTERNS)["password"])


def _value(raw: str) -> str:
    """A named secret's value as compared with a kept one: quotes and closing stops aside."""
    return raw.strip(" \t\"'“”‘’«»()[].,;:!?")


def kept_secrets(texts: Iterable[str]) -> frozenset[str]:
    """The values of the named secrets in `texts` (the facts the person asked to keep)."""
    found: set[str] = set()
    for text in texts:
        for m in _NAMED.finditer(text):
            head = _NAME.match(m.group(0))
            value = _value(m.group(0)[len(head.group(1)) :] if head else "")
            if value:
                found.add(value)
    return frozenset(found)


def redactor_for(settings: Settings, *, keep: Iterable[str] = ()) -> Redactor:
    """The redactor the settings ask for (`journal.redact_defaults`, `journal.redact_patterns`).

    Every writer of a generated memory file uses it — journal entries and digests, session
    summaries, `WAKE.md`, dream entries — so a secret said in a conversation is not repeated
    into files that reach every future prompt. `keep`: the named secrets' values the person
    asked to keep (`kept_secrets` of their facts), repeated as they are.
    """
    return Redactor(
        defaults=settings.journal.redact_defaults,
        extra=settings.journal.redact_patterns,
        keep=keep,
    )
