"""The client side of the conversation host: reaching whoever owns a conversation (issue 22).

Whoever owns a conversation serves the host's endpoint protocol: ``acp-bridge serve`` for the
conversations it holds (its socket, ``host/endpoint.default_socket_path``), and a ``run`` or
``chat`` for its one conversation (the socket its lock file names, ``host/owner.read_owner``).
The client verbs (``send``, ``watch``, ``cancel``, ``status``) try those in that order
(:func:`candidate_endpoints`), connect (:func:`connect_host`), check that the host serves the
store they were given, and call the host's ``_acp_bridge/*`` methods (:class:`HostClient`).
``attach`` relays an editor's lines to the host as they are (:func:`relay_lines`), adding the
agent choice to a ``session/new`` (:func:`with_agent_choice`).

Transports. An :class:`Endpoint` is a Unix socket path, or a ``ws://``/``wss://`` URL with a
bearer token (``attach --host``; the token is read with ``host.tokens.load_token``).
:func:`open_endpoint_stream` gives an anyio byte stream of newline-delimited JSON-RPC either
way; the WebSocket one comes from ``acp_bridge.host.websocket.connect_websocket``, imported
only when a URL is used. A 401 (no token, or another one) and an untrusted certificate are
:class:`HostUnusableError` (the user must act: a usage error to the verbs).

Errors. Every failure is a :class:`HostClientError` naming the endpoint and what happened:
:class:`NoHostError` (nothing listens there), :class:`HostUnusableError` (it is there but not
ours to use: permission denied, a host of another store), :class:`HostFailedError` (it closed
the connection mid-answer, sent a line that is not JSON-RPC, did not answer in time, or
answered something malformed), :class:`HostRequestError` (it answered the request with a
JSON-RPC error). The caller owns the deadlines (``connect_timeout_s`` and
``request_timeout_s`` are the named settings passed in).

Shutdown: leaving :func:`connect_host` closes the JSON-RPC peer (pending calls fail at once),
then the stream, shielded; an open watch ends with it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, ByteStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acp_bridge.errors import (
    BridgeError,
    ConnectionClosedError,
    ErrorCode,
    ResourceClosedError,
    RpcError,
)
from acp_bridge.host.clients import DISCONNECTED_METHOD
from acp_bridge.host.endpoint import MAX_SOCKET_PATH_BYTES
from acp_bridge.host.owner import OwnerInfo
from acp_bridge.rpc.framing import DEFAULT_MAX_LINE_BYTES, LineReader
from acp_bridge.rpc.peer import Direction, JsonRpcPeer
from acp_bridge.version import __version__
from acp_bridge.wire.initialize import PROTOCOL_VERSION

__all__ = [
    "CONNECT_TIMEOUT_S",
    "REQUEST_TIMEOUT_S",
    "WATCH_BUFFER",
    "Endpoint",
    "HostClient",
    "HostClientError",
    "HostFailedError",
    "HostInfo",
    "HostRequestError",
    "HostUnusableError",
    "NoHostError",
    "OutstandingRequests",
    "RelayTargetGoneError",
    "WatchItem",
    "candidate_endpoints",
    "connect_host",
    "open_endpoint_stream",
    "relay_lines",
    "same_store",
    "text_content",
    "with_agent_choice",
]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S: Final = 5.0
"""How long connecting and the greeting (``initialize`` + ``_acp_bridge/hello``) may take: a
host that accepts but does not answer in this time is reported failed, not waited for."""
REQUEST_TIMEOUT_S: Final = 30.0
"""How long one ``_acp_bridge/*`` call may take. ``send`` is answered once the message is
committed (not when its turn ends), so this bounds a commit, never a turn."""
WATCH_BUFFER: Final = 256
"""Events a watch holds for its reader; past it the reader of the connection waits (the
host's outbox for us fills, and the host cuts us off at its bound, never slowing the agent)."""
EVENT_METHOD: Final = "_acp_bridge/event"


# -- errors ----------------------------------------------------------------------------------


class HostClientError(BridgeError):
    """Reaching or using a conversation's owner failed; the text names the endpoint."""


class NoHostError(HostClientError):
    """Nothing listens at the endpoint (no socket file, or a stale one nobody accepts on)."""


class HostUnusableError(HostClientError):
    """Something is there but not ours to use: permission denied, or a host of another store."""


class HostFailedError(HostClientError):
    """The host broke the exchange: closed mid-answer, sent garbage, did not answer in time, or
    answered something malformed."""


class RelayTargetGoneError(ConnectionClosedError):
    """The side :func:`relay_lines` writes to went away (its reader closed it)."""


class HostRequestError(HostClientError):
    """The host answered a request with a JSON-RPC error (``code``, ``message``, ``data``)."""

    def __init__(self, text: str, error: RpcError) -> None:
        super().__init__(text)
        self.code = error.code
        self.message = error.message
        self.data = error.data

    @property
    def is_usage(self) -> bool:
        """The request named something that does not exist or is not allowed (a usage error),
        rather than the host failing."""
        return self.code in {
            ErrorCode.INVALID_PARAMS,
            ErrorCode.METHOD_NOT_FOUND,
            ErrorCode.RESOURCE_NOT_FOUND,
        }

    @property
    def is_owned_elsewhere(self) -> bool:
        """A host here that shares a store with the conversation's owner on another host
        (issue 23): the request is for that owner, through the store."""
        data = self.data.get("acpBridge") if isinstance(self.data, dict) else None
        return isinstance(data, dict) and data.get("ownedElsewhere") is True


# -- where the owner is ----------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where a host is: a Unix ``socket`` path, or a WebSocket ``url`` (with its bearer
    ``token``, and ``ca_file`` to trust for a ``wss://`` host with a certificate of its own
    making)."""

    socket: Path | None = None
    url: str | None = None
    token: str | None = field(default=None, repr=False)
    ca_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.socket is None) == (self.url is None):
            raise ValueError("an endpoint is a socket path or a URL, exactly one")

    def __str__(self) -> str:
        return str(self.socket) if self.socket is not None else str(self.url)


def candidate_endpoints(owner: OwnerInfo | None, host_socket: Path) -> list[Endpoint]:
    """Where to look for a conversation's owner, in order: the socket its live owner serves
    (``owner``, from :func:`acp_bridge.host.owner.read_owner`), then the host's socket."""
    found: list[Endpoint] = []
    if owner is not None and owner.socket is not None:
        found.append(Endpoint(socket=owner.socket))
    if not found or found[0].socket != host_socket:
        found.append(Endpoint(socket=host_socket))
    return found


def same_store(host_store: str, store: Path) -> bool:
    """Whether a host's ``store`` (as its hello names it) is the store at ``store``."""
    if "://" in host_store:
        return host_store == str(store)
    return os.path.realpath(host_store) == os.path.realpath(store)


# -- connecting ------------------------------------------------------------------------------


async def open_endpoint_stream(endpoint: Endpoint) -> ByteStream:
    """A byte stream of newline-delimited JSON-RPC to ``endpoint``. The caller owns the
    deadline.

    Raises:
        NoHostError: nothing listens there.
        HostUnusableError: permission denied, or the path is not a socket; for a URL, a
            malformed one, a refused token, an untrusted certificate or an unusable CA file.
        HostFailedError: the connection failed otherwise.
    """
    if endpoint.url is not None:
        return await _open_websocket(endpoint.url, endpoint.token, endpoint.ca_file)
    assert endpoint.socket is not None
    if len(os.fsencode(endpoint.socket)) > MAX_SOCKET_PATH_BYTES:
        raise NoHostError(
            f"no host can listen on {endpoint.socket}: the path is longer than a Unix socket "
            f"allows ({MAX_SOCKET_PATH_BYTES} bytes); give the host and this command a shorter "
            "--socket, or set XDG_RUNTIME_DIR"
        )
    try:
        return await anyio.connect_unix(endpoint.socket)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise NoHostError(f"no host is listening on {endpoint.socket}") from exc
    except PermissionError as exc:
        raise HostUnusableError(
            f"{endpoint.socket}: permission denied (a socket of another user?)"
        ) from exc
    except OSError as exc:
        if exc.errno in {errno.ENOTSOCK, errno.ENOTDIR}:
            raise HostUnusableError(f"{endpoint.socket}: not a socket") from exc
        if exc.errno == errno.ECONNREFUSED:
            raise NoHostError(f"no host is listening on {endpoint.socket}") from exc
        reason = exc.strerror or type(exc).__name__
        raise HostFailedError(f"cannot connect to {endpoint.socket}: {reason}") from exc


async def _open_websocket(url: str, token: str | None, ca_file: Path | None) -> ByteStream:
    """A WebSocket to a remote host (``attach --host``): one JSON-RPC message per text
    message, read and written as lines. The transport (wsproto, h11, ssl) is imported only
    when a URL is used, so the local verbs start without it."""
    import ssl

    from acp_bridge.host import websocket

    try:
        context = websocket.client_ssl_context(ca_file) if ca_file is not None else None
    except (OSError, ssl.SSLError) as exc:
        raise HostUnusableError(f"the CA file {ca_file} cannot be used: {exc}") from exc
    try:
        return await websocket.connect_websocket(url, token=token, ssl_context=context)
    except ssl.SSLCertVerificationError as exc:  # a ValueError too: first
        raise HostUnusableError(
            f"{url}: the host's certificate is not trusted ({exc.verify_message}); "
            "give --ca-file with the CA that signed it"
        ) from exc
    except ValueError as exc:
        raise HostUnusableError(f"{url}: {exc}") from exc
    except websocket.WebSocketRejectedError as exc:  # an HTTP status instead of the upgrade
        if exc.status == 401:
            told = "without a token" if token is None else "with this token"
            raise HostUnusableError(
                f"{url} refused the connection {told} (401 {exc.reason}); give --token-file "
                "with the host's token (serve --listen printed where it is)"
            ) from exc
        raise HostUnusableError(f"{url} refused the connection: {exc.status} {exc.reason}") from exc
    except ConnectionRefusedError as exc:
        raise NoHostError(f"no host is listening at {url}") from exc
    except OSError as exc:  # unreachable, TLS failed
        raise HostFailedError(f"cannot connect to {url}: {exc}") from exc
    except (anyio.BrokenResourceError, anyio.EndOfStream) as exc:
        raise HostFailedError(f"{url} hung up during the WebSocket handshake") from exc


@dataclass(frozen=True)
class HostInfo:
    """A host's answer to ``_acp_bridge/hello``."""

    pid: int | None
    store: str
    version: str
    socket: str | None


@dataclass(frozen=True)
class WatchItem:
    """One event of a watched conversation: its ``cursor`` (the store's event-log id; resume
    after it with ``from``) and the event as ``run --json`` prints it."""

    cursor: int
    event: dict[str, Any]


@contextlib.asynccontextmanager
async def connect_host(
    endpoint: Endpoint,
    *,
    store: Path | None = None,
    client_name: str = "acp-bridge",
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> AsyncIterator[HostClient]:
    """Connect to ``endpoint``, greet it (``initialize``, ``_acp_bridge/hello``), and yield a
    :class:`HostClient`. With ``store``, a host that serves another store is refused.

    Raises:
        NoHostError, HostUnusableError, HostFailedError: see the module's text.
    """
    try:
        with anyio.fail_after(connect_timeout_s):
            stream = await open_endpoint_stream(endpoint)
    except TimeoutError as exc:
        raise HostFailedError(
            f"connecting to {endpoint} took over {connect_timeout_s:g} s"
        ) from exc
    try:
        async with anyio.create_task_group() as task_group:
            client = HostClient(stream, endpoint, request_timeout_s=request_timeout_s)
            await task_group.start(client.peer.run)
            task_group.start_soon(client.watch_closing)
            try:
                await client.greet(store, client_name, timeout_s=connect_timeout_s)
                yield client
            finally:
                await client.peer.aclose()
    except BaseExceptionGroup as group:
        # The caller's own exception (or the greeting's) comes back wrapped by the task group:
        # hand it back unwrapped when it is alone.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group.exceptions[0].__cause__
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await stream.aclose()


class HostClient:
    """The ``_acp_bridge/*`` calls to one connected host. Use :func:`connect_host`."""

    def __init__(
        self,
        stream: ByteStream,
        endpoint: Endpoint,
        *,
        request_timeout_s: float,
    ) -> None:
        self.endpoint = endpoint
        self.info: HostInfo | None = None
        self.peer = JsonRpcPeer(stream, stream, name=f"host {endpoint}")
        self.peer.add_observer(self._observe)
        self.peer.invalid_log_level = logging.DEBUG  # said in our own words (_unanswered)
        self.peer.on_notification(EVENT_METHOD, self._on_event)
        self.peer.on_notification(DISCONNECTED_METHOD, self._on_disconnected)
        self._request_timeout_s = request_timeout_s
        self._garbage: bytes | None = None
        self._watches: dict[str, MemoryObjectSendStream[WatchItem]] = {}
        self.disconnect_reason: str | None = None
        """The reason the host gave when it cut us off (``_acp_bridge/disconnected``)."""

    def __repr__(self) -> str:
        return f"<HostClient {self.endpoint} [{'closed' if self.peer.is_closed else 'open'}]>"

    @property
    def is_closed(self) -> bool:
        return self.peer.is_closed

    # -- the calls ---------------------------------------------------------------------------

    async def greet(self, store: Path | None, client_name: str, *, timeout_s: float) -> HostInfo:
        """``initialize`` then ``_acp_bridge/hello``; refuses a host of another store."""
        await self.call(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {},
                "clientInfo": {"name": client_name, "version": __version__},
            },
            timeout_s=timeout_s,
        )
        answer = await self.call("_acp_bridge/hello", {}, timeout_s=timeout_s)
        host = answer.get("host")
        if not isinstance(host, dict) or not isinstance(host.get("store"), str):
            raise self._malformed("_acp_bridge/hello", answer)
        pid = host.get("pid")
        info = HostInfo(
            pid=pid if isinstance(pid, int) else None,
            store=host["store"],
            version=str(host.get("version", "?")),
            socket=host.get("socket") if isinstance(host.get("socket"), str) else None,
        )
        if store is not None and not same_store(info.store, store):
            raise HostUnusableError(
                f"the host on {self.endpoint} (pid {info.pid}) serves the store {info.store}, "
                f"not {store}; give the matching --store, or another --socket"
            )
        self.info = info
        return info

    async def status(self, conversation_id: str | None = None) -> list[dict[str, Any]]:
        """The host's open conversations (or only ``conversation_id``), as it reports them."""
        params = {} if conversation_id is None else {"conversationId": conversation_id}
        answer = await self.call("_acp_bridge/status", params)
        rows = answer.get("conversations")
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise self._malformed("_acp_bridge/status", answer)
        return rows

    async def send(
        self,
        conversation_id: str,
        content: Sequence[dict[str, Any]],
        *,
        interrupt: bool = False,
        steer: bool = False,
        label: str | None = None,
    ) -> int:
        """Queue a message; its seq, once the host committed it (not when its turn ends)."""
        params: dict[str, Any] = {"conversationId": conversation_id, "content": list(content)}
        if interrupt:
            params["interrupt"] = True
        if steer:
            params["steer"] = True
        if label is not None:
            params["label"] = label
        answer = await self.call("_acp_bridge/send", params)
        seq = answer.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise self._malformed("_acp_bridge/send", answer)
        return seq

    async def stop(self, conversation_id: str) -> dict[str, Any]:
        """Stop the conversation (its running turn cancelled, its queue paused): the host's
        answer, ``{"cancelled", "seq"?, "queued"}``."""
        answer = await self.call("_acp_bridge/stop", {"conversationId": conversation_id})
        if not isinstance(answer.get("cancelled"), bool):
            raise self._malformed("_acp_bridge/stop", answer)
        return dict(answer)

    async def cancel(self, conversation_id: str) -> tuple[bool, int | None]:
        """Cancel the running turn: (whether one was cancelled, its message's seq)."""
        answer = await self.call("_acp_bridge/cancel", {"conversationId": conversation_id})
        cancelled = answer.get("cancelled")
        if not isinstance(cancelled, bool):
            raise self._malformed("_acp_bridge/cancel", answer)
        seq = answer.get("seq")
        return cancelled, seq if isinstance(seq, int) and not isinstance(seq, bool) else None

    @contextlib.asynccontextmanager
    async def watch(
        self, conversation_id: str, from_cursor: int | None = None
    ) -> AsyncIterator[MemoryObjectReceiveStream[WatchItem]]:
        """The conversation's events: those stored after ``from_cursor`` (all when None), then
        live ones. The stream ends when the connection does (see :attr:`disconnect_reason`).

        The host sends the stored events before it answers the request, so the stream is
        handed over at once and read while the request waits: a replay longer than the
        buffer would otherwise fill it, and the answer behind it would never be read. A
        refused or failed request ends the stream, and leaving the block raises it."""
        if conversation_id in self._watches:
            raise ValueError(f"already watching {conversation_id}")
        send, receive = anyio.create_memory_object_stream[WatchItem](WATCH_BUFFER)
        self._watches[conversation_id] = send
        refused: list[HostClientError] = []

        async def ask() -> None:
            params: dict[str, Any] = {"conversationId": conversation_id}
            if from_cursor is not None:
                params["from"] = from_cursor
            try:
                answer = await self.call("_acp_bridge/watch", params)
                if not isinstance(answer.get("cursor"), int):
                    raise self._malformed("_acp_bridge/watch", answer)
            except HostClientError as exc:
                refused.append(exc)
                send.close()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                with receive:
                    yield receive
                tg.cancel_scope.cancel()
        finally:
            self._watches.pop(conversation_id, None)
            send.close()
        if refused:
            raise refused[0]

    async def call(self, method: str, params: Any, *, timeout_s: float | None = None) -> Any:
        """One request with the deadline, its failures as :class:`HostClientError`."""
        limit = self._request_timeout_s if timeout_s is None else timeout_s
        try:
            with anyio.fail_after(limit):
                answer = await self.peer.request(method, params)
        except TimeoutError as exc:
            raise HostFailedError(
                self._unanswered(method, f"did not answer in {limit:g} s")
            ) from exc
        except RpcError as exc:
            raise HostRequestError(
                f"the host on {self.endpoint} refused {method}: {exc.message}"
                + (f" ({_shown(exc.data)})" if exc.data is not None else ""),
                exc,
            ) from exc
        except (ConnectionClosedError, ResourceClosedError) as exc:
            reason = f": {self.disconnect_reason}" if self.disconnect_reason else ""
            raise HostFailedError(
                self._unanswered(method, f"closed the connection before answering{reason}")
            ) from exc
        if not isinstance(answer, dict):
            raise self._malformed(method, answer)
        return answer

    # -- what the host sends unasked ------------------------------------------------------------

    async def _on_event(self, params: Any) -> None:
        if not isinstance(params, dict):
            return
        watch = self._watches.get(str(params.get("conversationId")))
        cursor, event = params.get("cursor"), params.get("event")
        if watch is None or not isinstance(cursor, int) or not isinstance(event, dict):
            return
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await watch.send(WatchItem(cursor, event))  # a slow reader slows this connection

    def _on_disconnected(self, params: Any) -> None:
        reason = params.get("reason") if isinstance(params, dict) else None
        self.disconnect_reason = str(reason) if reason else "the host cut the connection"

    async def watch_closing(self) -> None:
        """When the connection ends, every watch's stream ends too."""
        await self.peer.wait_closed()
        for send in list(self._watches.values()):
            send.close()

    def _observe(self, direction: Direction, line: bytes) -> None:
        if direction == "in" and self._garbage is None and not line.lstrip().startswith(b"{"):
            self._garbage = line[:80]

    # -- texts -------------------------------------------------------------------------------

    def _unanswered(self, method: str, what: str) -> str:
        text = f"the host on {self.endpoint} {what} ({method})"
        if self._garbage is not None:
            text += f"; it sent a line that is not JSON-RPC: {self._garbage!r}"
        return text

    def _malformed(self, method: str, answer: Any) -> HostFailedError:
        return HostFailedError(
            f"the host on {self.endpoint} answered {method} with something malformed: "
            f"{_shown(answer)}"
        )


# -- attach: relaying an editor's lines -------------------------------------------------------


def with_agent_choice(line: bytes, agent: str | None, command: Sequence[str] = ()) -> bytes:
    """``line`` with the agent choice in a ``session/new`` request's
    ``_meta.acpBridge`` (``agent``: a name; ``agentCommand``: an argv), unless the request
    names one already. Every other line, and a line that is not a JSON object, comes back as
    it was, byte for byte."""
    if (agent is None and not command) or b'"session/new"' not in line:
        return line
    try:
        message = json.loads(line)
    except ValueError:
        return line
    if not isinstance(message, dict) or message.get("method") != "session/new":
        return line
    params = message.get("params")
    if not isinstance(params, dict):
        return line
    meta = params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    ours = meta.get("acpBridge")
    ours = ours if isinstance(ours, dict) else {}
    if "agent" in ours or "agentCommand" in ours:
        return line
    choice: dict[str, Any] = {"agent": agent} if agent is not None else {}
    if command:
        choice["agentCommand"] = list(command)
    params["_meta"] = {**meta, "acpBridge": {**ours, **choice}}
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class OutstandingRequests:
    """The editor's requests the host has not answered yet, seen on the relay's lines (read,
    never changed), so that attach can detach at the editor's end of input without dropping
    an answer still on its way.

    The editor's lines are few and parsed whole. The host's are many (a turn's updates): only
    a line without ``"method"`` in it can be a response, and only those are parsed. A
    response whose result happens to hold that word is not seen; its request then waits for
    the caller's bound, never longer.
    """

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._drained: anyio.Event | None = None

    def __len__(self) -> int:
        return len(self._ids)

    def sent(self, line: bytes) -> bytes:
        """Note a request the editor sent (``line`` comes back as it was)."""
        message = _json_object(line)
        if message is not None and "method" in message and "id" in message:
            self._ids.add(json.dumps(message["id"]))
        return line

    def received(self, line: bytes) -> bytes:
        """Note an answer the host sent (``line`` comes back as it was)."""
        if not self._ids or b'"method"' in line:
            return line
        message = _json_object(line)
        if message is not None and "id" in message and "method" not in message:
            self._ids.discard(json.dumps(message["id"]))
            if not self._ids and self._drained is not None:
                self._drained.set()
        return line

    async def wait_answered(self) -> None:
        """Return once every request noted so far has its answer."""
        if self._ids:
            self._drained = anyio.Event()
            await self._drained.wait()


def _json_object(line: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


async def relay_lines(
    source: ByteReceiveStream,
    sink: ByteSendStream,
    *,
    rewrite: Callable[[bytes], bytes] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> None:
    """Copy newline-delimited lines from ``source`` to ``sink`` (each through ``rewrite``)
    until ``source`` ends. One line at a time, written before the next is read: the bound is
    one line (``max_line_bytes``), and a slow ``sink`` slows the reading (backpressure).

    Raises:
        FramingError: a line over ``max_line_bytes``.
        RelayTargetGoneError: ``sink`` went away.
        ConnectionClosedError: ``source`` broke its stream.
    """
    reader = LineReader(source, max_line_bytes=max_line_bytes)
    while True:
        try:
            line = await reader.receive_line()
        except anyio.EndOfStream:
            return
        if rewrite is not None:
            line = rewrite(line)
        try:
            await sink.send(line + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise RelayTargetGoneError("the side written to went away") from exc


def text_content(text: str) -> list[dict[str, Any]]:
    """A message's ACP content: one text block."""
    return [{"type": "text", "text": text}]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:199] + "\u2026"
