"""``python -m acp_bridge`` is ``acp-bridge``."""

from acp_bridge.cli.launch import entry

entry()
