"""What a prompt may hold, and the prompt as text for the model. Pure.

The agent advertises ``promptCapabilities`` :data:`PROMPT_CAPABILITIES`: text and
``resource_link`` (always allowed by ACP) and embedded ``resource`` blocks; no image, no audio.
:func:`check_prompt` refuses, with -32602 as the official SDK agents do, a block of any other
type (an unknown one too) and a prompt whose text and resource content exceed
:data:`MAX_PROMPT_BYTES`, before the prompt is stored or sent to a model (and billed).
"""

from __future__ import annotations

from typing import Any, Final

from acp_bridge.errors import ErrorCode, RpcError

__all__ = [
    "ACCEPTED_TYPES",
    "MAX_PROMPT_BYTES",
    "PROMPT_CAPABILITIES",
    "check_prompt",
    "prompt_bytes",
    "prompt_text",
]

PROMPT_CAPABILITIES: Final = {"image": False, "audio": False, "embeddedContext": True}
ACCEPTED_TYPES: Final = ("text", "resource_link", "resource")
"""The content block types :data:`PROMPT_CAPABILITIES` admits."""

MAX_PROMPT_BYTES: Final = 4 * 1024 * 1024
"""UTF-8 bytes of text and resource content one prompt may hold (4 MiB: about a million
tokens, more than any model's context window)."""


def prompt_bytes(blocks: list[Any], stop_past: int) -> int:
    """UTF-8 bytes of every string value the blocks carry (text, embedded text and base64
    blobs, links, and the small ones such as ``type``); the count stops once it is past
    ``stop_past``."""
    total = 0
    pending: list[Any] = list(blocks)
    while pending and total <= stop_past:
        item = pending.pop()
        if isinstance(item, str):
            # Characters first: a string longer than the room left is past it in any encoding.
            total += len(item) if len(item) > stop_past - total else len(item.encode())
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return total


def check_prompt(blocks: list[Any], max_bytes: int = MAX_PROMPT_BYTES) -> None:
    """Raise -32602 for a block this agent did not advertise, or for a prompt past
    ``max_bytes``. ``blocks`` is the prompt as it came (a malformed block is left to the
    request's parser)."""
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if isinstance(kind, str) and kind not in ACCEPTED_TYPES:
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                f"this agent does not accept {kind!r} content in a prompt "
                f"(it accepts {', '.join(ACCEPTED_TYPES)})",
                {"type": kind, "promptCapabilities": PROMPT_CAPABILITIES},
            )
    if prompt_bytes(blocks, max_bytes) > max_bytes:
        raise RpcError(
            ErrorCode.INVALID_PARAMS,
            f"the prompt is too large: more than {max_bytes} bytes of text and resource "
            "content (this agent's limit per prompt)",
            {"maxPromptBytes": max_bytes},
        )


def prompt_text(blocks: list[dict[str, Any]]) -> str:
    """The user's prompt as text for the model."""
    parts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource_link":
            parts.append(f"[{block.get('name', '')}]({block.get('uri', '')})")
        elif kind == "resource":
            resource = block.get("resource") or {}
            if "text" in resource:
                parts.append(f"<file uri={resource.get('uri', '')!r}>\n{resource['text']}\n</file>")
    return "\n".join(parts)
