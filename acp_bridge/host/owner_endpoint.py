"""The endpoint of a ``run`` or ``chat`` that owns a conversation (issue 22).

:func:`owner_endpoint` serves the host's methods for the owned conversation on
``<socket dir>/c-<conversation id>.sock`` (the socket directory is the host's, see
:mod:`.endpoint`) and writes that path into the conversation's lock file next to the owner's
pid, so ``send``, ``watch``, ``cancel`` and ``status`` reach a conversation whoever owns it.
An endpoint that cannot be served (a socket directory that is not private, a path longer than
a Unix socket allows, say) is logged (``-v`` shows it): the run goes on, unreachable by the
verbs, as before this endpoint existed; its output is unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from acp_bridge.conversation.conversation import Conversation
from acp_bridge.conversation.store_api import Store
from acp_bridge.host.endpoint import (
    HostEndpointError,
    conversation_socket_path,
    default_socket_path,
)
from acp_bridge.host.owner import held_owner

__all__ = ["owner_endpoint"]

log = logging.getLogger(__name__)


@asynccontextmanager
async def owner_endpoint(
    conversation: Conversation, store: Store, socket_dir: Path | None = None
) -> AsyncIterator[Path | None]:
    """Serve ``conversation``'s endpoint while the context is open; yields its socket path
    (None when it could not be served)."""
    if store.is_shared:
        # A PostgreSQL store (issue 23) has no file to put a socket beside: the verbs reach
        # this owner through the database (a send commits and notifies it).
        yield None
        return
    from acp_bridge.host.serve import serve_conversation_endpoint  # the run's cost: only here

    store_path = Path(store.path)
    directory = socket_dir or default_socket_path(store_path).parent
    socket_path = conversation_socket_path(directory, conversation.id)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(_remove_if_empty, directory)  # last: once the socket is gone
        try:
            endpoint = serve_conversation_endpoint(conversation, store, store_path, socket_path)
            await stack.enter_async_context(endpoint)
        except HostEndpointError as exc:
            log.info("conversation %s is not reachable by send/watch: %s", conversation.id, exc)
            served = None
        else:
            served = socket_path
        owner = held_owner(store_path, conversation.id) if served is not None else None
        if owner is not None:
            owner.set_socket(served)
        try:
            yield served
        finally:
            if owner is not None and owner.is_held:
                owner.set_socket(None)


def _remove_if_empty(directory: Path) -> None:
    """Leave nothing behind beside the store but what was there (a host's socket, or anything
    else, keeps the directory)."""
    with contextlib.suppress(OSError):
        os.rmdir(directory)
