"""The mock model's script for ``acp-bridge demo`` (see :mod:`.mock_script` for the format).

Kept as Python so it ships inside the package: the demo writes it to a temporary file and
starts ``acp-bridge agent --mock-script`` on it, from any directory.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["DEMO_SCRIPT", "NOTES"]

NOTES: Final = "# Demo notes\n\n- answers stream\n- tools go through the client\n"

DEMO_SCRIPT: Final[dict[str, Any]] = {
    "replies": [
        {
            "when": "hello",
            "think": "A greeting: say who I am.",
            "say": "Hi! I am acp-bridge's built-in agent, answering offline from a scripted "
            "model through litellm. I stream answers, use tools through the client, and report "
            "usage and cost.",
            "delay_ms": 15,
        },
        {
            "when": "notes",
            "calls": [
                {
                    "say": "I will write the notes file.",
                    "tools": [
                        {"name": "write_file", "arguments": {"path": "notes.md", "content": NOTES}}
                    ],
                },
                {"say": "Done: notes.md is written."},
            ],
        },
        {
            "when": "story",
            "say": "Once upon a time a bridge stood between an editor and an agent. It carried "
            "every message across, kept the ones that came too early in a queue, and never "
            "lost a session, not even when the agent fell into the river and had to be pulled "
            "out again. The end.",
            "delay_ms": 40,
        },
        {
            "when": "follow",
            "say": "This follow-up waited in the queue until the story was over.",
            "delay_ms": 10,
        },
        {
            "when": "think slowly",
            "say": "Let me think about this very carefully, one slow word at a time, for as long "
            "as it takes ...",
            "delay_ms": 150,
            "hang": True,
        },
        {"when": "crash", "say": "Something is going badly wrong", "crash": True},
        {
            "when": "still there",
            "say": "Yes, still here, in the same session: my history holds the {turns} "
            "messages you sent me.",
            "delay_ms": 10,
        },
    ],
    "default": {"say": "You said: {prompt}"},
}
