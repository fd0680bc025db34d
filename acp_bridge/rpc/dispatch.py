"""Incoming-request dispatch through jsonrpcserver. The only module that imports it.

jsonrpcserver's whole-message entry points (``async_dispatch``) hard-code ``asyncio.gather``,
so we use its per-request building blocks, which run on any anyio backend: ``create_request``,
``dispatch_request`` (method lookup, call, error capture) and ``to_response`` /
``to_serializable``. Envelope checks happen earlier, in :mod:`acp_bridge.wire.jsonrpc`, where the
-32600 can carry the id we read; jsonrpcserver's own schema check is therefore not used.

We always pass jsonrpcserver empty params and the :class:`Request` as its "context" argument, so
its per-call argument binding is trivial; the handler receives the params itself.

A handler takes the request's params (a dict, a list, or None) and returns the result, or raises
:class:`RpcError`. A pydantic ``ValidationError`` becomes -32602; any other exception becomes
-32603 naming only the exception type, since exception text may hold paths or secrets (the
traceback is logged on our side).

jsonrpcserver is imported on first use: it pulls in jsonschema (about 0.3 s), which must not be
paid by ``import acp_bridge`` or ``acp-bridge --help``.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import pydantic

from acp_bridge.errors import RpcError
from acp_bridge.wire.jsonrpc import Request

__all__ = ["RequestDispatcher", "RequestHandler"]

log = logging.getLogger(__name__)

RequestHandler = Callable[[Any], Awaitable[Any]]
"""``async def handler(params) -> result``; raise :class:`RpcError` to answer with an error."""


@functools.cache
def _jsonrpcserver() -> tuple[ModuleType, ModuleType, ModuleType, Any]:
    from jsonrpcserver import async_dispatcher, dispatcher, response, result
    from jsonrpcserver.sentinels import NOCONTEXT

    return async_dispatcher, dispatcher, response, (result, NOCONTEXT)


class RequestDispatcher:
    """The handlers of one peer, served through jsonrpcserver.

    Each handler is wrapped once, at registration, in an adapter that jsonrpcserver calls with
    the :class:`Request` as its context argument; the adapter hands the handler the original
    params, so camelCase keys and ``_meta`` arrive untouched. The adapters carry a ready-made
    ``__signature__``, which spares jsonrpcserver an ``inspect.signature`` walk per call.
    """

    def __init__(self) -> None:
        self._methods: dict[str, Callable[..., Awaitable[Any]]] = {}

    def __contains__(self, method: str) -> bool:
        return method in self._methods

    def register(self, method: str, handler: RequestHandler) -> None:
        self._methods[method] = _adapt(handler, method)

    async def dispatch(self, request: Request) -> dict[str, Any]:
        """Run the handler for ``request``; return the complete JSON-RPC response object.

        An unknown method is answered -32601 by jsonrpcserver's own lookup.
        """
        async_dispatcher, dispatcher, response, (_result, _nocontext) = _jsonrpcserver()
        server_request = dispatcher.create_request(
            {"method": request.method, "params": [], "id": 0}
        )
        _, outcome = await async_dispatcher.dispatch_request(self._methods, request, server_request)
        serializable: dict[str, Any] = response.to_serializable(
            dispatcher.to_response(server_request, outcome)
        )
        serializable["id"] = request.id  # ids may be null, which jsonrpcserver reserves
        return serializable


_ADAPTER_SIGNATURE = inspect.Signature(
    [inspect.Parameter("request", inspect.Parameter.POSITIONAL_ONLY)]
)


def _adapt(handler: RequestHandler, method: str) -> Callable[..., Awaitable[Any]]:
    _, _, _, (result, _) = _jsonrpcserver()

    async def call_handler(request: Request) -> Any:
        try:
            value = await handler(request.params)
        except RpcError as exc:
            if exc.data is None:  # omit "data" rather than send null
                return result.Error(exc.code, exc.message)
            return result.Error(exc.code, exc.message, exc.data)
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            return result.InvalidParams(_plain(errors))
        except Exception as exc:
            log.exception("handler for %s failed", method)
            return result.Error(-32603, "Internal error", type(exc).__name__)
        return result.Success(value)

    call_handler.__signature__ = _ADAPTER_SIGNATURE  # type: ignore[attr-defined]
    return call_handler


def _plain(errors: Any) -> list[dict[str, Any]]:
    """pydantic error dicts with JSON-safe locations and messages only."""
    return [
        {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg", ""))}
        for error in errors
    ]
