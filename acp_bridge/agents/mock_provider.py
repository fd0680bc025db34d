"""The offline mock model, as a litellm custom provider registered at runtime.

``acp-mock/<model>`` streams what a :class:`~.mock_script.MockScript` says, through litellm's real
streaming path (``acompletion(stream=True)`` and its stream wrapper, which also counts the
tokens): the agent cannot tell it from a provider. ``<model>`` names the model whose context
window and prices apply. Imported only inside the agent process, after litellm.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import Any, Final

from acp_bridge.agents.mock_script import MockCall, MockScript

__all__ = ["CRASH_EXIT_STATUS", "PROVIDER", "register"]

log = logging.getLogger(__name__)

PROVIDER: Final = "acp-mock"
CRASH_EXIT_STATUS: Final = 70


def register(litellm: Any, script: MockScript) -> None:
    """Register the ``acp-mock`` provider answering from ``script``."""
    handler = _make_handler(litellm, script)
    litellm.custom_provider_map = [
        *[p for p in litellm.custom_provider_map if p.get("provider") != PROVIDER],
        {"provider": PROVIDER, "custom_handler": handler},
    ]


def _make_handler(litellm: Any, script: MockScript) -> Any:
    from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices

    def chunk(finish_reason: str | None = None, **delta: Any) -> Any:
        return ModelResponseStream(
            choices=[StreamingChoices(index=0, delta=Delta(**delta), finish_reason=finish_reason)]
        )

    class ScriptedModel(litellm.CustomLLM):  # type: ignore[misc]
        async def astreaming(
            self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any
        ) -> AsyncIterator[Any]:
            call, failures = script.choose(messages)
            if call.error_type is not None and failures < call.error_times:
                script.failed(messages)
                raise _provider_error(litellm, call, model)
            delay = call.delay_ms / 1000
            for word in _words(call.think):
                await _pause(delay)
                yield chunk(reasoning_content=word, role="assistant")
            for word in _words(call.say):
                await _pause(delay)
                yield chunk(content=word, role="assistant")
            for index, tool in enumerate(call.tools):
                yield chunk(
                    tool_calls=[
                        {
                            "index": index,
                            "id": f"call_{os.urandom(6).hex()}",
                            "type": "function",
                            "function": {
                                "name": tool.name,
                                "arguments": json.dumps(tool.arguments),
                            },
                        }
                    ]
                )
            _after_streaming(call)
            if call.hang:
                await asyncio.Event().wait()  # until the request is cancelled
            yield chunk(finish_reason="tool_calls" if call.tools else "stop")

    return ScriptedModel()


async def _pause(delay: float) -> None:
    await asyncio.sleep(delay)  # 0 still yields: cancellation lands between chunks


def _after_streaming(call: MockCall) -> None:
    if call.crash:
        log.warning("mock script: crashing the agent on request (exit %d)", CRASH_EXIT_STATUS)
        sys.stderr.flush()
        os._exit(CRASH_EXIT_STATUS)


def _words(text: str) -> list[str]:
    """Split into chunks that join back to ``text`` exactly (each word keeps its space)."""
    if not text:
        return []
    parts = text.split(" ")
    return [part + " " for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _provider_error(litellm: Any, call: MockCall, model: str) -> Exception:
    exceptions = litellm.exceptions
    message = call.error_message
    kind = call.error_type
    if kind == "rate_limit":
        return exceptions.RateLimitError(message, llm_provider=PROVIDER, model=model)  # type: ignore[no-any-return]
    if kind == "auth":
        return exceptions.AuthenticationError(message, llm_provider=PROVIDER, model=model)  # type: ignore[no-any-return]
    if kind == "context_window":
        return exceptions.ContextWindowExceededError(  # type: ignore[no-any-return]
            message, model=model, llm_provider=PROVIDER
        )
    if kind == "network":
        return exceptions.APIConnectionError(message, llm_provider=PROVIDER, model=model)  # type: ignore[no-any-return]
    return exceptions.BadRequestError(message, model=model, llm_provider=PROVIDER)  # type: ignore[no-any-return]
