"""acp-bridge: a supervising bridge between ACP clients and ACP agents."""

from __future__ import annotations

__version__ = "0.1.0.dev0"
