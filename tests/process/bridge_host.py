"""A bridge process for tests: supervises a forking agent until a signal ends it.

Usage: bridge_host.py PORT [BACKEND]. Runs on BACKEND (asyncio or trio; asyncio when not
given), so the tests' two backends each stop a bridge of their own kind. Prints ``ready`` once
the agent has a session. SIGTERM and SIGINT stop it cleanly (exit 0); SIGUSR1 makes it fail
with an exception (exit 1).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio

from acp_bridge import AgentSpec, open_supervised_agent

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"


async def main(port: str) -> None:
    spec = AgentSpec(
        [sys.executable, "-u", str(AGENTS / "forking_agent.py"), "--connect-back", port]
    )
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGUSR1) as signals:
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    if signum == signal.SIGUSR1:
                        raise RuntimeError("the host failed on purpose")
                    tg.cancel_scope.cancel()
                    return

            tg.start_soon(stop_on_signal)
            async with open_supervised_agent(spec) as agent:
                await agent.new_session(Path.cwd())
                print("ready", flush=True)
                await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], backend=sys.argv[2] if len(sys.argv) > 2 else "asyncio")
