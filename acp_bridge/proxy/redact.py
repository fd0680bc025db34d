"""Masking secrets in recorded messages (``--record FILE --redact``). Pure.

What is masked, with ``"***"``:

* the whole value of a *secret-named* key, whatever its type: a string, a number, an object
  or a list (``{"token": {...}}``, ``{"apiKeys": [...]}`` and ``{"credentials": {...}}`` become
  ``"***"`` entire). A key is secret-named when it contains, in any case, ``token``,
  ``secret``, ``password``/``passwd``, ``passphrase``, ``api key`` (``apiKey``, ``api_key``,
  ``api-key``), ``access key``, ``private key``, ``authorization``, ``cookie`` or
  ``credential``. One exception: a number under a key ending in ``tokens`` (``inputTokens``,
  ``max_tokens``) is a count, and stays;
* under an ``env`` or ``headers`` key (MCP server environments and HTTP headers, terminal
  environments): every ``value`` of a ``{name, value}`` list, or every value of an object;
* token-shaped substrings of any string: ``sk-...``, GitHub ``gh?_...`` tokens, Slack
  ``xox?-...``, AWS ``AKIA...`` key ids, JWTs, and ``Bearer ...`` credentials.

Only the recording is redacted; the wire is never changed.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MASK", "is_secret_key", "redact", "redact_text"]

MASK = "***"
_MAX_DEPTH = 200
"""Deeper structures are cut off (masked whole); the recording's parser refuses deeper ones
anyway (:data:`.recording.MAX_DEPTH`)."""

_SECRET_KEY = re.compile(
    r"(token|secret|passw(or)?d|passphrase|api[-_]?key|access[-_]?key|private[-_]?key"
    r"|authorization|cookie|credential)",
    re.IGNORECASE,
)
_TOKEN = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|(?<=Bearer )[A-Za-z0-9._~+/\-]{8,}=*)"
)


def redact_text(text: str) -> str:
    return _TOKEN.sub(MASK, text)


def redact(value: Any, depth: int = 0) -> Any:
    """A copy of a parsed JSON value with secrets masked."""
    if depth > _MAX_DEPTH:
        return MASK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact(item, depth + 1) for item in value]
    if not isinstance(value, dict):
        return value
    result: dict[str, Any] = {}
    for key, item in value.items():
        if is_secret_key(key, item):
            result[key] = MASK
        elif key in ("env", "headers") and isinstance(item, list):
            result[key] = [_masked_pair(pair, depth + 1) for pair in item]
        elif key in ("env", "headers") and isinstance(item, dict):
            result[key] = dict.fromkeys(item, MASK)
        else:
            result[key] = redact(item, depth + 1)
    return result


def is_secret_key(key: str, value: Any) -> bool:
    """True when ``value`` is masked whole for its key (see the module's docstring)."""
    if not _SECRET_KEY.search(key):
        return False
    is_count = isinstance(value, int | float) and not isinstance(value, bool)
    return not (is_count and key.lower().endswith("tokens"))


def _masked_pair(pair: Any, depth: int) -> Any:
    if isinstance(pair, dict) and "value" in pair:
        return {**redact(pair, depth), "value": MASK}
    return redact(pair, depth)
