"""Incoming-request dispatch through jsonrpcserver. The only module that imports it.

jsonrpcserver's whole-message entry points (``async_dispatch``) hard-code ``asyncio.gather``,
so we use its per-request building blocks, which run on any anyio backend: ``create_request``,
``dispatch_request`` (method lookup, call, error capture) and ``to_response`` /
``to_serializable``. Envelope checks happen earlier, in :mod:`acp_bridge.wire.jsonrpc`, where the
-32600 can carry the id we read; jsonrpcserver's own schema check is therefore not used.

We always pass jsonrpcserver empty params and the :class:`Request` as its "context" argument, so
its per-call argument binding is trivial; the handler receives the params itself. Once
jsonrpcserver has looked a registered method up and accepted its arguments (the first call),
later calls go straight to the handler, and a result is framed as jsonrpcserver's own
``serialize_success`` frames it (``{"jsonrpc", "result", "id"}``); errors still go through
jsonrpcserver's result and response types. Its per-call wrapping (an ``Either``, two named
tuples and a dict per answer) cost about 11 µs of the 12 a small request's dispatch took.

A handler takes the request's params (a dict, a list, or None) and returns the result, or raises
:class:`RpcError`. A pydantic ``ValidationError`` becomes -32602; any other exception becomes
-32603 naming only the exception type, since exception text may hold paths or secrets (the
traceback is logged on our side).

jsonrpcserver is imported when the first request arrives, not when handlers are registered: it
pulls in jsonschema (about 0.3 s), which must not be paid by ``import acp_bridge``, by
``acp-bridge --help``, nor by a one-shot turn whose agent never asks the client anything.
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

__all__ = ["OtherRequestHandler", "RequestDispatcher", "RequestHandler"]

log = logging.getLogger(__name__)

RequestHandler = Callable[[Any], Awaitable[Any]]
"""``async def handler(params) -> result``; raise :class:`RpcError` to answer with an error."""
OtherRequestHandler = Callable[[str, Any], Awaitable[Any]]
"""``async def handler(method, params) -> result`` for methods with no handler of their own;
raise :class:`LookupError` to answer -32601 (method not found) as if there were none."""


@functools.cache
def _jsonrpcserver() -> tuple[ModuleType, ModuleType, ModuleType, Any]:
    from jsonrpcserver import async_dispatcher, dispatcher, response, result
    from oslash.either import Right

    return async_dispatcher, dispatcher, response, (result, Right)


class RequestDispatcher:
    """The handlers of one peer, served through jsonrpcserver.

    Each handler is wrapped once, at registration, in an adapter that jsonrpcserver calls with
    the :class:`Request` as its context argument; the adapter hands the handler the original
    params, so camelCase keys and ``_meta`` arrive untouched. The adapters carry a ready-made
    ``__signature__``, which spares jsonrpcserver an ``inspect.signature`` walk per call.
    """

    def __init__(self) -> None:
        self._methods: dict[str, Callable[..., Awaitable[Any]]] = {}
        self._handlers: dict[str, RequestHandler] = {}
        self._routes: dict[str, Any] = {}
        self.other: OtherRequestHandler | None = None
        """Serves the methods with no handler of their own (a relay); None: -32601."""

    def __contains__(self, method: str) -> bool:
        return method in self._methods

    def register(self, method: str, handler: RequestHandler) -> None:
        self._methods[method] = _adapt(handler, method)
        self._handlers[method] = handler
        self._routes.pop(method, None)

    async def dispatch(self, request: Request) -> dict[str, Any]:
        """Run the handler for ``request``; return the complete JSON-RPC response object.

        An unknown method is answered -32601 by jsonrpcserver's own lookup. For a registered
        method, jsonrpcserver's lookup and argument check (``dispatch_request`` minus the
        call) give the same answer every time, since we always pass the same empty params and
        adapter: it runs once and its outcome is kept (one entry per registered method, so
        the cache is bounded by our own registrations; unknown names are never kept). From
        then on the handler is called directly (see the module docstring).
        """
        server_request = self._routes.get(request.method)
        if server_request is not None:
            try:
                value = await self._handlers[request.method](request.params)
            except Exception as exc:
                return _framed(server_request, _error_result(exc, request.method), request)
            return {"jsonrpc": "2.0", "result": value, "id": request.id}
        async_dispatcher, dispatcher, _, _ = _jsonrpcserver()
        server_request = dispatcher.create_request(
            {"method": request.method, "params": [], "id": 0}
        )
        if self.other is not None and request.method not in self._methods:
            try:
                value = await self.other(request.method, request.params)
            except LookupError:
                pass  # not served: -32601, as jsonrpcserver's lookup answers below
            except Exception as exc:
                return _framed(server_request, _error_result(exc, request.method), request)
            else:
                return {"jsonrpc": "2.0", "result": value, "id": request.id}
        _, outcome = await async_dispatcher.dispatch_request(
            self._methods, request, server_request
        )
        if request.method in self._methods:
            self._remember_route(request.method, server_request)
        return _framed(server_request, outcome, request)

    def _remember_route(self, method: str, server_request: Any) -> None:
        _, dispatcher, _, (_result, right) = _jsonrpcserver()
        looked_up = dispatcher.get_method(self._methods, method).bind(
            functools.partial(dispatcher.validate_args, server_request, None)
        )
        if isinstance(looked_up, right):
            self._routes[method] = server_request


def _framed(server_request: Any, outcome: Any, request: Request) -> dict[str, Any]:
    """jsonrpcserver's response object for its ``outcome`` of ``request``."""
    _, dispatcher, response, _ = _jsonrpcserver()
    serializable: dict[str, Any] = response.to_serializable(
        dispatcher.to_response(server_request, outcome)
    )
    serializable["id"] = request.id  # ids may be null, which jsonrpcserver reserves
    return serializable


_ADAPTER_SIGNATURE = inspect.Signature(
    [inspect.Parameter("request", inspect.Parameter.POSITIONAL_ONLY)]
)


def _adapt(handler: RequestHandler, method: str) -> Callable[..., Awaitable[Any]]:
    async def call_handler(request: Request) -> Any:
        _, _, _, (result, _) = _jsonrpcserver()  # cached; imported by the first request
        try:
            value = await handler(request.params)
        except Exception as exc:
            return _error_result(exc, method)
        return result.Success(value)

    call_handler.__signature__ = _ADAPTER_SIGNATURE  # type: ignore[attr-defined]
    return call_handler


def _error_result(exc: Exception, method: str) -> Any:
    """The jsonrpcserver error result a handler's exception is answered with."""
    _, _, _, (result, _) = _jsonrpcserver()
    if isinstance(exc, RpcError):
        if exc.data is None:  # omit "data" rather than send null
            return result.Error(exc.code, exc.message)
        return result.Error(exc.code, exc.message, exc.data)
    if isinstance(exc, pydantic.ValidationError):
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        return result.InvalidParams(_plain(errors))
    log.exception("handler for %s failed", method)
    return result.Error(-32603, "Internal error", type(exc).__name__)


def _plain(errors: Any) -> list[dict[str, Any]]:
    """pydantic error dicts with JSON-safe locations and messages only."""
    return [
        {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg", ""))}
        for error in errors
    ]
