"""A throwaway PostgreSQL server for the tests: ``initdb`` into a private temporary directory,
``postgres`` on a Unix socket only (no TCP), stopped and removed at the end.

PostgreSQL refuses to run as root. Running as root (CI containers do), the server and ``initdb``
run as ``nobody`` through ``setpriv`` (or ``runuser``), and the temporary directory is handed to
that user; otherwise they run as the current user.

Life of a server, as :func:`start_server` and :meth:`PgServer.stop` do it:

1. ``initdb -U postgres --auth=trust -N`` into ``ROOT/data`` (ROOT is 0700, the server user's).
2. ``postgres -D ROOT/data -k ROOT -h '' -p PORT`` as a child of this process (not daemonized
   by ``pg_ctl``, so this process reaps it and no zombie is left behind). Listening on a socket
   in ROOT only, it cannot collide with another test worker's server, whatever the port.
3. Ready when ``postmaster.pid`` says ``ready`` (the server writes it once it accepts
   connections); a server that exits first fails the start with the tail of its log.
4. A guard process holds the other end of a pipe from this process: if this process dies without
   stopping the server (``kill -9`` of pytest), the guard sees end-of-file and stops it, so no
   run of ``.ci/run`` leaves a server behind (nor its directory).
5. :meth:`PgServer.stop`: ``pg_ctl stop -m immediate``, then ``-m fast`` if that failed, then
   SIGKILL of the postmaster; its exit is waited for (bounded), the guard is dismissed and ROOT
   is removed. Idempotent.

Tests get :class:`PgServer` through the session fixture in ``tests/pg/conftest.py``; where no
PostgreSQL binaries exist, :func:`find_bindir` returns None and those tests are skipped.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import psutil

__all__ = ["PgServer", "find_bindir", "no_server_reason", "start_server"]

START_TIMEOUT_S: Final = 60.0
"""How long initdb and the server's start may take on a loaded CI machine."""
STOP_TIMEOUT_S: Final = 30.0
"""How long each way of stopping the server may take before the next, harder one."""
SERVER_USER: Final = "nobody"
"""Who runs the server when we are root (PostgreSQL refuses root)."""

# Test servers trade durability for speed: nothing in them outlives the test run.
FAST_OPTIONS: Final = ("-c", "fsync=off", "-c", "synchronous_commit=off",
                       "-c", "full_page_writes=off")  # fmt: skip

_GUARD = """\
import shutil, subprocess, sys
sys.stdin.buffer.read()  # returns at end-of-file: the test process stopped us or died
subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
shutil.rmtree(sys.argv[1], ignore_errors=True)
"""


def find_bindir() -> str | None:
    """The directory of ``initdb``, ``pg_ctl`` and ``postgres``, or None when there is none:
    ``pg_config --bindir``, then ``/usr/lib/postgresql/<newest>/bin``, then ``PATH``."""
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=30, check=True
            )
            candidates.append(out.stdout.strip())
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(v) if (v := Path(p).parent.name).isdigit() else 0,
        reverse=True,
    )
    candidates.extend(versions)
    on_path = shutil.which("postgres") or shutil.which("initdb")
    if on_path is not None:
        candidates.append(str(Path(on_path).resolve().parent))
    for directory in candidates:
        if all(os.access(os.path.join(directory, b), os.X_OK) for b in _BINARIES):
            return directory
    return None


_BINARIES: Final = ("initdb", "pg_ctl", "postgres")


def no_server_reason() -> str | None:
    """Why the PostgreSQL tests cannot run here (one line), or None when they can."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "PostgreSQL tests skipped: psycopg is not installed (pip install -e '.[postgres]')"
    if find_bindir() is None:
        return (
            "PostgreSQL tests skipped: no initdb/pg_ctl/postgres found (pg_config --bindir, "
            "/usr/lib/postgresql/*/bin, PATH)"
        )
    if os.geteuid() == 0 and _run_as_prefix() is None:
        return "PostgreSQL tests skipped: running as root and neither setpriv nor runuser exists"
    return None


@dataclass
class PgServer:
    """A running test server: connect with :attr:`url` (user ``postgres``, trusted)."""

    root: Path
    bindir: str
    port: int
    process: subprocess.Popen[bytes]
    guard: subprocess.Popen[bytes]
    run_as: list[str]
    stopped: bool = field(default=False)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root

    @property
    def pid(self) -> int:
        """The postmaster's pid."""
        return self.process.pid

    def url(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """A ``postgresql://`` URL to this server's Unix socket."""
        return f"postgresql://{user}@/{dbname}?host={self.socket_dir}&port={self.port}"

    def stop(self) -> None:
        """Stop the server (immediate, then fast, then SIGKILL), wait for its exit, dismiss
        the guard, remove its directory. Idempotent; never raises for a server already gone."""
        if self.stopped:
            return
        self.stopped = True
        try:
            for mode in ("immediate", "fast"):
                if self.process.poll() is not None:
                    break
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    subprocess.run(
                        [*self.run_as, self._bin("pg_ctl"), "-D", str(self.data_dir),
                         "-m", mode, "-w", "-t", str(int(STOP_TIMEOUT_S)), "stop"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        timeout=STOP_TIMEOUT_S + 5,
                    )  # fmt: skip
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=STOP_TIMEOUT_S)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
            _kill_leftovers(self.root)
        finally:
            _dismiss(self.guard)
            shutil.rmtree(self.root, ignore_errors=True)

    def _bin(self, name: str) -> str:
        return os.path.join(self.bindir, name)


class FreshDatabases:
    """New, empty databases on a server, the next one made ahead on a thread: CREATE DATABASE
    (a copy of the template: 0.3 s, seconds on a loaded machine) then overlaps the test before
    instead of adding to each test's setup. Each database is still made for one test only."""

    def __init__(self, server: PgServer) -> None:
        self._server = server
        self._maker = ThreadPoolExecutor(1, thread_name_prefix="pg-fresh-database")
        self._ahead: Future[str] | None = None

    def take(self) -> str:
        """The name of a new, empty database (made now if none is ready); the next one is
        started on its way."""
        ready = self._ahead if self._ahead is not None else self._maker.submit(self._create)
        self._ahead = self._maker.submit(self._create)
        return ready.result()

    def drop(self, name: str) -> None:
        """Drop a database taken, and its connections with it."""
        import psycopg

        with psycopg.connect(self._server.url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        """Wait for a database on its way (the spare goes with the server)."""
        self._maker.shutdown(wait=True, cancel_futures=True)

    def _create(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self._server.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return name


def start_server(*, options: tuple[str, ...] = FAST_OPTIONS) -> PgServer:
    """initdb a new cluster in a private temporary directory and start a server on it; return
    once it accepts connections.

    Raises:
        RuntimeError: no binaries, initdb failed, or the server did not get ready in time (the
            message has the tail of its log).
    """
    bindir = find_bindir()
    if bindir is None:
        raise RuntimeError(no_server_reason() or "no PostgreSQL binaries")
    run_as = _run_as_prefix() if os.geteuid() == 0 else []
    if run_as is None:
        raise RuntimeError(no_server_reason() or "cannot drop root")
    root = Path(tempfile.mkdtemp(prefix="acpb-pg-"))
    try:
        if os.geteuid() == 0:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(root, user.pw_uid, user.pw_gid)
        os.chmod(root, 0o700)
        data = root / "data"
        initdb = subprocess.run(
            [*run_as, os.path.join(bindir, "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "-N", "-E", "UTF8", "--locale=C"],
            capture_output=True, text=True, timeout=START_TIMEOUT_S, cwd=root, env=_clean_env(),
        )  # fmt: skip
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed ({initdb.returncode}): {initdb.stderr[-2000:]}")
        port = _free_port()
        log = open(root / "server.log", "wb")  # noqa: SIM115 (the child keeps it)
        with log:
            process = subprocess.Popen(
                [*run_as, os.path.join(bindir, "postgres"), "-D", str(data), "-k", str(root),
                 "-h", "", "-p", str(port), *options],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=root, env=_clean_env(),
            )  # fmt: skip
        stop_argv = [*run_as, os.path.join(bindir, "pg_ctl"), "-D", str(data),
                     "-m", "immediate", "-w", "stop"]  # fmt: skip
        guard = subprocess.Popen(
            [sys.executable, "-c", _GUARD, str(root), *stop_argv],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the test run must not kill the guard first
        )  # fmt: skip
        server = PgServer(root, bindir, port, process, guard, run_as)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        _wait_ready(server)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_ready(server: PgServer) -> None:
    """Until ``postmaster.pid``'s status line says ``ready``; the server exiting first, or
    START_TIMEOUT_S passing, raises RuntimeError with the log's tail."""
    pid_file = server.data_dir / "postmaster.pid"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            break
        with contextlib.suppress(FileNotFoundError, PermissionError):
            lines = pid_file.read_text().splitlines()
            # Line 8 is the postmaster's status (PostgreSQL 10 and later).
            if len(lines) >= 8 and lines[7].strip() == "ready":
                return
        time.sleep(0.01)  # the server writes the file; there is nothing to wait on instead
    log = (server.root / "server.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"the PostgreSQL test server did not get ready: {log}")


def _run_as_prefix() -> list[str] | None:
    """The argv prefix that runs a command as SERVER_USER (root only), or None."""
    user = pwd.getpwnam(SERVER_USER)
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        # setpriv execs the command: the server stays this process's child.
        return [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                "--"]  # fmt: skip
    runuser = shutil.which("runuser")
    if runuser is not None:
        return [runuser, "-u", SERVER_USER, "--"]
    return None


def _clean_env() -> dict[str, str]:
    """Our environment without libpq's and the server's variables (PGDATA, PGPORT, ...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _free_port() -> int:
    # The server listens on a Unix socket in its own directory only; the port just names the
    # socket file. A free TCP port keeps the number unique on the machine all the same.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _kill_leftovers(root: Path) -> None:
    """SIGKILL any process still running from the server's directory (a backend that outlived
    a killed postmaster)."""
    for proc in psutil.process_iter(["cwd", "name"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["cwd"] and Path(proc.info["cwd"]).is_relative_to(root):
                proc.send_signal(signal.SIGKILL)


def _dismiss(guard: subprocess.Popen[bytes]) -> None:
    """End the guard without it stopping anything (the server is already stopped)."""
    with contextlib.suppress(OSError):
        guard.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        guard.wait(timeout=STOP_TIMEOUT_S)
    if guard.stdin is not None:
        with contextlib.suppress(OSError):
            guard.stdin.close()
