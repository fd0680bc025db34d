"""Provider failures as clear JSON-RPC errors, never tracebacks.

Every failure of a model request becomes an :class:`~acp_bridge.errors.RpcError` whose message
says what happened in words, and whose ``data`` says the kind (``auth``, ``rate_limit``,
``context_window``, ``network``, ``bad_request``, ``provider``, ``internal``), the model,
whether retrying later may help, and the provider's own message (``providerMessage``).
Authentication failures use ACP's ``auth_required`` code (-32000); the rest are -32603.

An authentication failure's message is one short sentence naming the environment variable that
holds the key for the model's provider (``ANTHROPIC_API_KEY`` for ``anthropic/claude-*``). The
provider's own message is quoted only when short ("invalid x-api-key" tells a wrong key from a
missing one); a long one (Anthropic's lists every way to configure the provider) is the same
advice, so it stays in ``data`` and in the agent's log (its stderr, which ``-v`` shows). The
other kinds keep the provider's message in theirs: it is the only account of what was wrong.

litellm is looked up by class name so this module does not import it.
"""

from __future__ import annotations

import logging
from typing import Final

from acp_bridge.errors import ErrorCode, RpcError

__all__ = [
    "MAX_PROVIDER_MESSAGE",
    "SHORT_PROVIDER_MESSAGE",
    "api_key_variable",
    "is_rate_limit",
    "to_rpc_error",
    "unwrap",
]

log = logging.getLogger(__name__)

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
    ("AuthenticationError", "auth", "the provider refused the credentials", False),
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


_KEY_BY_PROVIDER: Final = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "xai": "XAI_API_KEY",
    "cohere": "COHERE_API_KEY",
    "together_ai": "TOGETHERAI_API_KEY",
    "fireworks_ai": "FIREWORKS_AI_API_KEY",
    "perplexity": "PERPLEXITYAI_API_KEY",
    "azure": "AZURE_API_KEY",
    "huggingface": "HUGGINGFACE_API_KEY",
    "cerebras": "CEREBRAS_API_KEY",
}
"""litellm's provider prefix (``anthropic/claude-...``) -> the variable its key is read from
(as ``litellm.validate_environment`` names them)."""

_KEY_BY_MODEL_PREFIX: Final = (
    ("claude", "ANTHROPIC_API_KEY"),
    ("gpt-", "OPENAI_API_KEY"),
    ("chatgpt", "OPENAI_API_KEY"),
    ("o1", "OPENAI_API_KEY"),
    ("o3", "OPENAI_API_KEY"),
    ("o4", "OPENAI_API_KEY"),
    ("gemini", "GEMINI_API_KEY"),
    ("mistral", "MISTRAL_API_KEY"),
    ("codestral", "MISTRAL_API_KEY"),
    ("deepseek", "DEEPSEEK_API_KEY"),
    ("grok", "XAI_API_KEY"),
)
"""A model named without a provider prefix (``claude-sonnet-4-5``, ``gpt-4o``)."""

_MOCK_PREFIX: Final = "acp-mock/"
"""The offline mock model (:mod:`.mock_provider`): ``acp-mock/<model>`` stands for ``<model>``."""


def api_key_variable(model: str) -> str | None:
    """The environment variable holding the API key for ``model``'s provider, if known."""
    name = model.removeprefix(_MOCK_PREFIX).strip().lower()
    provider, slash, rest = name.partition("/")
    if slash and provider in _KEY_BY_PROVIDER:
        return _KEY_BY_PROVIDER[provider]
    bare = rest if slash else name
    return next((key for prefix, key in _KEY_BY_MODEL_PREFIX if bare.startswith(prefix)), None)


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
            data = {"kind": kind, "model": model, "retryable": retryable, "providerMessage": detail}
            if kind != "auth":
                message = f"{model}: {what}. Provider said: {detail}"
                return RpcError(ErrorCode.INTERNAL_ERROR, message, data)
            log.warning("%s: %s. Provider said: %s", model, what, detail)
            said = _short(detail)
            if said:  # "invalid x-api-key" tells a wrong key from a missing one
                what += f" ({said})"
            key = api_key_variable(model)
            if name == "AuthenticationError":
                what += f"; set {key}" if key else "; set the provider's API key"
                if key:
                    data["apiKeyVariable"] = key
            return RpcError(ErrorCode.AUTH_REQUIRED, f"{model}: {what}", data)
    return RpcError(
        ErrorCode.INTERNAL_ERROR,
        f"{model}: the model request failed ({type(exc).__name__})",
        {"kind": "internal", "model": model, "retryable": False},
    )


SHORT_PROVIDER_MESSAGE: Final = 100
"""An auth failure's message quotes the provider's when it is at most this long, without
litellm's ``litellm.AuthenticationError:`` prefix (a long one is advice on every way to
configure the provider: it stays in ``data`` and the log)."""


def _short(detail: str) -> str:
    text = detail
    head, colon, rest = text.partition(": ")
    if colon and head.startswith("litellm.") and " " not in head:
        text = rest.strip()
    return text if len(text) <= SHORT_PROVIDER_MESSAGE else ""


def _provider_message(exc: BaseException) -> str:
    text = str(getattr(exc, "message", "") or exc).strip() or type(exc).__name__
    text = " ".join(text.split())
    if len(text) > MAX_PROVIDER_MESSAGE:
        text = text[: MAX_PROVIDER_MESSAGE - 1] + "…"
    return text
