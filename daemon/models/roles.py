"""Model roles: each role (trunk, summariser, recall planner, …) names a provider and model.

`ModelRoles` is what every system calls. It builds one provider instance per provider
kind, records every call's usage in the ledger, and enforces the daily spend cap:
non-essential roles stop at the soft limit; essential ones (the trunk) at the cap itself.
Provider "auto" means Anthropic when its API key is present, otherwise the offline model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio

from daemon.log import get_logger
from daemon.models.base import (
    Completed,
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    SpendCapReached,
    StreamEvent,
    SystemBlock,
    Task,
    ToolSpec,
)
from daemon.models.ledger import UsageLedger
from daemon.settings import RoleModel, Settings, secret
from daemon.store.errors import storage_failure

log = get_logger("models")

ROLES = (
    "trunk",
    "summariser",
    "recall_planner",
    "recall_synthesis",
    "delegate",
    "dreams",
    "heartbeat",
)


def resolve_provider(
    role: RoleModel, settings: Settings, environ: dict[str, str] | None = None
) -> str:
    if role.provider != "auto":
        return role.provider
    return "anthropic" if secret(settings.providers.anthropic.api_key_env, environ) else "offline"


def build_provider(kind: str, settings: Settings, environ: dict[str, str] | None = None) -> Model:
    """Construct a provider instance from settings (API keys from the environment)."""
    if kind == "anthropic":
        from daemon.models.anthropic import AnthropicModel

        key = secret(settings.providers.anthropic.api_key_env, environ)
        if not key:
            raise ModelError(
                f"the Anthropic provider needs an API key in ${settings.providers.anthropic.api_key_env}"
            )
        return AnthropicModel(settings.providers.anthropic, api_key=key)
    if kind == "openai":
        from daemon.models.openai_compat import OpenAICompatModel

        return OpenAICompatModel(
            settings.providers.openai,
            api_key=secret(settings.providers.openai.api_key_env, environ),
        )
    if kind == "offline":
        from daemon.models.offline import OfflineModel

        return OfflineModel()
    raise ValueError(f"unknown provider {kind!r}")


class ModelRoles:
    """The gateway every system uses to call a model for a role.

    Use as an async context manager; providers are closed on exit. `overrides` maps a
    provider kind (or a role name) to a ready instance — tests pass scripted models here.
    """

    def __init__(
        self,
        settings: Settings,
        ledger: UsageLedger | None,
        *,
        overrides: dict[str, Model] | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self._overrides = dict(overrides or {})
        self._environ = environ
        self._providers: dict[str, Model] = {}
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> ModelRoles:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for provider in self._providers.values():
            try:
                await provider.aclose()
            except Exception as err:
                log.warning("provider close failed", provider=provider.provider, error=repr(err))
        self._providers.clear()

    def config(self, role: str) -> RoleModel:
        cfg: RoleModel = getattr(self.settings.models, role)
        return cfg

    def provider_kind(self, role: str) -> str:
        if role in self._overrides:
            return self._overrides[role].provider
        return resolve_provider(self.config(role), self.settings, self._environ)

    def model_for(self, role: str) -> Model:
        if role in self._overrides:
            return self._overrides[role]
        kind = resolve_provider(self.config(role), self.settings, self._environ)
        if kind in self._overrides:
            return self._overrides[kind]
        if kind not in self._providers:
            self._providers[kind] = build_provider(kind, self.settings, self._environ)
        return self._providers[kind]

    def max_tokens(self, role: str) -> int:
        """The longest reply `role` may produce (what a request must leave room for)."""
        return self.config(role).max_tokens

    def model_name(self, role: str) -> str:
        model = self.model_for(role)
        if model.provider == "offline":
            return "offline"
        return self.config(role).model

    def request(
        self,
        role: str,
        *,
        messages: tuple[Message, ...] | list[Message],
        system: tuple[SystemBlock, ...] | list[SystemBlock] = (),
        tools: tuple[ToolSpec, ...] = (),
        task: Task = "chat",
        max_tokens: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ModelRequest:
        cfg = self.config(role)
        return ModelRequest(
            model=self.model_name(role),
            messages=tuple(messages),
            system=tuple(system),
            tools=tools,
            max_tokens=max_tokens or cfg.max_tokens,
            temperature=cfg.temperature,
            task=task,
            role=role,
            metadata=metadata or {},
        )

    async def check_cap(self, role: str) -> None:
        """Raise SpendCapReached when today's spend forbids a call for `role`."""
        if self.ledger is None:
            return
        ok, reason = await self.ledger.allows(essential=self.config(role).essential)
        if not ok:
            raise SpendCapReached(reason)

    async def stream(
        self, request: ModelRequest, *, session_id: str | None = None, turn_id: str | None = None
    ) -> AsyncIterator[StreamEvent]:
        """Stream a request for `request.role`, recording usage when it completes."""
        await self.check_cap(request.role)
        model = self.model_for(request.role)
        events = model.stream(request)
        try:
            while True:
                try:
                    event = await anext(events)
                except StopAsyncIteration:
                    break
                except ModelError:
                    raise
                except Exception as exc:
                    if storage_failure(exc) is not None:
                        raise  # the home's disk, not the model: the caller keeps the work
                    # A provider must never take its caller down: whatever it raised ends
                    # this call as a model error that may be retried.
                    log.error(
                        "model provider failed",
                        role=request.role,
                        provider=model.provider,
                        error=f"{type(exc).__name__}: {exc}",
                        exc_info=exc,
                    )
                    raise ModelError(
                        f"{model.provider} failed ({type(exc).__name__}: {exc})", retryable=True
                    ) from exc
                if isinstance(event, Completed) and self.ledger is not None:
                    await self.ledger.record(
                        role=request.role,
                        provider=event.response.provider,
                        model=event.response.model,
                        usage=event.response.usage,
                        session_id=session_id,
                        turn_id=turn_id,
                    )
                yield event
        finally:
            # When our caller stops early, the provider's HTTP stream closes now, not at GC.
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()

    async def complete(
        self, request: ModelRequest, *, session_id: str | None = None, turn_id: str | None = None
    ) -> ModelResponse:
        final: ModelResponse | None = None
        async for event in self.stream(request, session_id=session_id, turn_id=turn_id):
            if isinstance(event, Completed):
                final = event.response
        assert final is not None, "providers always end a stream with Completed"
        return final
