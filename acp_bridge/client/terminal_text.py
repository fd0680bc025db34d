"""Validation of the text a ``terminal/create`` hands to ``execve``.

Pure: no I/O. :func:`check_request_text` refuses, with -32602 naming the offending field and
a ``reason``, what could never reach ``execve``: a NUL byte (``nul_byte``) or a lone
surrogate (``not_utf8``) in ``command``, ``args``, ``env`` or ``cwd``, and an env name that
is empty or holds ``=`` (``bad_env_name``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acp_bridge.errors import ErrorCode, RpcError

if TYPE_CHECKING:
    from acp_bridge.wire.client_methods import CreateTerminalRequest

__all__ = ["check_request_text"]


def _invalid(message: str, field: str, reason: str) -> RpcError:
    return RpcError(ErrorCode.INVALID_PARAMS, message, {"field": field, "reason": reason})


def _check_exec_text(name: str, value: str) -> None:
    """Refuse what ``execve`` cannot take: a NUL byte, or a lone surrogate (JSON ``"\\ud800"``
    decodes to one, and it has no UTF-8 encoding; surrogateescape would even turn some into
    raw bytes). Without this, the spawn raises ValueError, answered -32603 with a traceback."""
    if "\0" in value:
        raise _invalid(f"{name} contains a NUL byte", name, "nul_byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        message = f"{name} is not valid Unicode text (a lone surrogate at {exc.start})"
        raise _invalid(message, name, "not_utf8") from None


def check_request_text(request: CreateTerminalRequest) -> None:
    """Raise :class:`RpcError` -32602 if any text of ``request`` cannot be executed."""
    _check_exec_text("command", request.command)
    for index, arg in enumerate(request.args or ()):
        _check_exec_text(f"args[{index}]", arg)
    for index, var in enumerate(request.env or ()):
        name = f"env[{index}].name"
        _check_exec_text(name, var.name)
        _check_exec_text(f"env[{index}].value", var.value)
        if not var.name or "=" in var.name:
            message = "An environment variable name must be non-empty and hold no '='"
            raise _invalid(message, name, "bad_env_name")
    if request.cwd is not None:
        _check_exec_text("cwd", request.cwd)
