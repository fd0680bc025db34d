"""Incoming-request dispatch through jsonrpcserver. The only module that imports it.

jsonrpcserver's whole-message entry points (``async_dispatch``) hard-code ``asyncio.gather``,
so we use its per-request building blocks, which run on any anyio backend: ``create_request``,
``dispatch_request`` (method lookup, call, error capture) and ``to_response`` /
``to_serializable``. Envelope checks happen earlier, in :mod:`acp_bridge.wire.jsonrpc`, where the
-32600 can carry the id we read; jsonrpcserver's own schema check is therefore not used.

A handler takes the request's params (a dict, a list, or None) and returns the result, or raises
:class:`RpcError`. A pydantic ``ValidationError`` becomes -32602; any other exception becomes
-32603 naming only the exception type, since exception text may hold paths or secrets (the
traceback is logged on our side).

jsonrpcserver is imported on first use: it pulls in jsonschema (about 0.3 s), which must not be
paid by ``import acp_bridge`` or ``acp-bridge --help``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any

import pydantic

from acp_bridge.errors import RpcError
from acp_bridge.wire.jsonrpc import Request

__all__ = ["RequestHandler", "dispatch_request"]

log = logging.getLogger(__name__)

RequestHandler = Callable[[Any], Awaitable[Any]]
"""``async def handler(params) -> result``; raise :class:`RpcError` to answer with an error."""


@functools.cache
def _jsonrpcserver() -> tuple[ModuleType, ModuleType, ModuleType, Any]:
    from jsonrpcserver import async_dispatcher, dispatcher, response, result
    from jsonrpcserver.sentinels import NOCONTEXT

    return async_dispatcher, dispatcher, response, (result, NOCONTEXT)


async def dispatch_request(
    handlers: Mapping[str, RequestHandler], request: Request
) -> dict[str, Any]:
    """Run the handler for ``request`` and return the complete JSON-RPC response object."""
    async_dispatcher, dispatcher, response, (result, nocontext) = _jsonrpcserver()
    handler = handlers.get(request.method)
    # jsonrpcserver looks the method up in this dict and answers -32601 itself when it is absent.
    methods = {} if handler is None else {request.method: _adapt(handler, request, result)}
    # Object params are spread as keyword arguments by jsonrpcserver; our adapter ignores them and
    # hands the handler the original params, so camelCase keys and ``_meta`` arrive untouched.
    server_request = dispatcher.create_request(
        {"method": request.method, "params": request.params or [], "id": 0}
    )
    _, outcome = await async_dispatcher.dispatch_request(methods, nocontext, server_request)
    serializable: dict[str, Any] = response.to_serializable(
        dispatcher.to_response(server_request, outcome)
    )
    serializable["id"] = request.id  # ids may be null, which jsonrpcserver reserves for "none"
    return serializable


def _adapt(
    handler: RequestHandler, request: Request, result: ModuleType
) -> Callable[..., Awaitable[Any]]:
    async def call_handler(*_args: Any, **_kwargs: Any) -> Any:
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
            log.exception("handler for %s failed", request.method)
            return result.Error(-32603, "Internal error", type(exc).__name__)
        return result.Success(value)

    return call_handler


def _plain(errors: Any) -> list[dict[str, Any]]:
    """pydantic error dicts with JSON-safe locations and messages only."""
    return [
        {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg", ""))}
        for error in errors
    ]
