"""litellm's import, handled once.

(stdout is guarded at the process edge, before this runs: see
:func:`acp_bridge.cli.agent_cmd.claim_stdout`.)

**litellm is imported lazily, off the event loop.** Importing it takes seconds; the agent answers
``initialize`` and ``session/new`` at once while :class:`LiteLLM` imports it in a worker thread,
and the first prompt waits for it. ``LITELLM_LOCAL_MODEL_COST_MAP`` is set first, so the import
fetches nothing from the network (the bundled price table is used).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["LiteLLM"]

log = logging.getLogger(__name__)


class LiteLLM:
    """litellm, imported once in a worker thread; :meth:`get` waits for it.

    ``configure(module)`` runs in the same thread right after the import (registering the mock
    provider, for instance). A failed import is kept and re-raised by every :meth:`get`.
    """

    def __init__(self, configure: Callable[[Any], None] | None = None) -> None:
        self._configure = configure
        self._module: Any = None
        self._failure: BaseException | None = None
        self._done = anyio.Event()
        self._started = False

    async def load(self) -> None:
        """Import litellm (run this as a background task at start-up)."""
        if self._started:
            await self._done.wait()
            return
        self._started = True
        try:
            self._module = await anyio.to_thread.run_sync(self._import, abandon_on_cancel=True)
        except Exception as exc:
            log.error("could not import litellm: %s", exc)
            self._failure = exc
        finally:
            self._done.set()

    def _import(self) -> Any:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        module: Any = importlib.import_module("litellm")
        module.suppress_debug_info = True
        module.drop_params = True  # a provider without tools/stream_options drops them
        if self._configure is not None:
            self._configure(module)
        return module

    async def get(self) -> Any:
        if not self._started:
            await self.load()
        await self._done.wait()
        if self._failure is not None:
            raise self._failure
        return self._module
