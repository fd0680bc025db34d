"""The agent's questions in the chat: shown above the prompt line, answered by the next line.

The agent's ``session/request_permission`` waits in :meth:`ChatQuestions.ask` until the person
answers (the router routes the line to the oldest question) or the turn is cancelled (the ask
is cancelled with it, and the question disappears). Questions are as many as the agent's
requests in flight, which the client bounds.

An ``elicitation/create`` (:meth:`ChatQuestions.elicit`) is asked the same way, one question
at a time: a form field by field, each typed by its JSON-schema type (Enter takes the default,
an enum is chosen by value or number), then the whole answer to confirm (send, decline, or
edit again); a url is shown in full with its host, and the person consents (they open it
themselves) or declines. Ctrl-C at any of its questions answers ``cancel``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio

from acp_bridge.cli.chat_router import Answer, ChatRouter, Dismiss, Reply
from acp_bridge.cli.chat_screen import ChatScreen
from acp_bridge.client.elicitation import ElicitationHandler
from acp_bridge.client.permissions import PermissionMode, PermissionPolicy, choose_option
from acp_bridge.wire.elicitation import (
    ElicitationRequest,
    ElicitationResponse,
    form_fields,
    parse_field,
)

__all__ = ["ChatQuestions"]


@dataclass
class _Question:
    text: str
    """What the question line shows."""
    request: Any = None
    answered: anyio.Event = field(default_factory=anyio.Event)
    option_id: str | None = None
    reply: str | None = None
    """A free-text question's line; None when it was dismissed."""


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
        call = request.tool_call
        title = call.title or "a tool call"
        about = f"{title} ({call.kind})" if call.kind else title
        question = _Question(
            f"the agent asks permission for {about}: y (allow once), n (reject), "
            "a (always allow)?",
            request,
        )
        await self._wait(question, free_text=False)
        return question.option_id

    def elicitation_handler(self) -> ElicitationHandler:
        """Answers the agent's elicitations here, both modes."""
        return ElicitationHandler(self.elicit)

    async def elicit(self, request: ElicitationRequest) -> ElicitationResponse:
        """Ask an ``elicitation/create`` (see the module's text)."""
        self._note(f"the agent asks: {' '.join(request.message.split())}")
        if request.mode == "url":
            return await self._elicit_url(request)
        return await self._elicit_form(request)

    def reply(self, reply: Reply | Dismiss) -> None:
        question = self._waiting.get(reply.question)
        if question is None:
            return
        question.reply = reply.text if isinstance(reply, Reply) else None
        question.answered.set()

    async def _elicit_form(self, request: ElicitationRequest) -> ElicitationResponse:
        fields = form_fields(request.requested_schema)
        while True:
            content: dict[str, Any] = {}
            for one in fields:
                empty = "Enter: the default" if one.default is not None else "Enter: skip"
                while True:
                    typed = await self._text(f"{one.describe()} ({empty}; Ctrl-C cancels): ")
                    if typed is None:
                        return ElicitationResponse.cancel()
                    ok, value = parse_field(one, typed)
                    if ok:
                        break
                    self._note(str(value))
                if value is not None:
                    content[one.name] = value
            shown = json.dumps(content, ensure_ascii=False)
            while True:
                typed = await self._text(f"send {shown}? y (send), n (decline), e (edit again): ")
                choice = None if typed is None else typed.strip().lower()
                if choice is None:
                    return ElicitationResponse.cancel()
                if choice in ("y", "yes"):
                    return ElicitationResponse.accept(content)
                if choice in ("n", "no"):
                    return ElicitationResponse.decline()
                if choice in ("e", "edit"):
                    break

    async def _elicit_url(self, request: ElicitationRequest) -> ElicitationResponse:
        url = request.url or ""
        host = urlsplit(url).hostname or "?"
        text = f"open {url} (host {host}) yourself? y (accept), n (decline): "
        while True:
            typed = await self._text(text)
            if typed is None:
                return ElicitationResponse.cancel()
            choice = typed.strip().lower()
            if choice in ("y", "yes"):
                return ElicitationResponse.accept()
            if choice in ("n", "no"):
                return ElicitationResponse.decline()

    async def _text(self, text: str) -> str | None:
        """Ask a free-text question: the line typed, or None (dismissed)."""
        question = _Question(text)
        await self._wait(question, free_text=True)
        return question.reply

    async def _wait(self, question: _Question, *, free_text: bool) -> None:
        number = next(self._numbers)
        self._waiting[number] = question
        self._router.question_asked(number, free_text=free_text)
        self._show()
        try:
            await question.answered.wait()
        finally:
            self._waiting.pop(number, None)
            self._router.question_gone(number)
            self._show()

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
        self._screen.set_question(self._waiting[number].text)
