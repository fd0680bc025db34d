"""``elicitation/create`` and ``elicitation/complete`` (stable in ACP v1, schema 1.21).

The agent asks the user for structured input, in one of two modes:

* ``form``: ``requestedSchema``, a flat object schema whose properties are ``string`` (an enum
  when ``enum`` or ``oneOf`` is set), ``number``, ``integer``, ``boolean`` or ``array`` (a
  multi-select of strings);
* ``url``: ``elicitationId`` and ``url``, an out-of-band interaction; ``elicitation/complete``
  ``{elicitationId}`` may follow once it is done.

The scope is ``sessionId`` (+ ``toolCallId``) or ``requestId``. The answer is
``{action:"accept", content?}``, ``{action:"decline"}`` or ``{action:"cancel"}``. A client that
did not advertise the mode answers -32602. Pure: the form's fields and typed input parsing are
here too, so every front-end reads a schema one way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Self

from acp_bridge.wire.base import WireModel

__all__ = [
    "ELICITATION_MODES",
    "ElicitationComplete",
    "ElicitationRequest",
    "ElicitationResponse",
    "FormField",
    "form_fields",
    "parse_field",
]

ELICITATION_MODES: Final = ("form", "url")


class ElicitationRequest(WireModel):
    """``elicitation/create`` params (unknown fields and modes kept whole)."""

    mode: str
    message: str = ""
    session_id: str | None = None
    tool_call_id: str | None = None
    request_id: int | str | None = None
    requested_schema: dict[str, Any] | None = None
    elicitation_id: str | None = None
    url: str | None = None

    def about(self) -> str:
        """What is asked, in a few words: the message, and the url in url mode."""
        message = " ".join(self.message.split()) or "(no message)"
        if self.mode == "url":
            return f"{message} (url {self.url})"
        return message


class ElicitationResponse(WireModel):
    """The client's answer."""

    action: Literal["accept", "decline", "cancel"] | str
    content: dict[str, Any] | None = None

    @classmethod
    def accept(cls, content: dict[str, Any] | None = None) -> Self:
        if content is None:
            return cls(action="accept")
        return cls(action="accept", content=content)

    @classmethod
    def decline(cls) -> Self:
        return cls(action="decline")

    @classmethod
    def cancel(cls) -> Self:
        return cls(action="cancel")


class ElicitationComplete(WireModel):
    """``elicitation/complete`` params: the url-mode interaction ``elicitation_id`` is done."""

    elicitation_id: str


# --- form fields ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FormField:
    """One property of a form's ``requestedSchema``, as a person is asked it."""

    name: str
    type: str
    """``string``, ``number``, ``integer``, ``boolean``, ``array`` (or a type we do not know,
    asked as text)."""
    title: str
    description: str
    required: bool
    default: Any = None
    choices: tuple[tuple[str, str], ...] = ()
    """(value, label) pairs of an enum (``enum``, ``oneOf``, or an array's ``items``)."""

    def describe(self) -> str:
        """``title (integer, one of a|b, default 3, required)``."""
        parts = [self.type]
        if self.choices:
            parts.append("one of " + "|".join(v for v, _ in self.choices))
            if self.type == "array":
                parts[-1] = "any of " + parts[-1][len("one of ") :] + ", comma-separated"
        if self.default is not None:
            parts.append(f"default {_show(self.default)}")
        if self.required:
            parts.append("required")
        text = f"{self.title} ({', '.join(parts)})"
        return f"{text}: {self.description}" if self.description else text


def form_fields(schema: Mapping[str, Any] | None) -> list[FormField]:
    """The fields of a form's ``requestedSchema``, in the schema's order (malformed properties
    are skipped)."""
    if not isinstance(schema, Mapping):
        return []
    properties = schema.get("properties")
    required = schema.get("required")
    needed = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    fields: list[FormField] = []
    if not isinstance(properties, Mapping):
        return fields
    for name, prop in properties.items():
        if not isinstance(name, str) or not isinstance(prop, Mapping):
            continue
        kind = prop.get("type")
        title = prop.get("title")
        description = prop.get("description")
        fields.append(
            FormField(
                name=name,
                type=kind if isinstance(kind, str) else "string",
                title=title if isinstance(title, str) and title else name,
                description=description if isinstance(description, str) else "",
                required=name in needed,
                default=prop.get("default"),
                choices=_choices(prop.get("items") if kind == "array" else prop),
            )
        )
    return fields


def parse_field(field: FormField, text: str) -> tuple[bool, Any]:
    """``(True, value)`` for what a person typed, or ``(False, reason)``.

    An empty answer is the default (``(True, None)`` when there is none: left out).
    """
    text = text.strip()
    if not text:
        if field.default is None and field.required:
            return False, f"{field.title} is required"
        return True, field.default
    if field.type == "boolean":
        lowered = text.lower()
        if lowered in ("y", "yes", "true", "1"):
            return True, True
        if lowered in ("n", "no", "false", "0"):
            return True, False
        return False, "answer y or n"
    if field.type == "integer":
        try:
            return True, int(text)
        except ValueError:
            return False, f"{text!r} is not a whole number"
    if field.type == "number":
        try:
            value = float(text)
        except ValueError:
            return False, f"{text!r} is not a number"
        if not math.isfinite(value):
            return False, f"{text!r} is not a finite number"
        return True, int(value) if value.is_integer() and "." not in text else value
    if field.type == "array":
        picked = [part.strip() for part in text.split(",") if part.strip()]
        return _all_chosen(field, picked)
    if field.choices:
        ok, chosen = _all_chosen(field, [text])
        return (True, chosen[0]) if ok else (False, chosen)
    return True, text


def _all_chosen(field: FormField, picked: list[str]) -> tuple[bool, Any]:
    if not field.choices:
        return True, picked
    values = [v for v, _ in field.choices]
    chosen: list[str] = []
    for part in picked:
        if part in values:
            chosen.append(part)
        elif part.isdigit() and 1 <= int(part) <= len(values):
            chosen.append(values[int(part) - 1])
        else:
            return False, f"{part!r} is not one of {'|'.join(values)}"
    return True, chosen


def _choices(prop: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(prop, Mapping):
        return ()
    listed: list[tuple[str, str]] = []
    enum = prop.get("enum")
    if isinstance(enum, list):
        listed += [(v, v) for v in enum if isinstance(v, str)]
    for key in ("oneOf", "anyOf"):
        options = prop.get(key)
        if isinstance(options, list):
            for option in options:
                if isinstance(option, Mapping) and isinstance(option.get("const"), str):
                    label = option.get("title")
                    const = option["const"]
                    listed.append((const, label if isinstance(label, str) else const))
    return tuple(listed)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)
