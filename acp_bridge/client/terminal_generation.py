"""The ``terminal/*`` handlers one agent process (a *generation*) may call.

:class:`GenerationTerminals` is a thin view on a manager of every generation's terminals
(:class:`~acp_bridge.client.terminal.TerminalManager`): each handler forwards to the manager with
its generation, so the agent process sees only the terminals its own requests created. Get one
from :meth:`TerminalManager.for_generation` and register its methods on that process's peer.

The view needs only the manager's generation-aware handlers, written down as
:class:`TerminalHandlers`; it does not import the manager, which imports it.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["GenerationTerminals", "TerminalHandlers"]


class TerminalHandlers(Protocol):
    """The ``terminal/*`` handlers of every generation, each told which one calls it."""

    async def create(self, params: Any, *, generation: int) -> dict[str, Any]: ...

    async def output(self, params: Any, *, generation: int) -> dict[str, Any]: ...

    async def wait_for_exit(self, params: Any, *, generation: int) -> dict[str, Any]: ...

    async def kill(self, params: Any, *, generation: int) -> dict[str, Any]: ...

    async def release(self, params: Any, *, generation: int) -> dict[str, Any]: ...


class GenerationTerminals:
    """The ``terminal/*`` handlers of one generation (agent process); see the module docstring."""

    def __init__(self, manager: TerminalHandlers, generation: int) -> None:
        self._manager = manager
        self.generation = generation

    def __repr__(self) -> str:
        return f"<GenerationTerminals {self.generation} of {self._manager!r}>"

    async def create(self, params: Any) -> dict[str, Any]:
        return await self._manager.create(params, generation=self.generation)

    async def output(self, params: Any) -> dict[str, Any]:
        return await self._manager.output(params, generation=self.generation)

    async def wait_for_exit(self, params: Any) -> dict[str, Any]:
        return await self._manager.wait_for_exit(params, generation=self.generation)

    async def kill(self, params: Any) -> dict[str, Any]:
        return await self._manager.kill(params, generation=self.generation)

    async def release(self, params: Any) -> dict[str, Any]:
        return await self._manager.release(params, generation=self.generation)
