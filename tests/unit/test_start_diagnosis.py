"""What the user is told when a command never became a ready ACP agent (pure diagnosis)."""

from __future__ import annotations

from acp_bridge.client.start_diagnosis import StartupWitness, diagnose_start
from acp_bridge.errors import ConnectionClosedError, ProtocolVersionError, RpcError

INIT = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n'


def witness_of(*frames: tuple[str, bytes]) -> StartupWitness:
    witness = StartupWitness()
    for direction, line in frames:
        witness(direction, line)
    return witness


def test_an_echo_of_our_request_is_named_as_such() -> None:
    witness = witness_of(("out", INIT), ("in", INIT.rstrip(b"\n")))
    text = diagnose_start(
        RpcError(-32601, "Method not found"), witness, exit_description=None, timeout_s=30
    )
    assert text.startswith("echoed our initialize request back")
    assert "is this an ACP agent?" in text
    assert "SIGKILL" not in text


def test_a_line_that_is_not_json_rpc_is_quoted_with_the_exit() -> None:
    witness = witness_of(("out", INIT), ("in", b"1"))
    text = diagnose_start(
        ConnectionClosedError("python3 closed the connection"),
        witness,
        exit_description="exited with code 0",
        timeout_s=30,
    )
    assert text.startswith("wrote '1' on stdout, which is not a JSON-RPC message, then exited")


def test_a_long_banner_is_cut_short() -> None:
    witness = witness_of(("in", b"Welcome! " * 50))
    text = diagnose_start(TimeoutError(), witness, exit_description=None, timeout_s=30)
    assert "..." in text
    assert len(text) < 250


def test_silence_until_the_deadline_names_the_deadline_and_the_way_out() -> None:
    text = diagnose_start(TimeoutError(), StartupWitness(), exit_description=None, timeout_s=30)
    assert text.startswith("wrote nothing on stdout within 30 s")
    assert "raise the startup timeout" in text


def test_an_agent_that_talks_but_never_answers_initialize() -> None:
    witness = witness_of(("in", b'{"jsonrpc":"2.0","method":"x"}'))
    text = diagnose_start(TimeoutError(), witness, exit_description=None, timeout_s=5)
    assert text.startswith("did not answer initialize within 5 s")


def test_a_silent_exit() -> None:
    text = diagnose_start(
        ConnectionClosedError("false closed the connection"),
        StartupWitness(),
        exit_description="exited with code 1",
        timeout_s=30,
    )
    assert text == "exited with code 1 before answering initialize, without writing on stdout"


def test_a_protocol_version_mismatch_says_which_versions() -> None:
    error = ProtocolVersionError("speaks 2", agent_version=2)
    text = diagnose_start(error, StartupWitness(), exit_description=None, timeout_s=30)
    assert "protocol version 2" in text and "speaks 1" in text


def test_an_error_answer_to_initialize_is_quoted() -> None:
    witness = witness_of(("out", INIT), ("in", b'{"jsonrpc":"2.0","id":1,"error":{}}'))
    text = diagnose_start(
        RpcError(-32602, "bad params"), witness, exit_description=None, timeout_s=30
    )
    assert text == "answered initialize with an error: bad params (-32602)"


def test_the_witness_keeps_a_bounded_amount() -> None:
    witness = StartupWitness()
    for index in range(10_000):
        witness("out", b"%d" % index)
        witness("in", b"not json %d" % index)
    assert witness.inbound_lines == 10_000
    assert witness.foreign_line == b"not json 0"
    assert len(witness._outbound) == 4
