"""Resume reconciliation: only the cases the design names, each with a clear message."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from acp_bridge.conversation.reconcile import ConfigMismatchError, reconcile, servers_used


def stored(cwd: str = "/work/repo", servers: list[str] | None = None) -> Any:
    return SimpleNamespace(
        id="c1", cwd=cwd, mcp_servers=[{"name": n, "command": n} for n in servers or []]
    )


def tool_call(title: str) -> Any:
    return SimpleNamespace(data={"toolCall": {"toolCallId": "t", "title": title}})


def test_the_same_configuration_goes_on() -> None:
    reconcile(
        stored(servers=["git"]),
        cwd="/work/repo",
        mcp_servers=[{"name": "git"}],
        history=[tool_call("mcp__git__status")],
    )


def test_a_different_cwd_refuses_to_load() -> None:
    with pytest.raises(ConfigMismatchError, match="was started in /work/repo"):
        reconcile(stored(), cwd="/elsewhere", mcp_servers=[], history=[])


def test_added_servers_are_fine() -> None:
    reconcile(stored(), cwd="/work/repo", mcp_servers=[{"name": "new"}], history=[])


def test_a_removed_server_never_used_is_fine() -> None:
    reconcile(
        stored(servers=["git", "web"]),
        cwd="/work/repo",
        mcp_servers=[{"name": "git"}],
        history=[tool_call("mcp__git__log"), tool_call("Read file")],
    )


@pytest.mark.parametrize("title", ["mcp__web__fetch", "web/fetch", "web.search", "WEB:fetch"])
def test_a_removed_server_whose_tools_were_used_is_named(title: str) -> None:
    with pytest.raises(ConfigMismatchError, match="web"):
        reconcile(
            stored(servers=["git", "web"]),
            cwd="/work/repo",
            mcp_servers=[{"name": "git"}],
            history=[tool_call(title)],
        )


def test_a_server_name_inside_another_word_does_not_count() -> None:
    assert servers_used({"web"}, [tool_call("cobweb cleanup"), tool_call("webhook/x")]) == set()
