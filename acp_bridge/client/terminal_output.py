"""A terminal's captured output: the last N bytes, kept decodable as UTF-8 text.

Pure: no I/O, no clock. :class:`OutputBuffer` is fed raw chunks from the command's pipe and
turns them into the text ``terminal/output`` reports.

Bound: at most ``limit`` bytes are kept. Past it, bytes are dropped *from the front*, then
any UTF-8 continuation bytes left at the front, so the kept text starts on a character
boundary; ``truncated`` turns (and stays) true. While the command runs, an incomplete
multibyte sequence at the end is held back rather than shown as U+FFFD; any other invalid
byte becomes U+FFFD.
"""

from __future__ import annotations

from typing import Final

__all__ = ["OutputBuffer"]

# A lead byte's top four bits -> the length of the sequence it starts.
_SEQUENCE_LENGTH: Final = {0b1100: 2, 0b1101: 2, 0b1110: 3, 0b1111: 4}


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _complete_length(data: bytes | bytearray) -> int:
    """``len(data)`` minus an incomplete UTF-8 sequence at its very end."""
    for back in range(1, min(4, len(data)) + 1):
        lead = data[-back]
        if _continuation(lead):
            continue
        needed = _SEQUENCE_LENGTH.get(lead >> 4, 1) if lead < 0xF8 else 1
        return len(data) - back if needed > back else len(data)
    return len(data)


class OutputBuffer:
    """A terminal's output: the last ``limit`` bytes, cut at a UTF-8 character boundary."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.truncated = False
        self._data = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._data += chunk
        excess = len(self._data) - self.limit
        if excess > 0:
            del self._data[:excess]
            self.truncated = True
        if self.truncated:
            # A cut may split a character, and the rest of it may come in later chunks: any
            # continuation byte at the front is such an orphan (a character has at most 3).
            skip = 0
            while skip < min(3, len(self._data)) and _continuation(self._data[skip]):
                skip += 1
            del self._data[:skip]

    def text(self, *, final: bool) -> str:
        """The output as text; unless ``final``, a trailing partial character is held back."""
        data = self._data if final else self._data[: _complete_length(self._data)]
        return bytes(data).decode("utf-8", errors="replace")
