"""The recording's line format and its writer, without a proxy (#20 defects 6-8): strict JSON
(no NaN, bounded nesting), non-JSON traffic under ``raw``, whole lines only, the cap counted
over the whole file, and what ``--redact`` masks."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.proxy.recorder import Recorder
from acp_bridge.proxy.recording import (
    MAX_DEPTH,
    RAW_KEEP_CHARS,
    NotJsonError,
    entry_line,
    loads_strict,
)
from acp_bridge.proxy.redact import MASK, redact

UPDATE = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","x":1.5}}'


def _entry(line: bytes) -> dict[str, Any]:
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    entry: dict[str, Any] = json.loads(line)
    return entry


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"v":NaN}', "NaN is not a JSON number"),
        (b'{"v":-Infinity}', "-Infinity is not a JSON number"),
        (b'{"v":1e999}', "1e999 does not fit a double"),
        (b"[" * 100_000 + b"]" * 100_000, f"nested deeper than {MAX_DEPTH} levels"),
        (b'{"v":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}", "nested deeper than"),
        (b'{"v":"\xff"}', "not UTF-8"),
        (b'{"jsonrpc":"2.0","method":"session/update",oops', "Expecting property name"),
    ],
)
def test_strict_json_refuses_what_json_does_not_allow(line: bytes, reason: str) -> None:
    with pytest.raises(NotJsonError, match=reason.replace("[", r"\[")):
        loads_strict(line)


def test_strict_json_takes_nesting_up_to_its_bound() -> None:
    deepest = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert loads_strict(deepest) == json.loads(deepest)


def test_a_json_line_is_recorded_byte_for_byte() -> None:
    line = entry_line(12.5, "agent->bridge", UPDATE, redact_secrets=False)
    assert line == b'{"t":12.5,"dir":"agent->bridge","msg":' + UPDATE + b"}\n"
    crlf = entry_line(1.0, "agent->bridge", UPDATE + b"\r", redact_secrets=False)
    assert _entry(crlf)["msg"] == json.loads(UPDATE) and b"\r" not in crlf


@pytest.mark.parametrize(
    "line",
    [
        UPDATE[:50],
        b'{"v":NaN}',
        b"bad \xff\xfe utf-8",
        b"[" * 1000 + b"]" * 1000,
        b'{"text":"line one\nline two"}',
    ],
)
def test_a_line_that_is_not_json_is_recorded_as_text_under_raw(line: bytes) -> None:
    entry = _entry(entry_line(1.0, "agent->bridge", line, redact_secrets=False))
    assert set(entry) == {"t", "dir", "raw"}
    assert entry["raw"] == line.decode("utf-8", errors="replace")


def test_a_long_raw_line_keeps_its_head_and_its_length() -> None:
    line = b"x" * (RAW_KEEP_CHARS + 10)
    entry = _entry(entry_line(1.0, "agent->bridge", line, redact_secrets=False))
    assert entry["rawBytes"] == len(line) and entry["raw"] == "x" * RAW_KEEP_CHARS


def test_redact_masks_any_value_under_a_secret_named_key() -> None:
    message = {
        "token": {"value": "a", "nested": {"deeper": ["b"]}},
        "apiKeys": ["c", "d"],
        "credentials": {"user": "e"},
        "x-api-key": None,
        "isPassword": True,
        "GITHUB_TOKEN": "f",
        "env": {"HOME": "/root"},
        "headers": [{"name": "Cookie", "value": "g"}],
        "usage": {"inputTokens": 10, "max_tokens": 20, "cachedReadTokens": 0.5},
        "accessTokens": ["h"],
        "tokenizer": "i",
        "plain": {"text": "j", "n": 1},
    }
    masked = redact(message)
    for key in ("token", "apiKeys", "credentials", "x-api-key", "isPassword", "GITHUB_TOKEN"):
        assert masked[key] == MASK, key
    assert masked["env"] == {"HOME": MASK} and masked["headers"][0]["value"] == MASK
    assert masked["usage"] == message["usage"]  # counts, not secrets
    assert masked["accessTokens"] == MASK and masked["tokenizer"] == MASK  # erring on safe
    assert masked["plain"] == message["plain"]


def test_the_redacted_line_is_json_with_the_secrets_masked() -> None:
    line = json.dumps({"id": 1, "params": {"auth": {"credential": {"k": "v"}}}}).encode()
    entry = _entry(entry_line(1.0, "editor->bridge", line, redact_secrets=True))
    assert entry["msg"] == {"id": 1, "params": {"auth": {"credential": MASK}}}


def _lines(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def test_the_recorder_keeps_the_whole_file_under_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "rec.ndjson"
    recorder = Recorder(str(path), max_bytes=8192)
    for _ in range(200):
        recorder.message("agent->bridge", UPDATE)
    assert not recorder.is_recording
    recorder.close()
    size = path.stat().st_size
    assert 8192 - 1024 < size <= 8192 and path.stat().st_mode & 0o777 == 0o600
    last = _lines(path)[-1]["event"]
    assert (last["event"], last["reason"]) == ("recording_stopped", "max_bytes")
    again = Recorder(str(path), max_bytes=8192)
    assert not again.is_recording
    again.message("agent->bridge", UPDATE)
    again.close()
    assert path.stat().st_size == size


def test_the_recorder_cuts_a_partial_last_line_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "rec.ndjson"
    whole = b'{"t":1,"dir":"bridge","event":{"event":"agent_started"}}\n'
    path.write_bytes(whole + b'{"t":2,"dir":"agent->br')
    recorder = Recorder(str(path))
    recorder.message("agent->bridge", UPDATE)
    recorder.close()
    entries = _lines(path)
    assert len(entries) == 2 and entries[1]["msg"] == json.loads(UPDATE)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_the_recorder_opens_regular_files_only(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "rec"
    if kind == "fifo":
        os.mkfifo(path)  # no reader: a blocking open would wait for ever
    elif kind == "directory":
        path.mkdir()
    else:
        path = Path("/dev/null")
    with pytest.raises(OSError):
        Recorder(str(path))
