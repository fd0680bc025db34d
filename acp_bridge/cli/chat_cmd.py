"""``acp-bridge chat``: an interactive loop for a person, over the same conversation layer and
store as ``run``.

Each typed line is stored and queued (``Conversation.send``); the agent's text streams to stdout
above the prompt line (:mod:`.chat_screen`), with a status line on stderr while a turn runs.
:mod:`.chat_router` decides where every input goes; this module performs it.

Leaving: ``/quit``, Ctrl-D, Ctrl-C at an idle prompt, or a second Ctrl-C while the first one's
cancel is under way. A running turn is cancelled and waited for (bounded by
:attr:`Conversation.stop_bound_s`), so the store records it ``cancelled``; then the agent's
process tree is stopped. Messages still queued stay queued in the store (``--resume`` sends
them). One more Ctrl-C (or SIGTERM) while leaving kills the agent's tree at once.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import os
import signal
import sys
from typing import Any, Final, TextIO, cast

import anyio
import anyio.from_thread
import anyio.lowlevel

from acp_bridge.cli.chat_questions import ChatQuestions
from acp_bridge.cli.chat_reader import (
    EndOfInput,
    History,
    Line,
    TypedLineReader,
    line_buffer,
    restore_terminal,
    save_terminal,
)
from acp_bridge.cli.chat_router import (
    Answer,
    Cancel,
    ChatRouter,
    ChooseMode,
    ChooseModel,
    Dismiss,
    Quit,
    QuitNow,
    Reply,
    Resume,
    Retry,
    Say,
    Send,
    Stop,
)
from acp_bridge.cli.chat_screen import ChatScreen, ScreenStream, streams_through
from acp_bridge.cli.chat_settings import settings_command
from acp_bridge.cli.conversation_setup import (
    ClaimedConversation,
    agent_spec,
    claim_conversation,
    client_options,
    default_state_dir,
    turn_policy,
)
from acp_bridge.cli.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_TURN_FAILED
from acp_bridge.cli.failures import report_agent_failure, report_auth_required
from acp_bridge.cli.guarded_output import GuardedOutput
from acp_bridge.cli.named_agents import resolve_agent
from acp_bridge.cli.progress import StartupProgress
from acp_bridge.cli.render import EventPrinter
from acp_bridge.cli.store_open import (
    answering_controls,
    cut_when_lease_lost,
    keeping_leases,
)
from acp_bridge.client.supervisor import SupervisedAgent, open_supervised_agent
from acp_bridge.conversation.conversation import STOP_NOW_DEADLINE_S, Conversation
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.queue_states import RETRYABLE_STATES, GateState, MessageState
from acp_bridge.errors import AgentError, BridgeError, SpawnError
from acp_bridge.host.owner_endpoint import owner_endpoint
from acp_bridge.process.spec import AgentSpec

__all__ = ["chat_command"]

PROMPT: Final = "> "
_STATUS_EVERY_S: Final = 0.5
_INPUTS: Final = 16
"""Inputs waiting for the loop (lines come one at a time; the rest are signals): at the bound a
signal's input is dropped, as the ones before it already ask for the same."""
_SPINNER: Final = "-\\|/"


def chat_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if not sys.stdin.isatty():
        parser.error("chat: stdin is not a terminal; to send messages from a pipe use run")
    agent = resolve_agent(
        parser, args, sys.argv[1:], required=not (args.resume or args.conversation)
    )
    claimed = claim_conversation(args, agent, verbose=bool(args.verbose))
    if isinstance(claimed, int):
        return claimed
    spec = agent_spec(agent, claimed.record)
    saved = save_terminal()
    try:
        return anyio.run(_chat, args, claimed, spec)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        restore_terminal(saved)  # readline changes them while it reads; we may leave mid-read
        claimed.release()


async def _chat(args: argparse.Namespace, claimed: ClaimedConversation, spec: AgentSpec) -> int:
    return await _Chat(args, claimed, spec).run()


class _Chat:
    def __init__(
        self, args: argparse.Namespace, claimed: ClaimedConversation, spec: AgentSpec
    ) -> None:
        self.args = args
        self.claimed = claimed
        self.spec = spec
        self.router = ChatRouter(
            lambda: self.conversation.session.commands if self.conversation else ()
        )
        # A terminal that went away (EIO: the window closed, tmux kill-session) or output that
        # fails otherwise: treated as the hangup it is (see _output_gone).
        self.screen = ChatScreen(
            cast(TextIO, GuardedOutput(sys.stdout, self._output_gone)),
            cast(TextIO, GuardedOutput(sys.stderr, self._output_gone)),
            line_buffer=line_buffer,
        )
        self._hung_up = False
        self._watching = False  # the signal watcher runs: a SIGHUP is acted upon, not fatal
        self.questions = ChatQuestions(self.router, self.screen, self._note)
        self.out = ScreenStream(self.screen, "out", sys.stdout)
        self.err = ScreenStream(self.screen, "err", sys.stderr)
        self.printer = EventPrinter(
            json_mode=False,
            agent=spec.name,
            permission_mode=args.permission,
            text=cast(TextIO, self.out),
            notes=cast(TextIO, self.err),
        )
        self.history = History(default_state_dir() / "chat_history")
        self.everything = anyio.CancelScope()
        self.agent: SupervisedAgent | None = None
        self.conversation: Conversation | None = None
        self.quit: Quit | None = None
        self.running: int | None = None  # the seq of the running turn
        self.turn_began = 0.0
        self.lease_lost = False
        """The conversation's lease in a shared store was lost (issue 23): the chat ends, 4."""
        self._reading = anyio.CancelScope()
        self._send, self._inputs = anyio.create_memory_object_stream[object](_INPUTS)

    async def run(self) -> int:
        progress = StartupProgress(self.spec.name, self.args.startup_timeout)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_signals)
            tg.start_soon(progress.run)
            await anyio.lowlevel.checkpoint()  # the receiver is installed before the agent
            code = EXIT_INTERRUPTED  # unless the agent's run returns
            try:
                with self.everything:
                    code = await self._run_agent(progress)
            finally:
                tg.cancel_scope.cancel()
        if self.quit is not None and self.quit.interrupted:
            return EXIT_INTERRUPTED
        return code

    # -- signals -------------------------------------------------------------------------

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            self._watching = True
            try:
                async for signum in signals:
                    self._on_signal(signum)
            finally:
                self._watching = False

    def _on_signal(self, signum: int) -> None:
        action = self.router.interrupt() if signum == signal.SIGINT else self.router.terminate()
        if isinstance(action, QuitNow):
            self._quit_now()
        elif self.conversation is None:  # still starting (or already closed)
            self.quit = Quit(interrupted=True)
            self.everything.cancel()
        else:
            self._post(action)

    def _output_gone(self) -> None:
        """stdout or stderr can no longer be written: leave as on SIGHUP (the running turn is
        recorded cancelled, the agent stopped, exit 130). Through the signal itself, so it
        takes the one path a hangup takes, from whichever thread was writing; once."""
        if not self._hung_up and self._watching:
            self._hung_up = True
            os.kill(os.getpid(), signal.SIGHUP)

    def _quit_now(self) -> None:
        self.quit = Quit(interrupted=True)
        if self.agent is not None:
            self.agent.kill_now()
        if self.conversation is not None:
            self.conversation.stop_now()
        self.everything.deadline = min(
            self.everything.deadline, anyio.current_time() + STOP_NOW_DEADLINE_S
        )

    def _post(self, item: object) -> None:
        with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError):
            self._send.send_nowait(item)

    # -- the agent and the conversation --------------------------------------------------

    async def _run_agent(self, progress: StartupProgress) -> int:
        args = self.args
        options = client_options(
            args,
            self.questions.policy(args.permission),
            self.printer.agent_stderr if args.verbose else None,
            self.printer.capability_refused,
        )
        # The agent's questions (elicitation/create) are asked on the prompt line.
        options = dataclasses.replace(options, elicitation=self.questions.elicitation_handler())
        policy = turn_policy(args)
        store, record = self.claimed.store, self.claimed.record
        try:
            async with open_supervised_agent(self.spec, options) as agent:
                progress.finish()
                self.agent = agent
                with streams_through(self.out, self.err):
                    try:
                        async with anyio.create_task_group() as printing, keeping_leases(store):
                            async with open_conversation(
                                store, agent, record, policy=policy, session_id=args.session_id
                            ) as conversation:
                                printing.start_soon(
                                    self._print, conversation.subscribe(replay=True)
                                )
                                self.conversation = conversation
                                cut_when_lease_lost(store, conversation, self._lease_lost)
                                async with (
                                    owner_endpoint(conversation, store),  # issue 22
                                    answering_controls(store, conversation),  # issue 23
                                ):
                                    await self._converse(conversation)
                            self.conversation = None
                    except BaseExceptionGroup as group:
                        if len(group.exceptions) == 1:
                            raise group.exceptions[0] from None
                        raise
                    finally:
                        self.screen.close()
                if conversation.usage is not None and not conversation.usage.is_empty:
                    _say(f"usage: {conversation.usage.summary()}")
                if agent.auth_failure is not None and self.quit is None:
                    return report_auth_required(self.printer, self.spec.name, agent.auth_failure)
        except (SpawnError, AgentError) as exc:
            progress.finish()
            return report_agent_failure(self.printer, self.spec.name, exc)
        except BridgeError as exc:
            _say(str(exc))
            return EXIT_TURN_FAILED
        finally:
            progress.finish()
        return EXIT_TURN_FAILED if self.lease_lost else EXIT_OK

    def _lease_lost(self) -> None:
        """Another host owns the conversation now (its turn was cut already): say so, and
        leave; nothing more is written (the next owner ends the cut message failed and
        recoverable)."""
        self.lease_lost = True
        cut = f"; message {self.running} was cut" if self.running is not None else ""
        self._note(
            f"the lease of conversation {self.claimed.record.id} was lost (another host owns "
            f"it now){cut}; leaving"
        )
        self._reading.cancel()

    async def _print(self, events: Any) -> None:
        with events:
            async for event in events:
                self._observe(event)
                self.printer.show(event)

    def _observe(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "turn_started":
            self.running = event.get("seq")
            self.turn_began = anyio.current_time()
            self.router.turn_started()
        elif kind in ("turn_ended", "turn_failed") and event.get("seq") == self.running:
            self.running = None
            self.router.turn_ended()
            self._show_status()

    async def _converse(self, conversation: Conversation) -> None:
        self.history.load()
        self._note(
            f"chatting with {self.spec.name} (conversation {conversation.id}); "
            "/help lists the commands, Ctrl-D leaves"
        )
        if self.claimed.record.paused and self._depth(starting_counts=True):
            self._note(
                f"{self._depth()} queued message(s) from before are paused: /resume sends "
                "them (a new message is sent after them)"
            )
        token = anyio.lowlevel.current_token()
        reader = TypedLineReader(
            self.screen, lambda item: anyio.from_thread.run_sync(self._post, item, token=token)
        )
        reader.start(PROMPT)
        with self._reading:  # cancelled when the lease is lost
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._status_loop)
                async for item in self._inputs:
                    action: object = item
                    if isinstance(item, Line):
                        if self.router.question is None or item.text.lstrip().startswith("/"):
                            self.history.add(item.text)  # answers to questions stay out of it
                        action = self.router.line(item.text)
                    elif isinstance(item, EndOfInput):
                        action = self.router.end_of_input()
                    if isinstance(action, Quit):
                        self.quit = action
                        break
                    try:
                        await self._perform(action)
                    except (BridgeError, ValueError) as exc:
                        self._note(str(exc))
                    if isinstance(item, Line):
                        reader.next(PROMPT)
                tg.cancel_scope.cancel()
        reader.stop()
        self.history.save()
        self._leave()

    def _leave(self) -> None:
        """Leaving: open_conversation's exit cancels the running turn and waits (bounded)
        until it is recorded; the rest stays queued. Stopping the agent follows."""
        if self.agent is not None:
            self.agent.stop_restarting()  # a quarantine now ends the agent: we are leaving
        if self.running is not None and not self.lease_lost:
            # Closing the conversation cancels the turn and waits for it (bounded), without
            # pausing the queue: what is still queued goes first on --resume.
            self._note(f"cancelling message {self.running} and leaving")

    # -- performing ----------------------------------------------------------------------

    async def _perform(self, action: object) -> None:
        conversation = self.conversation
        assert conversation is not None
        if isinstance(action, Send):
            await self._send_line(conversation, action.text, steer=action.steer)
        elif isinstance(action, Answer):
            self.questions.answer(action)
        elif isinstance(action, Reply | Dismiss):
            self.questions.reply(action)
        elif isinstance(action, Cancel):
            self._note(f"cancelling message {self.running}; the queue goes on")
            await conversation.stop()
            await conversation.resume()
        elif isinstance(action, Stop):
            await self._stop(conversation)
        elif isinstance(action, Resume):
            await conversation.resume()
        elif isinstance(action, Retry):
            await self._retry(conversation, action.seq)
        elif isinstance(action, ChooseMode | ChooseModel):
            self._note(await settings_command(conversation, action), prefix="")
        elif isinstance(action, Say):
            self._note(action.text, prefix="")

    async def _send_line(
        self, conversation: Conversation, text: str, *, steer: bool = False
    ) -> None:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > self.args.max_message_bytes:
            self._note(
                f"that line is {size} bytes, over --max-message-bytes "
                f"{self.args.max_message_bytes}; not sent"
            )
            return
        busy = self.running is not None or self._depth(starting_counts=True) > 0
        seq = await conversation.send(text, steer=steer)
        if steer:
            self._note(f"steering message {seq} into the running turn")
        elif busy:
            self._note(f"queued as message {seq} ({self._depth()} waiting)")
        self._show_status()

    async def _stop(self, conversation: Conversation) -> None:
        running = self.running
        await conversation.stop()
        depth = self._depth()
        kept = (
            f"; {depth} queued message{'s' if depth != 1 else ''} kept: /resume sends them"
            if depth
            else ""
        )
        if running is not None:
            self._note(
                f"cancelling message {running} (the agent gets {self.args.grace:g} s); the "
                f"queue is paused{kept}; Ctrl-C again leaves"
            )
        else:
            self._note(f"the queue is paused{kept}")
        self._show_status()

    async def _retry(self, conversation: Conversation, seq: int) -> None:
        found = {message.seq: message for message in conversation.messages()}
        message = found.get(seq)
        if message is None or message.state not in RETRYABLE_STATES:
            what = "unknown" if message is None else message.state.value
            self._note(f"message {seq} is {what}; only a cancelled or failed one can be retried")
            return
        await conversation.retry(seq)
        self._note(f"message {seq} queued again")

    # -- status ------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """The queue is paused (a /stop, a stop from another shell, or one before this chat):
        the conversation's own gate says so."""
        conversation = self.conversation
        return conversation is not None and conversation.queue.gate is GateState.PAUSED

    def _depth(self, *, starting_counts: bool = False) -> int:
        """Messages waiting behind the running turn (and, unless ``starting_counts``, behind
        the one about to start)."""
        conversation = self.conversation
        if conversation is None:
            return 0
        waiting = sum(
            1
            for message in conversation.messages()
            if message.state is MessageState.QUEUED and message.seq != self.running
        )
        if self.running is None and not self.paused and waiting and not starting_counts:
            waiting -= 1  # the head is starting: it is no longer waiting
        return waiting

    async def _status_loop(self) -> None:
        for tick in itertools.count():
            self._show_status(tick)
            await anyio.sleep(_STATUS_EVERY_S)

    def _show_status(self, tick: int = 0) -> None:
        depth = self._depth()
        queued = f"{depth} queued" + (" (paused: /resume sends them)" if self.paused else "")
        if self.running is not None:
            elapsed = anyio.current_time() - self.turn_began
            text = f"{_SPINNER[tick % len(_SPINNER)]} {self.spec.name} working {elapsed:.0f} s"
            text += f", {queued}" if depth else ""
            text += " (Ctrl-C cancels)"
        else:
            text = queued if depth else ""
        self.screen.set_status(text)

    def _note(self, text: str, *, prefix: str = "acp-bridge: ") -> None:
        self.screen.write("err", prefix + text + "\n")


def _say(text: str) -> None:
    print(f"acp-bridge: {text}", file=sys.stderr, flush=True)
