"""Settings of the reference agent, as parsed from ``acp-bridge agent``'s command line. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["DEFAULT_MODEL", "AgentConfig"]

DEFAULT_MODEL: Final = "gpt-4o-mini"


@dataclass(frozen=True)
class AgentConfig:
    """How the agent answers.

    ``model`` is what a session starts with; ``models`` are the choices its ``model`` config
    option offers (``model`` is always among them). With ``mock_response`` or ``mock_script``
    no provider is called: litellm's own mocking answers (see :mod:`.mock_provider`), and the
    model name is used only for the context window and prices.
    """

    model: str = DEFAULT_MODEL
    models: tuple[str, ...] = ()
    mock_response: str | None = None
    mock_script: Path | None = None
    history_path: Path = field(kw_only=True)
    """The SQLite history of sessions (the command line's default is under XDG_STATE_HOME)."""
    max_turn_requests: int = 25
    """Model requests per prompt turn; past it the turn ends with ``max_turn_requests``."""
    max_rate_limit_retries: int = 4
    """A rate-limited request is retried this many times (backoff doubling from
    :attr:`retry_base_delay_s`, capped at :attr:`retry_max_delay_s`), then reported."""
    retry_base_delay_s: float = 0.5
    retry_max_delay_s: float = 8.0
    default_mode: str = "code"

    @property
    def is_mock(self) -> bool:
        return self.mock_response is not None or self.mock_script is not None

    @property
    def model_choices(self) -> tuple[str, ...]:
        choices = [self.model]
        choices.extend(m for m in self.models if m not in choices)
        return tuple(choices)
