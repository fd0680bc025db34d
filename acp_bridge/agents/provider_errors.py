"""Provider failures as clear JSON-RPC errors, never tracebacks.

Every failure of a model request becomes an :class:`~acp_bridge.errors.RpcError` whose message
says what happened in words, with the provider's own message, and whose ``data`` says the kind
(``auth``, ``rate_limit``, ``context_window``, ``network``, ``bad_request``, ``provider``,
``internal``), the model and whether retrying later may help. Authentication failures use ACP's
``auth_required`` code (-32000); the rest are -32603. litellm is looked up by class name so
this module does not import it.
"""

from __future__ import annotations

from typing import Final

from acp_bridge.errors import ErrorCode, RpcError

__all__ = ["MAX_PROVIDER_MESSAGE", "is_rate_limit", "to_rpc_error", "unwrap"]

MAX_PROVIDER_MESSAGE: Final = 600
"""The provider's message is cut to this many characters (some echo whole requests)."""

# litellm exception class name -> (kind, what happened, retryable)
_KINDS: Final = (
    (
        "ContextWindowExceededError",
        "context_window",
        "the conversation no longer fits in the model's context window; start a new session",
        False,
    ),
    (
        "AuthenticationError",
        "auth",
        "the provider refused the credentials; set the provider's "
        "API key (e.g. OPENAI_API_KEY) and restart the agent",
        False,
    ),
    ("PermissionDeniedError", "auth", "the provider denied access to this model", False),
    (
        "RateLimitError",
        "rate_limit",
        "the provider kept rate-limiting the request; try again later",
        True,
    ),
    ("Timeout", "network", "the provider did not answer in time", True),
    ("APIConnectionError", "network", "the provider could not be reached", True),
    ("ServiceUnavailableError", "provider", "the provider is unavailable", True),
    ("NotFoundError", "bad_request", "the provider does not know this model", False),
    ("BadRequestError", "bad_request", "the provider rejected the request", False),
    ("APIError", "provider", "the provider failed", True),
)


def unwrap(exc: BaseException) -> BaseException:
    """The provider's own error inside litellm's wrapper for failures met while streaming."""
    for _ in range(4):  # bounded: wrappers do not nest deeper than this
        inner = getattr(exc, "original_exception", None)
        if type(exc).__name__ != "MidStreamFallbackError" or not isinstance(inner, Exception):
            break
        exc = inner
    return exc


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def is_rate_limit(exc: BaseException) -> bool:
    return "RateLimitError" in _names(unwrap(exc))


_MISSING_KEY = ("missing credentials", "api key", "api_key")


def _looks_like_missing_key(exc: BaseException) -> bool:
    """Some SDKs report a missing key as a server error (OpenAI's: "Missing credentials")."""
    text = str(exc).lower()
    return any(marker in text for marker in _MISSING_KEY) and (
        "missing" in text or "invalid" in text or "incorrect" in text
    )


def to_rpc_error(exc: BaseException, model: str) -> RpcError:
    exc = unwrap(exc)
    names = _names(exc)
    if names.isdisjoint({"RateLimitError", "ContextWindowExceededError"}) and (
        _looks_like_missing_key(exc)
    ):
        names = {"AuthenticationError"}
    for name, kind, what, retryable in _KINDS:
        if name in names:
            detail = _provider_message(exc)
            code = ErrorCode.AUTH_REQUIRED if kind == "auth" else ErrorCode.INTERNAL_ERROR
            return RpcError(
                code,
                f"{model}: {what}. Provider said: {detail}",
                {"kind": kind, "model": model, "retryable": retryable, "providerMessage": detail},
            )
    return RpcError(
        ErrorCode.INTERNAL_ERROR,
        f"{model}: the model request failed ({type(exc).__name__})",
        {"kind": "internal", "model": model, "retryable": False},
    )


def _provider_message(exc: BaseException) -> str:
    text = str(getattr(exc, "message", "") or exc).strip() or type(exc).__name__
    text = " ".join(text.split())
    if len(text) > MAX_PROVIDER_MESSAGE:
        text = text[: MAX_PROVIDER_MESSAGE - 1] + "…"
    return text
