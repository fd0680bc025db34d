"""One model request, streamed through ``litellm.acompletion(stream=True)``.

:meth:`ModelClient.complete` forwards text and reasoning deltas as they arrive, gathers the tool
calls (their arguments arrive in pieces, keyed by index) and the usage of the final chunk, and
turns provider failures into :class:`~acp_bridge.errors.RpcError` (:mod:`.provider_errors`).
A rate-limited request that has streamed nothing yet is retried with doubling backoff, at most
``max_rate_limit_retries`` times; the waits are plain sleeps, so a cancel ends them at once.
"""

from __future__ import annotations

import importlib.util
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from acp_bridge.agents.config import AgentConfig
from acp_bridge.agents.mock_provider import PROVIDER as MOCK_PROVIDER
from acp_bridge.agents.provider_errors import is_rate_limit, to_rpc_error
from acp_bridge.agents.runtime import LiteLLM
from acp_bridge.errors import ErrorCode, RpcError
from acp_bridge.version import agent_extra_install

__all__ = ["ModelClient", "ModelReply", "TokenUsage", "ToolCallRequest"]

log = logging.getLogger(__name__)

TextSink = Callable[[str], Awaitable[None]]


@dataclass
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    thought_tokens: int = 0
    cached_read_tokens: int = 0


@dataclass
class ToolCallRequest:
    id: str
    name: str
    arguments: str = ""


@dataclass
class ModelReply:
    text: str = ""
    thought: str = ""
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    finish_reason: str | None = None
    usage: TokenUsage | None = None

    def as_message(self) -> dict[str, Any]:
        """The assistant message to keep in the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments or "{}"},
                }
                for call in self.tool_calls
            ]
        return message


class _Streamed(Exception):
    """A failure after output reached the client: never retried."""


class ModelClient:
    def __init__(self, litellm: LiteLLM, config: AgentConfig) -> None:
        self._litellm = litellm
        self._config = config
        # litellm 1.106 imports its MCP gateway (and the optional ``mcp`` package) whenever
        # tools are passed; we never hand it MCP tools, so that path is skipped without it.
        self._skip_mcp = importlib.util.find_spec("mcp") is None

    async def module(self) -> Any:
        """litellm, once imported; a failed import is a clear error, not a traceback."""
        try:
            return await self._litellm.get()
        except Exception as exc:
            raise RpcError(
                ErrorCode.INTERNAL_ERROR,
                f"litellm could not be imported ({type(exc).__name__}: {exc}); reinstall the "
                f"agent extra: {agent_extra_install()}",
                {"kind": "internal", "retryable": False},
            ) from exc

    def provider_model(self, model: str) -> str:
        """The model string litellm is called with."""
        return f"{MOCK_PROVIDER}/{model}" if self._config.mock_script is not None else model

    async def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: TextSink,
        on_thought: TextSink,
    ) -> ModelReply:
        litellm = await self.module()
        attempt = 0
        while True:
            reply = ModelReply()
            try:
                await self._stream(litellm, model, messages, tools, reply, on_text, on_thought)
                return reply
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                streamed = bool(reply.text or reply.thought)
                if (
                    is_rate_limit(exc)
                    and not streamed
                    and attempt < self._config.max_rate_limit_retries
                ):
                    delay = min(
                        self._config.retry_base_delay_s * 2**attempt,
                        self._config.retry_max_delay_s,
                    )
                    attempt += 1
                    log.warning("%s rate-limited; retry %d in %.2f s", model, attempt, delay)
                    await anyio.sleep(delay)
                    continue
                if not _is_litellm_error(exc):
                    log.exception("model request to %s failed", model)
                raise to_rpc_error(exc, model) from exc

    async def _stream(
        self,
        litellm: Any,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        reply: ModelReply,
        on_text: TextSink,
        on_thought: TextSink,
    ) -> None:
        kwargs: dict[str, Any] = {
            "model": self.provider_model(model),
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            kwargs["tools"] = tools
            if self._skip_mcp:
                kwargs["_skip_mcp_handler"] = True
        if self._config.mock_response is not None and self._config.mock_script is None:
            kwargs["mock_response"] = self._config.mock_response
        stream = await litellm.acompletion(**kwargs)
        calls: dict[int, ToolCallRequest] = {}
        async for chunk in stream:
            usage = getattr(chunk, "usage", None)
            if usage is not None:
                reply.usage = _usage(usage)
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            if choice.finish_reason:
                reply.finish_reason = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            thought = getattr(delta, "reasoning_content", None)
            if thought:
                reply.thought += thought
                await on_thought(thought)
            if delta.content:
                reply.text += delta.content
                await on_text(delta.content)
            for piece in getattr(delta, "tool_calls", None) or ():
                _merge_tool_call(calls, piece)
        reply.tool_calls = [calls[i] for i in sorted(calls) if calls[i].name]


def _merge_tool_call(calls: dict[int, ToolCallRequest], piece: Any) -> None:
    index = getattr(piece, "index", None) or 0
    call = calls.setdefault(index, ToolCallRequest(id="", name=""))
    if getattr(piece, "id", None):
        call.id = piece.id
    function = getattr(piece, "function", None)
    if function is not None:
        if getattr(function, "name", None):
            call.name = function.name
        if getattr(function, "arguments", None):
            call.arguments += function.arguments
    if not call.id:  # some providers stream no id: ACP needs one unique in the session
        call.id = f"call_{uuid.uuid4().hex[:12]}"


def _usage(usage: Any) -> TokenUsage:
    details = getattr(usage, "completion_tokens_details", None)
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    return TokenUsage(
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        thought_tokens=int(getattr(details, "reasoning_tokens", 0) or 0),
        cached_read_tokens=int(getattr(prompt_details, "cached_tokens", 0) or 0),
    )


def _is_litellm_error(exc: BaseException) -> bool:
    return any(cls.__module__.startswith("litellm") for cls in type(exc).__mro__)
