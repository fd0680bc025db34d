"""Permission questions in the chat: shown above the prompt line, answered by the next line.

The agent's ``session/request_permission`` waits in :meth:`ChatQuestions.ask` until the person
answers (the router routes the line to the oldest question) or the turn is cancelled (the ask
is cancelled with it, and the question disappears). Questions are as many as the agent's
requests in flight, which the client bounds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from acp_bridge.cli.chat_router import Answer, ChatRouter
from acp_bridge.cli.chat_screen import ChatScreen
from acp_bridge.client.permissions import PermissionMode, PermissionPolicy, choose_option

__all__ = ["ChatQuestions"]


@dataclass
class _Question:
    request: Any
    answered: anyio.Event = field(default_factory=anyio.Event)
    option_id: str | None = None


class ChatQuestions:
    def __init__(self, router: ChatRouter, screen: ChatScreen, note: Callable[[str], None]):
        self._router = router
        self._screen = screen
        self._note = note
        self._waiting: dict[int, _Question] = {}
        self._numbers = itertools.count(1)

    def policy(self, mode_name: str) -> PermissionPolicy:
        """The policy for ``--permission``: ``ask`` asks here."""
        mode = PermissionMode(mode_name)
        if mode is PermissionMode.ASK:
            return PermissionPolicy(mode, ask=self.ask)
        return PermissionPolicy(mode)

    async def ask(self, request: Any) -> str | None:
        """The chosen option id, or None (cancelled)."""
        number = next(self._numbers)
        question = _Question(request)
        self._waiting[number] = question
        self._router.question_asked(number)
        self._show()
        try:
            await question.answered.wait()
        finally:
            self._waiting.pop(number, None)
            self._router.question_gone(number)
            self._show()
        return question.option_id

    def answer(self, answer: Answer) -> None:
        """Options by kind, never by position: y allows (once, else always), n rejects (once,
        else always), a allows always or asks again."""
        question = self._waiting.get(answer.question)
        if question is None:
            return
        options = list(question.request.options)
        if answer.kind == "allow_always":
            chosen = next((o for o in options if o.kind == "allow_always"), None)
            if chosen is None:
                self._note("the agent offers no always-allow here; answer y or n")
                return
        else:
            chosen = choose_option(options, "allow" if answer.kind == "allow_once" else "reject")
        question.option_id = chosen.option_id if chosen is not None else None
        question.answered.set()

    def _show(self) -> None:
        number = self._router.question
        if number is None:
            self._screen.set_question("")
            return
        call = self._waiting[number].request.tool_call
        title = call.title or "a tool call"
        about = f"{title} ({call.kind})" if call.kind else title
        self._screen.set_question(
            f"the agent asks permission for {about}: y (allow once), n (reject), "
            "a (always allow)?"
        )
