"""What a conversation spent: token usage and cost, per message and per conversation. Pure.

Two things an agent reports, with different meanings (see ``acp-protocol.md``):

* **The prompt response's** ``usage`` (``inputTokens``, ``outputTokens``, ``totalTokens``,
  ``thoughtTokens?``, ``cachedReadTokens?``, ``cachedWriteTokens?``) is what *that turn* used:
  an increment. Token counts are the sum of the answers' ``usage``. A turn that was cancelled
  and answered still counts what its answer says it used (that was spent); a turn with no
  answer (a crash, a quarantine) counts nothing, as nothing was reported.
* **A** ``usage_update`` is a *snapshot*: ``used`` and ``size`` are the context window as it
  stands now, and ``cost`` is the session's *cumulative* cost so far. So the context is never
  summed (the latest snapshot wins) and cost is counted by difference: a message costs what
  the session's cumulative cost grew by during its turn.

Counting cost by difference needs the last cumulative amount seen, the :class:`CostMeter`,
kept per conversation in the store with each message's final state. Its rules:

* the baseline belongs to one agent session: a snapshot from another session id (the session
  was replaced, or a new conversation) starts from zero;
* a cumulative amount lower than the baseline means the agent's counter restarted (an agent
  restarted and loaded the session without keeping its cost): the whole new amount is counted;
* otherwise only the growth is counted.

So nothing is counted twice: a snapshot repeated (after a restart, or the same value sent
again) adds nothing, and a ``session/load`` replay never reaches a turn at all (the client
layer consumes it). The one loss is deliberate: a counter that restarted *and* grew past the
old baseline before its first report is undercounted, never overcounted. Snapshots that
arrive outside a turn are not seen; the next one inside a turn carries their growth, since
the amount is cumulative. A crash of the bridge mid-turn loses the turn's unsaved growth from
the message but not from the conversation: the next snapshot is measured from the baseline
last stored.

Malformed values (a negative or non-numeric count, a cost without a currency) are ignored,
one report at a time. Amounts are rounded to :data:`COST_DIGITS` decimals when stored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import field
from typing import Any, Final

from acp_bridge.record import record

__all__ = [
    "COST_DIGITS",
    "TOKEN_FIELDS",
    "CostMeter",
    "TurnUsage",
    "UsageTotals",
]

TOKEN_FIELDS: Final = (
    "inputTokens",
    "outputTokens",
    "totalTokens",
    "thoughtTokens",
    "cachedReadTokens",
    "cachedWriteTokens",
)
"""The prompt response's ``usage`` fields that are counted (ACP's names)."""
COST_DIGITS: Final = 10


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _amount(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    amount = float(value)
    return amount if math.isfinite(amount) and amount >= 0 else None


@record(slots=False)
class UsageTotals:
    """What turns spent, accumulated: of one turn, one message (its attempts) or a whole
    conversation. Tokens (summed from prompt responses, ACP's field names), cost (summed growth
    of the session's cumulative cost, by currency) and the latest context snapshot
    (``{"used", "size"}``, or None before the first ``usage_update``). Not the wire's
    :class:`acp_bridge.wire.acp.Usage`, which is one prompt response's report."""

    tokens: Mapping[str, int] = field(default_factory=dict)
    cost: Mapping[str, float] = field(default_factory=dict)
    context: Mapping[str, int] | None = None

    @property
    def is_empty(self) -> bool:
        return not self.tokens and not self.cost and self.context is None

    def plus(self, later: UsageTotals) -> UsageTotals:
        """This usage followed by ``later``: counts added, the later context kept."""
        tokens = dict(self.tokens)
        for name, value in later.tokens.items():
            tokens[name] = tokens.get(name, 0) + value
        cost = dict(self.cost)
        for currency, amount in later.cost.items():
            cost[currency] = round(cost.get(currency, 0.0) + amount, COST_DIGITS)
        context = later.context if later.context is not None else self.context
        return UsageTotals(tokens, cost, context)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.tokens:
            data["tokens"] = dict(self.tokens)
        if self.cost:
            data["cost"] = {c: round(a, COST_DIGITS) for c, a in self.cost.items()}
        if self.context is not None:
            data["context"] = dict(self.context)
        return data

    @classmethod
    def from_json(cls, data: Any) -> UsageTotals:
        """Read :meth:`to_json` back; what is not understood is left out."""
        if not isinstance(data, Mapping):
            return cls()
        raw_tokens = data.get("tokens")
        tokens = {
            name: count
            for name, value in (raw_tokens.items() if isinstance(raw_tokens, Mapping) else ())
            if isinstance(name, str) and (count := _count(value)) is not None
        }
        raw_cost = data.get("cost")
        cost = {
            currency: amount
            for currency, value in (raw_cost.items() if isinstance(raw_cost, Mapping) else ())
            if isinstance(currency, str) and (amount := _amount(value)) is not None
        }
        return cls(tokens, cost, _context(data.get("context")))

    def summary(self) -> str:
        """One line for people, e.g. ``tokens 120 in, 30 out, 150 total; cost 0.0123 USD;
        context 5,000 of 200,000``; ``no usage reported`` when there is nothing."""
        parts: list[str] = []
        if self.tokens:
            names = (
                ("inputTokens", "in"),
                ("outputTokens", "out"),
                ("thoughtTokens", "thought"),
                ("cachedReadTokens", "cached read"),
                ("cachedWriteTokens", "cached write"),
                ("totalTokens", "total"),
            )
            counted = [f"{self.tokens[k]:,} {label}" for k, label in names if k in self.tokens]
            parts.append("tokens " + ", ".join(counted))
        if self.cost:
            parts.append("cost " + ", ".join(f"{a:.4f} {c}" for c, a in sorted(self.cost.items())))
        if self.context is not None:
            parts.append(f"context {self.context['used']:,} of {self.context['size']:,}")
        return "; ".join(parts) if parts else "no usage reported"


def _context(value: Any) -> dict[str, int] | None:
    if not isinstance(value, Mapping):
        return None
    used, size = _count(value.get("used")), _count(value.get("size"))
    if used is None or size is None:
        return None
    return {"used": used, "size": size}


@record(slots=False)
class CostMeter:
    """The last cumulative cost seen, by currency, and the session it belongs to."""

    session_id: str | None = None
    last: Mapping[str, float] = field(default_factory=dict)

    def observe(self, session_id: str, currency: str, amount: float) -> tuple[CostMeter, float]:
        """A snapshot of ``session_id``'s cumulative cost: the new meter and the growth to
        count (see the module docstring for a replaced session and a restarted counter)."""
        last = dict(self.last) if session_id == self.session_id else {}
        baseline = last.get(currency, 0.0)
        growth = amount if amount < baseline else amount - baseline
        last[currency] = amount
        return CostMeter(session_id, last), round(growth, COST_DIGITS)

    def to_json(self) -> dict[str, Any]:
        return {"sessionId": self.session_id, "last": dict(self.last)}

    @classmethod
    def from_json(cls, data: Any) -> CostMeter:
        if not isinstance(data, Mapping):
            return cls()
        session_id = data.get("sessionId")
        raw_last = data.get("last")
        last = {
            currency: amount
            for currency, value in (raw_last.items() if isinstance(raw_last, Mapping) else ())
            if isinstance(currency, str) and (amount := _amount(value)) is not None
        }
        return cls(session_id if isinstance(session_id, str) else None, last)


class TurnUsage:
    """One turn's usage as it happens: ``usage_update`` snapshots, then the answer's usage.

    Bounded: it keeps counters only, whatever the number of reports.
    """

    def __init__(self, meter: CostMeter) -> None:
        self.meter = meter
        """The cost baseline after the snapshots seen so far (store it with the turn)."""
        self._tokens: dict[str, int] = {}
        self._cost: dict[str, float] = {}
        self._context: dict[str, int] | None = None

    def observe_update(self, session_id: str, update: Mapping[str, Any]) -> None:
        """A ``usage_update`` (the raw ``update`` of a ``session/update``)."""
        context = _context(update)
        if context is not None:
            self._context = context
        cost = update.get("cost")
        if not isinstance(cost, Mapping):
            return
        currency, amount = cost.get("currency"), _amount(cost.get("amount"))
        if not isinstance(currency, str) or not currency or amount is None:
            return
        self.meter, growth = self.meter.observe(session_id, currency, amount)
        self._cost[currency] = round(self._cost.get(currency, 0.0) + growth, COST_DIGITS)

    def observe_answer(self, usage: Mapping[str, Any] | None) -> None:
        """The prompt response's ``usage`` (camelCase, as on the wire), if it had one."""
        if not isinstance(usage, Mapping):
            return
        for name in TOKEN_FIELDS:
            count = _count(usage.get(name))
            if count is not None:
                self._tokens[name] = self._tokens.get(name, 0) + count

    def result(self) -> UsageTotals:
        return UsageTotals(dict(self._tokens), dict(self._cost), self._context)
