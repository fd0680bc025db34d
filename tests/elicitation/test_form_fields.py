"""The pure parts: a form's fields read from ``requestedSchema``, typed input parsed by field
type, the wire models and the capabilities a handler advertises."""

from __future__ import annotations

from typing import Any

import pytest

from acp_bridge.client.elicitation import ElicitationHandler
from acp_bridge.wire.elicitation import (
    ElicitationRequest,
    ElicitationResponse,
    FormField,
    form_fields,
    parse_field,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "description": "as you like"},
        "n": {"type": "integer", "default": 3},
        "ratio": {"type": "number"},
        "ok": {"type": "boolean", "default": False},
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l"}]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}},
        "bad": "not a schema",
    },
    "required": ["name", "size"],
}


def fields() -> dict[str, FormField]:
    return {f.name: f for f in form_fields(SCHEMA)}


def test_fields_keep_the_schema_order_and_skip_malformed_properties() -> None:
    listed = form_fields(SCHEMA)
    assert [f.name for f in listed] == ["name", "n", "ratio", "ok", "size", "tags"]
    assert fields()["size"].choices == (("s", "Small"), ("l", "l"))  # no title: the value
    assert fields()["tags"].choices == (("a", "a"), ("b", "b"), ("c", "c"))
    assert form_fields(None) == [] and form_fields({"properties": []}) == []


def test_a_field_describes_its_type_choices_default_and_need() -> None:
    assert fields()["name"].describe() == "Name (string, required): as you like"
    assert fields()["n"].describe() == "n (integer, default 3)"
    assert fields()["ok"].describe() == "ok (boolean, default no)"
    assert fields()["tags"].describe() == "tags (array, any of a|b|c, comma-separated)"


@pytest.mark.parametrize(
    ("name", "typed", "expected"),
    [
        ("name", "  Ada ", (True, "Ada")),
        ("name", "", (False, "Name is required")),
        ("n", "", (True, 3)),
        ("n", "7", (True, 7)),
        ("n", "7.5", (False, "'7.5' is not a whole number")),
        ("ratio", "0.25", (True, 0.25)),
        ("ratio", "2", (True, 2)),
        ("ratio", "inf", (False, "'inf' is not a finite number")),
        ("ratio", "", (True, None)),
        ("ok", "y", (True, True)),
        ("ok", "No", (True, False)),
        ("ok", "perhaps", (False, "answer y or n")),
        ("size", "s", (True, "s")),
        ("size", "1", (True, "s")),
        ("size", "m", (False, "'m' is not one of s|l")),
        ("tags", "a, 3", (True, ["a", "c"])),
        ("tags", "a,z", (False, "'z' is not one of a|b|c")),
    ],
)
def test_typed_input_is_parsed_by_the_field_type(name: str, typed: str, expected: Any) -> None:
    assert parse_field(fields()[name], typed) == expected


def test_the_wire_models_keep_unknown_fields_and_dump_in_spec_shape() -> None:
    wire = {"sessionId": "s", "mode": "_custom", "message": "m", "_meta": {"x": 1}, "extra": 2}
    assert ElicitationRequest.parse(wire).dump() == wire
    assert ElicitationResponse.accept({"a": 1}).dump() == {"action": "accept", "content": {"a": 1}}
    assert ElicitationResponse.accept().dump() == {"action": "accept"}
    assert ElicitationResponse.decline().dump() == {"action": "decline"}
    assert ElicitationResponse.cancel().dump() == {"action": "cancel"}


def test_a_handler_advertises_and_answers_only_its_modes() -> None:
    async def answer(request: ElicitationRequest) -> ElicitationResponse:
        return ElicitationResponse.decline()

    form_only = ElicitationHandler(answer, url=False)
    assert form_only.capabilities() == {"form": {}}
    assert form_only.answers("form") and not form_only.answers("url")
    assert not form_only.answers("_custom")
    assert ElicitationHandler(answer).capabilities() == {"form": {}, "url": {}}
