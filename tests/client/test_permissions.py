"""PermissionPolicy: every mode against option sets in every order; options chosen by kind."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest

from acp_bridge.client.permissions import (
    READ_ONLY_TOOL_KINDS,
    PermissionMode,
    PermissionPolicy,
    choose_option,
)
from acp_bridge.wire.client_methods import (
    PermissionOption,
    RequestPermissionRequest,
    RequestPermissionResponse,
)

pytestmark = pytest.mark.anyio

ALL_KINDS = ("allow_once", "allow_always", "reject_once", "reject_always")


def option(kind: str) -> dict[str, str]:
    return {"optionId": f"id-{kind}", "name": kind.replace("_", " "), "kind": kind}


def request(kinds: tuple[str, ...], tool_kind: str | None = "edit") -> RequestPermissionRequest:
    tool_call: dict[str, Any] = {"toolCallId": "call-1", "title": "do a thing"}
    if tool_kind is not None:
        tool_call["kind"] = tool_kind
    return RequestPermissionRequest.parse(
        {"sessionId": "s1", "toolCall": tool_call, "options": [option(k) for k in kinds]}
    )


def selected(response: RequestPermissionResponse) -> str | None:
    """The chosen option's kind (ids are ``id-<kind>``), or None for cancelled."""
    wire = response.dump()["outcome"]
    if wire["outcome"] == "cancelled":
        return None
    assert wire["outcome"] == "selected"
    option_id: str = wire["optionId"]
    return option_id.removeprefix("id-")


# Every non-empty subset of the four kinds, in every order: 64 option sets.
OPTION_SETS = [
    perm
    for size in range(1, 5)
    for subset in itertools.combinations(ALL_KINDS, size)
    for perm in itertools.permutations(subset)
]


def expected(kinds: tuple[str, ...], want: str) -> str | None:
    order = ("allow_once", "allow_always") if want == "allow" else ("reject_once", "reject_always")
    return next((k for k in order if k in kinds), None)


@pytest.mark.parametrize("kinds", OPTION_SETS, ids="-".join)
async def test_deny_picks_a_reject_option_by_kind_and_never_an_allow(
    kinds: tuple[str, ...],
) -> None:
    response = await PermissionPolicy(PermissionMode.DENY).decide(request(kinds))
    assert selected(response) == expected(kinds, "reject")
    assert selected(response) not in ("allow_once", "allow_always")


@pytest.mark.parametrize("kinds", OPTION_SETS, ids="-".join)
async def test_allow_all_picks_an_allow_option_by_kind_and_never_a_reject(
    kinds: tuple[str, ...],
) -> None:
    response = await PermissionPolicy(PermissionMode.ALLOW_ALL).decide(request(kinds))
    assert selected(response) == expected(kinds, "allow")
    assert selected(response) not in ("reject_once", "reject_always")


@pytest.mark.parametrize("kinds", OPTION_SETS, ids="-".join)
async def test_ask_without_a_callback_behaves_as_deny(kinds: tuple[str, ...]) -> None:
    response = await PermissionPolicy(PermissionMode.ASK).decide(request(kinds))
    assert selected(response) == expected(kinds, "reject")


async def test_the_default_mode_is_deny() -> None:
    policy = PermissionPolicy()
    assert policy.mode is PermissionMode.DENY
    response = await policy.decide(request(("allow_always", "allow_once", "reject_once")))
    assert selected(response) == "reject_once"


async def test_a_first_option_of_reject_always_is_not_picked_when_reject_once_exists() -> None:
    response = await PermissionPolicy().decide(
        request(("reject_always", "allow_always", "reject_once", "allow_once"))
    )
    assert selected(response) == "reject_once"


async def test_a_first_option_of_allow_always_is_not_picked_when_allow_once_exists() -> None:
    response = await PermissionPolicy(PermissionMode.ALLOW_ALL).decide(
        request(("allow_always", "reject_once", "allow_once"))
    )
    assert selected(response) == "allow_once"


async def test_denying_with_only_allow_options_answers_cancelled() -> None:
    response = await PermissionPolicy().decide(request(("allow_always", "allow_once")))
    assert response.is_cancelled()
    assert response.dump() == {"outcome": {"outcome": "cancelled"}}


async def test_allowing_with_only_reject_options_answers_cancelled() -> None:
    policy = PermissionPolicy(PermissionMode.ALLOW_ALL)
    response = await policy.decide(request(("reject_always", "reject_once")))
    assert response.is_cancelled()


async def test_options_of_unknown_kinds_are_never_picked_automatically() -> None:
    req = RequestPermissionRequest.parse(
        {
            "sessionId": "s1",
            "toolCall": {"toolCallId": "c"},
            "options": [{"optionId": "x", "name": "maybe", "kind": "allow_sometimes"}],
        }
    )
    for mode in (PermissionMode.DENY, PermissionMode.ALLOW_ALL):
        assert (await PermissionPolicy(mode).decide(req)).is_cancelled()


async def test_an_empty_option_list_answers_cancelled() -> None:
    assert (await PermissionPolicy(PermissionMode.ALLOW_ALL).decide(request(()))).is_cancelled()


@pytest.mark.parametrize(
    ("tool_kind", "allowed"),
    [
        ("read", True),
        ("search", True),
        ("think", True),
        ("edit", False),
        ("delete", False),
        ("move", False),
        ("execute", False),
        ("fetch", False),
        ("switch_mode", False),
        ("other", False),
        ("teleport", False),  # a kind this version does not know
        (None, False),  # no kind at all
    ],
)
async def test_allow_reads_allows_only_read_only_tool_kinds(
    tool_kind: str | None, allowed: bool
) -> None:
    kinds = ("reject_always", "allow_always", "reject_once", "allow_once")
    policy = PermissionPolicy(PermissionMode.ALLOW_READS)
    response, record = await policy.decide_with_record(request(kinds, tool_kind))
    assert selected(response) == ("allow_once" if allowed else "reject_once")
    assert record.is_allowed is allowed
    assert record.tool_kind == tool_kind
    assert record.mode is PermissionMode.ALLOW_READS


def test_the_read_only_set_is_read_search_and_think() -> None:
    assert frozenset({"read", "search", "think"}) == READ_ONLY_TOOL_KINDS


async def test_the_ask_callback_chooses_the_option() -> None:
    seen: list[RequestPermissionRequest] = []

    async def ask(req: RequestPermissionRequest) -> str | None:
        seen.append(req)
        return "id-allow_always"

    req = request(("allow_once", "allow_always", "reject_once"))
    response, record = await PermissionPolicy(PermissionMode.ASK, ask).decide_with_record(req)
    assert seen == [req]
    assert selected(response) == "allow_always"
    assert (record.option_id, record.option_kind) == ("id-allow_always", "allow_always")
    assert not record.is_cancelled


async def test_an_ask_callback_returning_none_answers_cancelled() -> None:
    async def ask(req: RequestPermissionRequest) -> str | None:
        return None

    policy = PermissionPolicy(PermissionMode.ASK, ask)
    response, record = await policy.decide_with_record(request(ALL_KINDS))
    assert response.is_cancelled()
    assert record.is_cancelled
    assert record.option_kind is None


async def test_an_ask_callback_returning_an_unoffered_id_answers_cancelled_and_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def ask(req: RequestPermissionRequest) -> str | None:
        return "id-bogus"

    with caplog.at_level(logging.WARNING, logger="acp_bridge.client.permissions"):
        response = await PermissionPolicy(PermissionMode.ASK, ask).decide(request(ALL_KINDS))
    assert response.is_cancelled()
    assert "id-bogus" in caplog.text


async def test_the_callback_is_not_consulted_outside_ask_mode() -> None:
    async def ask(req: RequestPermissionRequest) -> str | None:
        raise AssertionError("must not be called")

    response = await PermissionPolicy(PermissionMode.ALLOW_ALL, ask).decide(request(ALL_KINDS))
    assert selected(response) == "allow_once"


async def test_the_decision_record_names_the_tool_call() -> None:
    _, record = await PermissionPolicy().decide_with_record(request(ALL_KINDS, "execute"))
    assert (record.session_id, record.tool_call_id, record.tool_kind) == ("s1", "call-1", "execute")
    assert (record.option_id, record.option_kind) == ("id-reject_once", "reject_once")
    assert not record.is_allowed


def test_choose_option_prefers_the_narrowest_grant_whatever_the_order() -> None:
    for kinds in OPTION_SETS:
        options = [PermissionOption.parse(option(k)) for k in kinds]
        for want in ("allow", "reject"):
            chosen = choose_option(options, want)
            assert (None if chosen is None else chosen.kind) == expected(kinds, want)


async def answer_on_the_wire(policy: PermissionPolicy, params: dict[str, Any]) -> dict[str, Any]:
    """What the bridge's ``session/request_permission`` handler does with the policy."""
    response = await policy.decide(RequestPermissionRequest.parse(params))
    return response.dump()


async def test_a_decision_is_answered_in_wire_shape() -> None:
    params = request(("reject_always", "allow_once")).dump()
    assert await answer_on_the_wire(PermissionPolicy(PermissionMode.ALLOW_ALL), params) == {
        "outcome": {"outcome": "selected", "optionId": "id-allow_once"}
    }


@pytest.mark.parametrize("mode", list(PermissionMode))
@pytest.mark.parametrize("kinds", [ALL_KINDS, ("allow_once",), ("reject_always",)], ids="-".join)
async def test_responses_validate_against_the_official_sdk_model(
    mode: PermissionMode, kinds: tuple[str, ...]
) -> None:
    schema = pytest.importorskip("acp.schema")
    wire = await answer_on_the_wire(PermissionPolicy(mode), request(kinds, "read").dump())
    parsed = schema.RequestPermissionResponse.model_validate(wire)
    assert parsed.outcome.outcome == wire["outcome"]["outcome"]
    assert parsed.model_dump(by_alias=True, exclude_none=True) == wire
