"""``acp-bridge serve --listen`` and ``acp-bridge attach --host``, the real commands (issue 22
item 6): the token file, a turn relayed over WebSocket, refusals (a wrong or missing token, a
bind beyond loopback without TLS, a port taken), wss with a trustme certificate, and a client
that comes back getting what it missed, never twice."""

from __future__ import annotations

import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from acp_bridge.host.client import Endpoint, WatchItem, connect_host, text_content
from tests.host.cli_client import ROOT
from tests.host.listen_cli import (
    ENV,
    attach,
    call,
    detach,
    listening_host,
    one_turn,
    request,
    serve_argv,
    texts,
)
from tests.verbs.fake_hosts import short_dir

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def directory() -> Iterator[Path]:
    with short_dir() as path:  # a Unix socket path holds at most 107 bytes
        yield path


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=60)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def test_help_names_every_remote_option() -> None:
    serve = _run([sys.executable, "-m", "acp_bridge", "serve", "--help"])
    for option in ("--listen", "--token-file", "--tls-cert", "--tls-key", "--insecure"):
        assert option in serve.stdout, option
    attach_help = _run([sys.executable, "-m", "acp_bridge", "attach", "--help"])
    for option in ("--host", "--token-file", "--ca-file"):
        assert option in attach_help.stdout, option


def test_attach_host_relays_a_turn_over_websocket_and_the_token_file_is_private(
    directory: Path,
) -> None:
    with listening_host(directory, "--listen", "127.0.0.1:0") as host:
        assert host.url.startswith("ws://127.0.0.1:") and not host.url.endswith(":0/acp")
        assert host.made_token and host.token_file == directory / "q.db.token"
        assert stat.S_IMODE(host.token_file.stat().st_mode) == 0o600
        assert host.token_file.read_text().strip() not in host.said  # never on stderr
        with attach("--host", host.url, "--token-file", str(host.token_file)) as editor:
            _, streamed, stop = one_turn(editor, directory, "echo over the network")
            assert (streamed, stop) == ("over the network", "end_turn")
            err = detach(editor)
        assert "Traceback" not in err
    # The same file serves the next host: read, not made again.
    with listening_host(directory, "--listen", "127.0.0.1:0") as again:
        assert not again.made_token and again.token_file == host.token_file


def test_a_wrong_or_missing_token_is_refused_with_one_line(directory: Path) -> None:
    wrong = directory / "wrong.token"
    wrong.write_text("not-the-token\n")
    wrong.chmod(0o600)
    shared = directory / "shared.token"
    shared.write_text("some-token\n")
    shared.chmod(0o644)
    with listening_host(directory, "--listen", "127.0.0.1:0") as host:
        cases: dict[tuple[str, ...], str] = {
            ("--token-file", str(wrong)): "refused the connection with this token (401",
            (): "refused the connection without a token (401",
            ("--token-file", str(directory / "none")): "No such file",
            ("--token-file", str(shared)): "chmod 600",
        }
        for flags, expected in cases.items():
            with attach("--host", host.url, *flags) as editor:
                assert editor.wait(timeout=30) == 2, flags
                assert editor.stderr is not None
                lines = editor.stderr.read().strip().splitlines()
            assert len(lines) == 1 and expected in lines[0], (flags, lines)
            assert "some-token" not in lines[0] and "not-the-token" not in lines[0]


def test_a_bind_beyond_loopback_needs_tls_or_insecure(directory: Path) -> None:
    refused = _run(serve_argv(directory, "--listen", "0.0.0.0:0"))
    assert refused.returncode == 2
    assert "--tls-cert and --tls-key, or --insecure" in _one_line(refused)
    assert not (directory / "q.db.token").exists()  # refused before the token was made
    with listening_host(directory, "--listen", "0.0.0.0:0", "--insecure") as host:
        assert host.url.startswith("ws://0.0.0.0:")


def test_listen_refusals_are_one_line_and_exit_2(directory: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = _run(serve_argv(directory, "--listen", f"127.0.0.1:{port}"))
    assert busy.returncode == 2 and "cannot listen there" in _one_line(busy)
    assert not (directory / "s" / "host.sock").exists()  # the Unix socket was let go
    malformed = _run(serve_argv(directory, "--listen", "8765"))
    assert malformed.returncode == 2 and "expected HOST:PORT" in _one_line(malformed)
    alone = _run(serve_argv(directory, "--insecure"))
    assert alone.returncode == 2 and "go with --listen" in _one_line(alone)
    half = _run(serve_argv(directory, "--listen", "127.0.0.1:0", "--tls-cert", "c.pem"))
    assert half.returncode == 2 and "go together" in _one_line(half)


def test_wss_with_a_certificate_of_its_own_ca(directory: Path) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert("localhost", "127.0.0.1")
    ca_file, cert, key = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    with listening_host(directory, "--listen", "localhost:0", *tls) as host:
        assert host.url.startswith("wss://localhost:")
        token = ("--token-file", str(host.token_file))
        with attach("--host", host.url, *token, "--ca-file", str(ca_file)) as editor:
            _, streamed, stop = one_turn(editor, directory, "echo sealed")
            assert (streamed, stop) == ("sealed", "end_turn")
            detach(editor)
        with attach("--host", host.url, *token) as untrusting:  # the system's trust store
            assert untrusting.wait(timeout=30) == 2
            assert untrusting.stderr is not None
            line = untrusting.stderr.read().strip()
        assert "not trusted" in line and "--ca-file" in line and "\n" not in line


def _events(items: list[WatchItem], kind: str) -> list[dict[str, Any]]:
    return [item.event for item in items if item.event["event"] == kind]


@pytest.mark.anyio
async def test_a_client_that_comes_back_gets_what_it_missed_never_twice(
    directory: Path,
) -> None:
    """Over WebSocket: a watcher leaves at its cursor; a turn runs while it is away; it
    watches again from that cursor and gets that turn, and nothing it had. Then an editor
    attaches again (session/load) and its replay holds both turns, each once."""
    with listening_host(directory, "--listen", "127.0.0.1:0") as host:
        token = host.token_file.read_text().strip()
        endpoint = Endpoint(url=host.url, token=token)
        first: list[WatchItem] = []
        async with connect_host(endpoint, store=host.store) as client:
            new = await client.call("session/new", {"cwd": str(directory), "mcpServers": []})
            sid = new["sessionId"]
            async with client.watch(sid) as items:
                await client.send(sid, text_content("echo one"))
                async for item in items:
                    first.append(item)
                    if item.event["event"] == "turn_ended":
                        break
        left_at = first[-1].cursor
        missed: list[WatchItem] = []
        async with (
            connect_host(endpoint, store=host.store) as other,
            other.watch(sid, left_at) as items,
        ):
            await other.send(sid, text_content("echo two"))
            async for item in items:
                missed.append(item)
                if item.event["event"] == "turn_ended":
                    break
        assert all(item.cursor > left_at for item in missed)
        assert [e["seq"] for e in _events(missed, "turn_started")] == [2]
        cursors = [item.cursor for item in first + missed]
        assert cursors == sorted(set(cursors))  # never twice, in order
        replayed: list[WatchItem] = []
        async with (
            connect_host(endpoint, store=host.store) as everything,
            everything.watch(sid) as items,
        ):
            async for item in items:
                replayed.append(item)
                if item.cursor >= missed[-1].cursor:
                    break
        assert [item.cursor for item in replayed] == cursors  # and never a gap

        with attach("--host", host.url, "--token-file", str(host.token_file)) as editor:
            call(editor, request(1, "initialize", {"protocolVersion": 1}))
            load = {"sessionId": sid, "cwd": str(directory), "mcpServers": []}
            loaded = call(editor, request(2, "session/load", load))
            assert "result" in loaded[-1], loaded[-1]
            assert texts(loaded) == "onetwo"
            assert texts(loaded, "user_message_chunk") == "echo oneecho two"
            detach(editor)
