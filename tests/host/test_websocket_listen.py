"""``serve --listen`` and its flags, checked before anything listens (plan_listen), and the
plan served: the token file made, the bind rule, the TLS pair."""

from __future__ import annotations

import stat
from pathlib import Path

import anyio
import pytest
import trustme

from acp_bridge.errors import UnsafeFileError
from acp_bridge.host.websocket import (
    WebSocketStream,
    client_ssl_context,
    connect_websocket,
    plan_listen,
)
from acp_bridge.host.ws_protocol import ListenRefusedError, websocket_url


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A CA file, and a certificate and key it signed for localhost: (ca, cert, key)."""
    ca = trustme.CA()
    issued = ca.issue_cert("localhost", "127.0.0.1")
    paths = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(paths[0]))
    issued.cert_chain_pems[0].write_to_path(str(paths[1]))
    issued.private_key_pem.write_to_path(str(paths[2]))
    return paths


def test_a_loopback_plan_makes_the_token_file_and_needs_no_tls(tmp_path: Path) -> None:
    plan = plan_listen("127.0.0.1:8765", token_file=tmp_path / "token")
    assert plan.ssl_context is None and plan.url() == "ws://127.0.0.1:8765/acp"
    assert (tmp_path / "token").read_text() == plan.token + "\n"
    assert stat.S_IMODE((tmp_path / "token").stat().st_mode) == 0o600
    assert plan.token not in repr(plan)  # a secret is not shown


def test_beyond_loopback_without_tls_is_refused_before_the_token_is_made(tmp_path: Path) -> None:
    with pytest.raises(ListenRefusedError, match="--tls-cert and --tls-key, or --insecure"):
        plan_listen("0.0.0.0:8765", token_file=tmp_path / "token")
    assert not (tmp_path / "token").exists()
    insecure = plan_listen("0.0.0.0:8765", token_file=tmp_path / "token", insecure=True)
    assert insecure.ssl_context is None


def test_half_a_tls_pair_is_refused(tmp_path: Path, tls_files: tuple[Path, Path, Path]) -> None:
    _, cert, _ = tls_files
    with pytest.raises(ListenRefusedError, match="go together"):
        plan_listen("0.0.0.0:1", token_file=tmp_path / "token", tls_cert=cert)


def test_a_key_that_does_not_load_is_refused_in_one_line(
    tmp_path: Path, tls_files: tuple[Path, Path, Path]
) -> None:
    _, cert, _ = tls_files
    bad_key = tmp_path / "bad.pem"
    bad_key.write_text("not a key\n")
    with pytest.raises(ListenRefusedError, match="cannot use them") as caught:
        plan_listen("0.0.0.0:1", token_file=tmp_path / "t", tls_cert=cert, tls_key=bad_key)
    assert "\n" not in str(caught.value)


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    token.chmod(0o644)
    with pytest.raises(UnsafeFileError, match="chmod 600"):
        plan_listen("127.0.0.1:1", token_file=token)


def test_a_token_file_in_a_missing_directory_is_refused_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ListenRefusedError, match=r"--token-file .*No such file"):
        plan_listen("127.0.0.1:1", token_file=tmp_path / "missing" / "token")


def test_urls_bracket_ipv6_addresses() -> None:
    assert websocket_url("::1", 80, tls=True) == "wss://[::1]:80/acp"
    assert websocket_url("localhost", 8765, tls=False) == "ws://localhost:8765/acp"


@pytest.mark.anyio
async def test_a_tls_plan_serves_wss_with_its_token(
    tmp_path: Path, tls_files: tuple[Path, Path, Path]
) -> None:
    ca, cert, key = tls_files
    plan = plan_listen("localhost:0", token_file=tmp_path / "token", tls_cert=cert, tls_key=key)

    async def hello(stream: WebSocketStream) -> None:
        await stream.send(b'{"hello":"wss"}\n')

    async with anyio.create_task_group() as tg:
        port = await tg.start(plan.serve, hello)
        url = plan.url(port)
        assert url == f"wss://localhost:{port}/acp"
        context = client_ssl_context(ca)
        async with await connect_websocket(url, token=plan.token, ssl_context=context) as ws:
            assert await ws.receive() == b'{"hello":"wss"}\n'
        tg.cancel_scope.cancel()
