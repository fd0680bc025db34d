"""``/mode`` and ``/model``: what the agent offers for its session, listed or chosen.

Modes come from a config option of category ``mode`` when the agent offers one, else from the
legacy ``modes`` of the session. Models come from a select config option of category ``model``.
"""

from __future__ import annotations

from typing import Any

from acp_bridge.cli.chat_router import ChooseMode, ChooseModel
from acp_bridge.cli.columns import aligned
from acp_bridge.client.session import Session
from acp_bridge.conversation.conversation import Conversation

__all__ = ["choose_mode", "choose_model", "list_models", "list_modes", "settings_command"]


async def settings_command(conversation: Conversation, action: ChooseMode | ChooseModel) -> str:
    """What ``/mode [ID]`` or ``/model [ID]`` shows: the list, or the choice made."""
    if isinstance(action, ChooseMode):
        if action.mode_id is None:
            return list_modes(conversation.session)
        return await choose_mode(conversation, action.mode_id)
    if action.model_id is None:
        return list_models(conversation.session)
    return await choose_model(conversation, action.model_id)


def _option(session: Session, category: str) -> Any | None:
    for option in session.config_options:
        if getattr(option, "category", None) == category and getattr(option, "type", "") in (
            "select",
        ):
            return option
    return None


def _values(option: Any) -> list[tuple[str, str]]:
    """(value, name) of a select option, flat or grouped."""
    found: list[tuple[str, str]] = []
    for entry in option.options:
        if isinstance(entry.get("options"), list):
            found += [
                (str(item.get("value")), str(item.get("name", "")))
                for item in entry["options"]
                if isinstance(item, dict)
            ]
        elif "value" in entry:
            found.append((str(entry["value"]), str(entry.get("name", ""))))
    return found


def _listing(title: str, current: str | None, choices: list[tuple[str, str]], how: str) -> str:
    """One choice a line, the current one marked, the names in one column whatever the ids'
    widths."""
    rows = [
        (f"{'*' if value == current else ' '} {value}", *([name] if name and name != value else []))
        for value, name in choices
    ]
    return "\n".join([f"{title}:", *aligned(rows, indent=" "), how])


def list_modes(session: Session) -> str:
    option = _option(session, "mode")
    if option is not None:
        return _listing("modes", option.current_value, _values(option), "choose one: /mode ID")
    if session.modes is not None and session.modes.available_modes:
        current = session.mode_id or session.modes.current_mode_id
        choices = [(mode.id, mode.name) for mode in session.modes.available_modes]
        return _listing("modes", current, choices, "choose one: /mode ID")
    return "the agent offers no modes"


def list_models(session: Session) -> str:
    option = _option(session, "model")
    if option is None:
        return "the agent offers no model choice"
    return _listing("models", option.current_value, _values(option), "choose one: /model ID")


async def choose_mode(conversation: Conversation, mode_id: str) -> str:
    option = _option(conversation.session, "mode")
    if option is not None:
        _check(mode_id, option, "mode")
        await conversation.set_config_option(option.id, mode_id)
    else:
        modes = conversation.session.modes
        offered = [mode.id for mode in modes.available_modes] if modes is not None else []
        if offered and mode_id not in offered:
            choices = ", ".join(offered)
            raise ValueError(f"the agent offers no mode {mode_id!r}; it offers {choices}")
        await conversation.set_mode(mode_id)
    return f"mode: {mode_id}"


async def choose_model(conversation: Conversation, model_id: str) -> str:
    option = _option(conversation.session, "model")
    if option is None:
        raise ValueError("the agent offers no model choice")
    _check(model_id, option, "model")
    await conversation.set_config_option(option.id, model_id)
    return f"model: {model_id}"


def _check(value: str, option: Any, what: str) -> None:
    offered = [choice for choice, _ in _values(option)]
    if value not in offered:
        raise ValueError(f"the agent offers no {what} {value!r}; it offers {', '.join(offered)}")
