"""Settings of a supervised agent. Every duration carries its unit; defaults say why."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field

from acp_bridge.client.elicitation import ElicitationHandler
from acp_bridge.client.permissions import PermissionPolicy
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.record import record
from acp_bridge.rpc.framing import DEFAULT_MAX_LINE_BYTES
from acp_bridge.rpc.peer import Observer
from acp_bridge.version import __version__

__all__ = ["ClientOptions"]


@record(slots=False)
class ClientOptions:
    """How to run and talk to a supervised agent."""

    client_name: str = "acp-bridge"
    client_version: str = __version__

    permission: PermissionPolicy = field(default_factory=PermissionPolicy)
    """Answers ``session/request_permission``; denies by default."""
    elicitation: ElicitationHandler | None = None
    """Answers ``elicitation/create`` in the modes it names, which are advertised; None: none
    advertised, and a request is answered -32602 (see :mod:`acp_bridge.client.elicitation`)."""
    allow_fs_read: bool = False
    """Advertise and serve ``fs/read_text_file``, confined to the session roots."""
    allow_fs_write: bool = False
    """Advertise and serve ``fs/write_text_file`` (atomic), confined to the session roots."""
    allow_terminal: bool = False
    """Advertise and serve ``terminal/*``; commands run in the session cwd, own process group."""
    on_capability_refused: Callable[[str], None] | None = None
    """Called with the method name when the agent calls ``fs/*`` or ``terminal/*`` although it
    is off (answered -32601 all the same), or ``elicitation/create`` in a mode not advertised
    (answered -32602), e.g. so a CLI can hint at the flag that allows it.
    Runs in the reader: it must not block."""

    auth_method: str | None = None
    """Call ``authenticate`` with this method id after every ``initialize``."""

    restart: RestartPolicy = field(default_factory=RestartPolicy)
    startup_timeout_s: float = 60.0
    """Spawn to the end of ``initialize``. Generous: ``npx``/``uvx`` agents may download first."""
    restore_timeout_s: float = 120.0
    """Restoring one session after a restart (a ``session/load`` replays its whole history).
    Each session has this budget of its own: see :mod:`acp_bridge.core.restore_plan`."""
    restore_concurrency: int = 8
    """Session restores in flight at once after a restart (a session in use goes first)."""
    cancel_grace_s: float = 5.0
    """After ``session/cancel``, how long the agent gets to answer before it is quarantined."""
    cancel_write_timeout_s: float = 1.0
    """Writing ``session/cancel`` may take this long; longer means the agent stopped reading
    its stdin, which counts as no answer (quarantine)."""
    quarantine_wait_s: float = 10.0
    """How long ending a quarantined turn waits for the process to be gone and reported."""
    exit_report_timeout_s: float = 2.0
    """After stdout ends, how long the process gets to exit before it is killed as stuck."""
    shutdown: ShutdownTimeouts = field(default_factory=ShutdownTimeouts)

    max_tree_rss_bytes: int | None = None
    """Optional watchdog: kill and restart the agent when its whole tree's RSS exceeds this."""
    watchdog_interval_s: float = 0.5

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    """A longer line from the agent is a protocol violation: it is killed and restarted."""
    turn_buffer: int = 256
    """Turn events buffered before the reader waits for the consumer (backpressure)."""
    base_env: Mapping[str, str] | None = None
    """The environment the agent spec's changes apply to (the CLI passes ``os.environ``)."""
    stderr_forward: Callable[[str], None] | None = None
    """Called with each line the agent writes to stderr (after the tail buffer keeps it)."""
    frame_observer: Observer | None = None
    """Shown every raw JSON-RPC line to and from every generation of the agent (``"out"``:
    to the agent), e.g. ``run --record``. Runs in the reader and the writer: must not block."""
