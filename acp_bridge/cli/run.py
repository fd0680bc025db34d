"""``acp-bridge run``: headless turns over the conversation layer, for scripts and pipelines.

Messages come from ``-m`` (in order) or from stdin lines (each line is stored and queued as it
is read, so a line typed during a turn waits for it). stdout carries the agent's text, or one
JSON event per line with ``--json``; everything else goes to stderr.

Signals (SIGINT, SIGTERM, or SIGHUP when the terminal goes away), the same in every phase (from
the program's first line: see :mod:`.early_signals`; one inherited as ignored stays ignored).
stdout closed by its reader or failing (a full disk, a terminal gone) counts as a first signal:

* the first one stops: the running turn is cancelled and the bridge waits for it to close (the
  grace window, then the quarantine; bounded by :attr:`Conversation.stop_bound_s`), so the
  store records it ``cancelled`` and ``turn_ended`` is printed; then the agent's whole process
  tree is stopped and the exit code is 130. A message whose turn had not begun stays queued;
  an agent that has not answered ``initialize`` yet gets SIGTERM at once;
* a second one stops *now*: the agent's process tree is SIGKILLed at once, a turn still open is
  recorded ``cancelled`` without waiting, and the bridge exits 130 within about a second.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Final, TextIO, cast

import anyio

from acp_bridge.cli.conversation_setup import (
    agent_spec,
    claim_conversation,
    client_options,
    turn_policy,
)
from acp_bridge.cli.early_signals import (
    ignore_stopping_signals,
    interrupted_early,
    watched_signals,
)
from acp_bridge.cli.early_start import EarlyAgent, interrupted_line
from acp_bridge.cli.exit_codes import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TURN_FAILED,
)
from acp_bridge.cli.failures import report_agent_failure, report_auth_required
from acp_bridge.cli.guarded_output import GuardedOutput, guarded_stderr
from acp_bridge.cli.named_agents import ResolvedAgent
from acp_bridge.cli.progress import StartupProgress
from acp_bridge.cli.render import EventPrinter
from acp_bridge.cli.run_recording import open_recording
from acp_bridge.cli.stdin_messages import read_stdin
from acp_bridge.cli.store_open import answering_controls, cut_when_lease_lost, keeping_leases
from acp_bridge.cli.tty_permission import permission_policy
from acp_bridge.client.elicitation import declining
from acp_bridge.client.events import AgentGaveUp
from acp_bridge.client.supervisor import SupervisedAgent, open_supervised_agent
from acp_bridge.conversation.conversation import STOP_NOW_DEADLINE_S, Conversation
from acp_bridge.conversation.fanout import lifecycle_json
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.queue_states import MessageState
from acp_bridge.conversation.records import ConversationRecord
from acp_bridge.conversation.store_api import Store
from acp_bridge.errors import (
    AgentError,
    BridgeError,
    QueueStoreError,
    SpawnError,
)
from acp_bridge.host.owner_endpoint import owner_endpoint
from acp_bridge.process import killer
from acp_bridge.process.early import AdoptedProcess
from acp_bridge.process.spec import AgentSpec

__all__ = ["run_resolved"]


def run_resolved(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    agent: ResolvedAgent,
    early: EarlyAgent | None = None,
) -> int:
    """Run with the agent resolved (see :mod:`.run_entry`); ``early`` is the agent's process if
    it was spawned before the library was imported."""
    claimed = claim_conversation(args, agent, verbose=bool(args.verbose))
    if isinstance(claimed, int):
        return claimed
    store, record = claimed.store, claimed.record
    spec = agent_spec(agent, record)
    # This run answers for the messages it finds unsettled (left queued, or left running by a
    # bridge that died: recovered as failed) and for the ones it sends.
    unsettled = {m.seq for m in store.messages(record.id) if not m.is_final}
    started = None
    try:
        started = early.adopt(spec) if early is not None else None
        with guarded_stderr():  # a note the terminal can no longer show is dropped
            return anyio.run(_run, args, store, record, spec, unsettled, started)
    except KeyboardInterrupt:  # before the watcher took over
        ignore_stopping_signals()
        _say_line(interrupted_line(started is not None))
        return EXIT_INTERRUPTED
    finally:
        ignore_stopping_signals()  # the run is over: a late signal must not end the cleanup
        if started is not None:
            started.discard_if_running()  # interrupted before the supervisor took it over
        claimed.release()


@dataclass
class _Interrupts:
    """What the signals asked for, and what they act on once it exists."""

    count: int = 0
    everything: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    agent: SupervisedAgent | None = None
    conversation: Conversation | None = None
    stopped: anyio.Event = field(default_factory=anyio.Event)

    stdout_gone: bool = False
    starting: AdoptedProcess | None = None
    """The agent spawned early, until it answered ``initialize`` (then :attr:`agent` is set)."""
    stopped_what: str = "the agent was stopped before any turn ran"
    """What the first stop found to stop, for the last line."""
    output: GuardedOutput | None = None
    """stdout, guarded: what ended it, if it ended."""
    lease_lost: bool = False
    """The conversation's lease in a shared store was lost (issue 23): the run ends, exit 4."""
    _task_group: anyio.abc.TaskGroup | None = None

    async def watch(self) -> None:
        # A signal inherited as ignored (SIGINT in a background job) stays ignored.
        with anyio.open_signal_receiver(*watched_signals()) as signals:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                if interrupted_early():  # a signal before this watcher, not yet acted upon
                    self.interrupt()
                async for _signum in signals:
                    self.interrupt()

    def interrupt(self) -> None:
        """A signal, or stdout closed by its reader: the first stops, a second stops now."""
        self.count += 1
        if self.count == 1 and self._task_group is not None:
            # In its own task: stop() may wait (a busy queue, a slow stdout), and a second
            # signal must be heard meanwhile.
            self._task_group.start_soon(self._stop)
        elif self.count == 1:
            self.everything.cancel()
        else:
            self._stop_now()

    def stdout_closed(self) -> None:
        """Whoever read our stdout went away (``| head -1``), or it cannot be written any more
        (a full disk, a terminal that closed): nothing more can be shown, so the run stops as a
        first signal would; the running turn is recorded ``cancelled``."""
        if not self.stdout_gone:
            self.stdout_gone = True
            if not self.count:  # not a second stop: a terminal's SIGHUP comes with its EIO
                self.interrupt()

    async def _stop(self) -> None:
        conversation = self.conversation
        if conversation is None:  # still starting: nothing to record
            if self.agent is None and self.starting is not None:
                # It has not even answered initialize: nothing was said to it that an EOF
                # would let it finish, and it may not read its stdin yet (the EOF wait took
                # 2 s). SIGTERM now; the supervisor's stop then reaps the tree.
                self.stopped_what = "the agent was still starting; it was stopped"
                killer.signal_group(self.starting.pid, signal.SIGTERM)
            self.everything.cancel()
            return
        if conversation.queue.running is not None:
            self.stopped_what = "the running turn was cancelled and the agent was stopped"
        else:
            self.stopped_what = "no turn was running; the agent was stopped"
        self.stopped.set()  # _drive stops feeding messages and waits for the turn
        if self.agent is not None:
            self.agent.stop_restarting()  # a quarantine now ends the agent: we are leaving
        with contextlib.suppress(BridgeError):
            await conversation.stop()

    def _stop_now(self) -> None:
        if self.agent is not None:
            self.agent.kill_now()
        if self.conversation is not None:
            self.conversation.stop_now()
        self.stopped.set()
        self.everything.deadline = min(
            self.everything.deadline, anyio.current_time() + STOP_NOW_DEADLINE_S
        )


async def _run(
    args: argparse.Namespace,
    store: Store,
    record: ConversationRecord,
    spec: AgentSpec,
    unsettled: set[int],
    started: AdoptedProcess | None,
) -> int:
    interrupts = _Interrupts(starting=started)
    progress = StartupProgress(spec.name, args.startup_timeout)
    async with anyio.create_task_group() as tg:
        tg.start_soon(interrupts.watch)
        tg.start_soon(progress.run)
        await anyio.lowlevel.checkpoint()  # the receiver is installed before the agent starts
        try:
            with interrupts.everything:
                code = await _run_agent(
                    args, store, record, spec, interrupts, unsettled, progress, started
                )
        finally:
            tg.cancel_scope.cancel()
    if interrupts.count:
        cause = _stdout_cause(interrupts.output) if interrupts.stdout_gone else "interrupted"
        _say(f"{cause}; " + _what_was_stopped(interrupts))
        return EXIT_INTERRUPTED
    return code


def _stdout_cause(output: GuardedOutput | None) -> str:
    error = None if output is None else output.error
    if error is None or isinstance(error, BrokenPipeError):
        return "stdout was closed"
    return f"stdout could not be written ({error.strerror or error})"


def _what_was_stopped(interrupts: _Interrupts) -> str:
    if interrupts.count == 1:
        return interrupts.stopped_what
    return "the agent's process tree was killed at once"


async def _run_agent(
    args: argparse.Namespace,
    store: Store,
    record: ConversationRecord,
    spec: AgentSpec,
    interrupts: _Interrupts,
    unsettled: set[int],
    progress: StartupProgress,
    started: AdoptedProcess | None,
) -> int:
    permission = permission_policy(args.permission)
    interrupts.output = GuardedOutput(sys.stdout, interrupts.stdout_closed)
    printer = EventPrinter(
        json_mode=args.json,
        agent=spec.name,
        permission_mode=permission.mode.value,
        text=cast(TextIO, interrupts.output),
    )
    options = client_options(
        args,
        permission,
        printer.agent_stderr if args.verbose else None,
        printer.capability_refused,
    )
    # The agent's questions are declined by policy, each with a hint (run asks nobody).
    options = dataclasses.replace(options, elicitation=declining(printer.elicitation_declined))
    policy = turn_policy(args)
    code = EXIT_INTERRUPTED
    recording = open_recording(args.record)  # run --record: see .run_recording
    if isinstance(recording, int):
        return recording
    if recording is not None:
        options = dataclasses.replace(options, frame_observer=recording.observe)
    try:
        async with open_supervised_agent(spec, options, started=started) as agent:
            progress.finish()
            interrupts.agent = agent
            interrupts.starting = None
            printer.leave_auth_failure_to_the_end(agent)  # report_auth_required, below
            # The printer outlives the conversation: it prints every event, the final state of
            # a stopped turn included, and ends when the conversation closes its stream.
            try:
                async with anyio.create_task_group() as printing, keeping_leases(store):
                    async with open_conversation(
                        store, agent, record, policy=policy, session_id=args.session_id
                    ) as conversation:
                        printing.start_soon(printer.run, conversation.subscribe(replay=True))
                        interrupts.conversation = conversation
                        _stop_when_lease_lost(store, conversation, interrupts)
                        async with (
                            owner_endpoint(conversation, store),  # issue 22
                            answering_controls(store, conversation),  # issue 23
                        ):
                            code = await _drive(
                                store, conversation, args, interrupts, unsettled, record.paused
                            )
                    interrupts.conversation = None
            except BaseExceptionGroup as group:
                # e.g. the session asked for could not be restored, or the store was removed
                # under the run (from a task of a task group): the error alone, unwrapped
                sole = _sole_error(group)
                if sole is not None:
                    raise sole from None
                raise
            _report_gave_up(agent, printer)
            await printer.flush()
            if not conversation.usage.is_empty:  # the conversation's total, one line
                _say(f"usage: {conversation.usage.summary()}")
            if not interrupts.count:
                # Every message is settled, recorded and printed: the agent's own teardown is
                # not waited for beyond a short window (SETTLED_SHUTDOWN, about 0.5 s).
                agent.expect_nothing_more()
            if agent.auth_failure is not None and not interrupts.count:
                # The queue paused at the refused turn; the rest waits for a login.
                return report_auth_required(printer, spec.name, agent.auth_failure)
    except (SpawnError, AgentError) as exc:
        progress.finish()
        return report_agent_failure(printer, spec.name, exc)
    except BridgeError as exc:
        _say(str(exc))
        return EXIT_TURN_FAILED
    finally:
        progress.finish()
        if recording is not None:
            recording.close()
    return code


async def _drive(
    store: Store,
    conversation: Conversation,
    args: argparse.Namespace,
    interrupts: _Interrupts,
    judged: set[int],
    was_paused: bool,
) -> int:
    """Feed the messages and wait for the queue to drain, or for a signal's stop to close the
    running turn (bounded). ``judged`` holds the seqs this run answers for; the ones it sends
    are added."""
    reason = "paused"
    refused = 0
    async with anyio.create_task_group() as tg:

        async def on_stop() -> None:
            await interrupts.stopped.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(on_stop)
        if (args.resume or args.conversation) and was_paused:
            # Continuing a conversation a stop paused (a signal, chat's /stop): its queue goes on.
            _say(f"conversation {conversation.id} was paused by a stop; its queue goes on")
            await conversation.resume()
        if args.retry_failed:
            await _retry_failed(store, conversation, judged)
        send = _StoringSender(conversation)
        if args.message:
            for text in args.message:
                judged.add(await send(text))
        elif not (args.resume or args.conversation) or not sys.stdin.isatty():
            refused = await read_stdin(send, judged, args.max_message_bytes)
        # The input has ended: an exit of the agent (a crash on the last message) restarts it
        # only if a message still waits for it.
        conversation.agent.restart_only_if(lambda: _messages_waiting(conversation))
        reason = await conversation.wait_idle()
        tg.cancel_scope.cancel()
    if interrupts.lease_lost:  # the turn was cut; the next owner records it
        return EXIT_TURN_FAILED
    if interrupts.stopped.is_set():
        with anyio.move_on_after(conversation.stop_bound_s):
            await conversation.wait_idle()  # the stopped turn closed and was recorded
        return EXIT_INTERRUPTED
    if reason == "agent_gone" or refused:
        return EXIT_TURN_FAILED
    return await _exit_code(store, conversation.id, judged)


def _stop_when_lease_lost(
    store: Store, conversation: Conversation, interrupts: _Interrupts
) -> None:
    """On a shared store (issue 23): when the conversation's lease is lost (another host took
    it over), cut the running turn at once and end the run (exit 4)."""

    def lost() -> None:
        _say(f"the lease of conversation {conversation.id} was lost (another host owns it now)")
        interrupts.lease_lost = True
        interrupts.stopped.set()

    cut_when_lease_lost(store, conversation, lost)


def _messages_waiting(conversation: Conversation) -> bool:
    """Whether a message waits to be prompted (queued, or its start under way)."""
    queue = conversation.queue
    return bool(queue.queued) or queue.starting is not None


class _StoringSender:
    """``conversation.send``, whose store error names the message that was not stored (a full
    disk): the run then stops, and nothing after it is read."""

    def __init__(self, conversation: Conversation) -> None:
        self._conversation = conversation
        self._count = 0

    async def __call__(self, text: str, *, steer: bool = False) -> int:
        self._count += 1
        try:
            return await self._conversation.send(text, steer=steer)
        except QueueStoreError as exc:
            preview = text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"
            raise QueueStoreError(
                f"message {self._count} of this run ({preview!r}) could not be stored, and "
                f"nothing after it was read: {exc}"
            ) from exc


_DELIVERED: Final = frozenset({MessageState.DONE, MessageState.STEERED})
"""A message ended well: its own turn done, or steered into a turn (``steer: `` lines)."""
_PREVIEW: Final = 40
"""How much of a message that could not be stored is quoted."""


async def _retry_failed(store: Store, conversation: Conversation, judged: set[int]) -> None:
    """Send the failed recoverable messages again, explicitly, oldest first (e.g. the ones a
    crash of the bridge failed without prompting). Messages the conversation left queued were
    queued first and go first."""
    stored = await anyio.to_thread.run_sync(lambda: store.messages(conversation.id))
    for message in sorted(stored, key=lambda m: m.seq):
        if message.state is MessageState.FAILED and message.recoverable:
            _say(f"retrying message {message.seq}")
            await conversation.retry(message.seq)
            judged.add(message.seq)


async def _exit_code(store: Store, conversation_id: str, judged: set[int]) -> int:
    """0 when every message this run answers for ended ``done``, else 4 (failed, recovered as
    failed after a crash of the bridge, cancelled by a deadline, or still queued)."""
    stored = await anyio.to_thread.run_sync(lambda: store.messages(conversation_id))
    for message in stored:
        if message.seq in judged and message.state not in _DELIVERED:
            return EXIT_TURN_FAILED
    return EXIT_OK


def _report_gave_up(agent: SupervisedAgent, printer: EventPrinter) -> None:
    """Print ``agent_gave_up`` if the restart policy gave up and the conversation's stream
    ended before the event reached it (the supervisor emits it after failing the turn, and the
    conversation closes as soon as the queue has nobody to run it)."""
    if "agent_gave_up" in printer.shown:
        return
    for event in agent.event_log:
        if isinstance(event, AgentGaveUp):
            name, data = lifecycle_json(event)
            printer.show({"event": name, "ts": round(time.time(), 6), **data})
            return


def _sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The error to report for ``group``: its only error (through nested groups); or, among
    several, the store's (once the store cannot be written, every later commit fails alike)."""
    errors = _leaves(group)
    if len(errors) == 1:
        return errors[0]
    return next((error for error in errors if isinstance(error, QueueStoreError)), None)


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _say(text: str) -> None:
    _say_line(f"acp-bridge: {text}")


def _say_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
