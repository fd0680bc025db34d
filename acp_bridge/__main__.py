"""``python -m acp_bridge`` is ``acp-bridge``."""

from acp_bridge.cli.main import entry

entry()
