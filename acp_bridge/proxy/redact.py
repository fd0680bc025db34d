"""Masking secrets in recorded messages (``--record FILE --redact``). Pure.

What is masked, with ``"***"``:

* every ``value`` of a ``{name, value}`` list under an ``env`` or ``headers`` key (MCP server
  environments and HTTP headers, terminal environments);
* the value of any key that names a secret (token, secret, password, api key, authorization,
  cookie, credential, private key);
* token-shaped substrings of any string: ``sk-...``, GitHub ``gh?_...`` tokens, Slack
  ``xox?-...``, AWS ``AKIA...`` key ids, JWTs, and ``Bearer ...`` credentials.

Only the recording is redacted; the wire is never changed.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MASK", "redact", "redact_text"]

MASK = "***"
_MAX_DEPTH = 200
"""Deeper structures are cut off (masked whole): the decoder limits nesting anyway."""

_SECRET_KEY = re.compile(
    r"(token|secret|passw(or)?d|api[-_]?key|authorization|cookie|credential|private[-_]?key)",
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
        if key in ("env", "headers") and isinstance(item, list):
            result[key] = [_masked_pair(pair, depth + 1) for pair in item]
        elif _SECRET_KEY.search(key) and isinstance(item, (str, int, float)):
            result[key] = MASK
        else:
            result[key] = redact(item, depth + 1)
    return result


def _masked_pair(pair: Any, depth: int) -> Any:
    if isinstance(pair, dict) and "value" in pair:
        return {**redact(pair, depth), "value": MASK}
    return redact(pair, depth)
