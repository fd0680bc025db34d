"""Messages for ``acp-bridge run`` from stdin lines and ``-m`` values: UTF-8 text of at most
``--max-message-bytes``, checked before anything is stored. A stdin line that starts with
``steer: `` is a steer: its text joins the running turn where the agent takes it (see
``Conversation.send(steer=True)``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Final, Protocol

import anyio

from acp_bridge.rpc.fdstream import FdReceiveStream
from acp_bridge.rpc.splitter import TOO_LONG, LineSplitter, TooLong

__all__ = ["STDIN_READ_BYTES", "STEER_PREFIX", "Sender", "check_messages", "read_stdin"]

STDIN_READ_BYTES: Final = 65536
"""One read of stdin: the line splitter buffers at most --max-message-bytes plus this."""
STEER_PREFIX: Final = "steer: "
"""A stdin line starting with this is a steer (the prefix is not sent)."""


class Sender(Protocol):
    """Stores and queues one message (or steers it); returns its seq."""

    async def __call__(self, text: str, *, steer: bool = False) -> int: ...


async def read_stdin(send: Sender, judged: set[int], max_bytes: int) -> int:
    """Send each non-blank stdin line as a message; returns how many lines were refused.

    stdin is read as bytes, without a thread (a signal's stop cancels the read at once, even
    with stdin open and idle). A message is UTF-8 text of at most ``max_bytes`` bytes: a line
    that is not valid UTF-8, or longer, is refused with one line on stderr naming its number,
    is not stored, and the next lines go on. A line starting with :data:`STEER_PREFIX` is
    sent as a steer. At most ``max_bytes`` plus one read is buffered.
    On a terminal, a line on stderr first says so (the screen would stay blank otherwise).
    """
    if os.isatty(0):
        _say("reading messages from the terminal, one per line (Enter sends it); Ctrl-D ends")
    splitter = LineSplitter(max_bytes)  # an over-long line is reported before its end
    number = refused = 0
    try:
        stream = FdReceiveStream(0)
    except OSError:  # no stdin at all: no messages
        return 0
    try:
        while True:
            try:
                chunk = await stream.receive(STDIN_READ_BYTES)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                chunk = b""
            lines: list[bytes | TooLong] = splitter.feed(chunk) if chunk else _last(splitter)
            for line in lines:
                number += 1
                text = _stdin_message(number, line, max_bytes)
                if text is None:
                    refused += 1
                elif text.startswith(STEER_PREFIX) and text[len(STEER_PREFIX) :].strip():
                    judged.add(await send(text[len(STEER_PREFIX) :], steer=True))
                elif text.strip():
                    judged.add(await send(text))
            if not chunk:
                return refused
    finally:
        with anyio.CancelScope(shield=True):
            await stream.aclose()  # gives stdin its blocking mode back


def _last(splitter: LineSplitter) -> list[bytes | TooLong]:
    last = splitter.end()
    return [] if last is None else [last]


def _stdin_message(number: int, line: bytes | TooLong, max_bytes: int) -> str | None:
    if line is TOO_LONG:
        _say(f"stdin line {number} refused: longer than --max-message-bytes ({max_bytes} bytes)")
        return None
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        _say(
            f"stdin line {number} refused: not valid UTF-8 (byte 0x{line[exc.start]:02x} at "
            f"offset {exc.start}); messages are UTF-8 text"
        )
        return None


def check_messages(parser: argparse.ArgumentParser, messages: list[str], max_bytes: int) -> None:
    """-m values are UTF-8 text of at most ``max_bytes``: else a usage error (exit 2).
    (Bytes that are not UTF-8 reach us from argv as lone surrogates.)"""
    for index, text in enumerate(messages, 1):
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            parser.error(
                f"argument -m/--message: message {index} is not valid UTF-8 (at character "
                f"{exc.start}); messages are UTF-8 text"
            )
        if size > max_bytes:
            parser.error(
                f"argument -m/--message: message {index} is {size} bytes, longer than "
                f"--max-message-bytes ({max_bytes})"
            )


def _say(text: str) -> None:
    print(f"acp-bridge: {text}", file=sys.stderr, flush=True)
