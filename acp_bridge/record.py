"""``@record``: a frozen dataclass that costs far less to define.

The library's state machines, their events and actions, and its records are small frozen
dataclasses, about a hundred of them, all defined when a one-shot ``acp-bridge run`` imports the
library. On Python 3.11 ``@dataclass(frozen=True)`` compiles five or six methods per class from
generated source (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``,
``__delattr__``): measured, that was 60-80 ms of a one-shot's ~220 ms import. ``@record`` has
:func:`dataclasses.dataclass` compile only ``__init__`` and gives the class shared, precompiled
versions of the others, driven by the field names it stores on the class.

What stays the same as ``@dataclass(frozen=True)``: a real dataclass (``dataclasses.fields``,
``replace``, ``asdict`` and ``__match_args__`` work); equal when of the same class with equal
compared fields; hashed like the tuple of those fields; repr ``Name(field=value, ...)`` with
``repr=False`` fields left out; assigning or deleting a field after construction raises
:class:`dataclasses.FrozenInstanceError`; type checkers see a frozen dataclass.

What differs: a field is "assigned" once, by ``__init__``, through the shared ``__setattr__``
(about 0.3 µs per field more than a frozen dataclass's ``__init__``), so classes built once per
streamed update stay plain ``@dataclass(frozen=True)``; and the repr has no guard against a
record that contains itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, overload

from typing_extensions import dataclass_transform

__all__ = ["record"]

_T = TypeVar("_T", bound=type)


@overload
def record(cls: _T, /) -> _T: ...


@overload
def record(*, slots: bool = True, eq: bool = True, kw_only: bool = False) -> Callable[[_T], _T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(
    cls: _T | None = None, /, *, slots: bool = True, eq: bool = True, kw_only: bool = False
) -> _T | Callable[[_T], _T]:
    """Make ``cls`` a frozen dataclass (``slots`` by default); ``eq=False`` keeps identity
    equality and hashing, as for a dataclass."""

    def make(cls: _T) -> _T:
        return _make(cls, slots=slots, eq=eq, kw_only=kw_only)

    return make if cls is None else make(cls)


def _make(cls: _T, *, slots: bool, eq: bool, kw_only: bool) -> _T:
    own = set(cls.__dict__)  # methods the class wrote itself are kept, as dataclass keeps them
    made: Any = dataclasses.dataclass(
        cls, repr=False, eq=False, frozen=False, slots=slots, kw_only=kw_only
    )
    fields = dataclasses.fields(made)
    made.__record_repr__ = tuple(f.name for f in fields if f.repr)
    made.__record_compare__ = tuple(f.name for f in fields if f.compare)
    made.__record_hash__ = tuple(
        f.name for f in fields if (f.compare if f.hash is None else f.hash)
    )
    if "__repr__" not in own:
        made.__repr__ = _repr
    if eq:
        if "__eq__" not in own:
            made.__eq__ = _eq
        if "__hash__" not in own:
            made.__hash__ = _hash
    made.__setattr__ = _set_once if slots else _set_once_in_dict
    made.__delattr__ = _no_delete
    made.__record__ = True  # for tests and readers: defined by @record
    result: _T = made
    return result


def _repr(self: Any) -> str:
    cls = type(self)
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in cls.__record_repr__)
    return f"{cls.__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = self.__record_compare__  # compared as dataclass compares: as sequences
    return [getattr(self, name) for name in names] == [getattr(other, name) for name in names]


def _hash(self: Any) -> int:
    return hash(tuple([getattr(self, name) for name in self.__record_hash__]))


def _set_once(self: Any, name: str, value: Any) -> None:
    # A slot not yet set raises AttributeError: that is __init__ setting it.
    try:
        object.__getattribute__(self, name)
    except AttributeError:
        object.__setattr__(self, name, value)
        return
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _set_once_in_dict(self: Any, name: str, value: Any) -> None:
    # Without slots a field's default is a class attribute: look in the instance's own dict.
    if name in self.__dict__:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _no_delete(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
