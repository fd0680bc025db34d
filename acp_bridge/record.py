"""``@record``: a frozen dataclass that costs far less to define.

The library's state machines, their events and actions, and its records are small frozen
dataclasses, about a hundred of them, all defined when a one-shot ``acp-bridge run`` imports the
library. On Python 3.11 ``@dataclass(frozen=True)`` compiles five or six methods per class from
generated source (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``,
``__delattr__``): measured, that was 60-80 ms of a one-shot's ~220 ms import. ``@record`` has
one method per class compiled (``__init__``) and gives the class shared, precompiled versions of
the others, driven by the field names it stores on the class.

What stays the same as ``@dataclass(frozen=True)``: a real dataclass (``dataclasses.fields``,
``replace``, ``asdict`` and ``__match_args__`` work); equal when of the same class with equal
compared fields; hashed like the tuple of those fields; repr ``Name(field=value, ...)`` with
``repr=False`` fields left out; assigning or deleting a field after construction raises
:class:`dataclasses.FrozenInstanceError`; type checkers see a frozen dataclass.

What differs: ``__init__`` is compiled here, from the fields: plain fields, with defaults or
default factories, then ``__post_init__``. ``kw_only`` and ``init=False`` fields are refused
when the class is defined; ``InitVar`` pseudo-fields are not supported either (a call passing
one fails). The repr has no guard against a record that contains itself. Construction costs
what a frozen dataclass's does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["record"]

_T = TypeVar("_T", bound=type)


@overload
def record(cls: _T, /) -> _T: ...


@overload
def record(*, slots: bool = True, eq: bool = True) -> Callable[[_T], _T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(
    cls: _T | None = None, /, *, slots: bool = True, eq: bool = True
) -> _T | Callable[[_T], _T]:
    """Make ``cls`` a frozen dataclass (``slots`` by default); ``eq=False`` keeps identity
    equality and hashing, as for a dataclass."""

    def make(cls: _T) -> _T:
        return _make(cls, slots=slots, eq=eq)

    return make if cls is None else make(cls)


def _make(cls: _T, *, slots: bool, eq: bool) -> _T:
    own = set(cls.__dict__)  # methods the class wrote itself are kept, as dataclass keeps them
    if "__eq__" in own and cls.__dict__.get("__hash__", ...) is None:
        own.discard("__hash__")  # Python's implicit None for a class that wrote __eq__
    made: Any = dataclasses.dataclass(
        cls, init=False, repr=False, eq=False, frozen=False, slots=slots
    )
    fields = dataclasses.fields(made)
    made.__record_repr__ = tuple(f.name for f in fields if f.repr)
    made.__record_compare__ = tuple(f.name for f in fields if f.compare)
    made.__record_hash__ = tuple(
        f.name for f in fields if (f.compare if f.hash is None else f.hash)
    )
    if "__init__" not in own:
        made.__init__ = _init_for(made, fields)
    if "__repr__" not in own:
        made.__repr__ = _repr
    if eq:
        if "__eq__" not in own:
            made.__eq__ = _eq
        if "__hash__" not in own:
            made.__hash__ = _hash
    made.__setattr__ = _no_assign
    made.__delattr__ = _no_delete
    if slots:  # copy and pickle set a slotted object's state with setattr otherwise
        made.__getstate__ = _getstate
        made.__setstate__ = _setstate
    result: _T = made
    return result


def _init_for(cls: Any, fields: tuple[dataclasses.Field[Any], ...]) -> Any:
    """``__init__`` compiled for ``cls``: each field set with ``object.__setattr__``, as a
    frozen dataclass's is, then ``__post_init__``. The one method compiled per class."""
    params, body = ["self"], []
    values: dict[str, Any] = {"_set": object.__setattr__, "_factory_default": _FACTORY_DEFAULT}
    defaulted = False
    for index, f in enumerate(fields):
        name = f.name
        if not f.init or f.kw_only:
            raise TypeError(f"@record {cls.__qualname__}.{name}: only plain fields are supported")
        value = name
        if f.default is not dataclasses.MISSING:
            values[f"_default_{index}"] = f.default
            params.append(f"{name}=_default_{index}")
            defaulted = True
        elif f.default_factory is not dataclasses.MISSING:
            values[f"_factory_{index}"] = f.default_factory
            params.append(f"{name}=_factory_default")
            value = f"_factory_{index}() if {name} is _factory_default else {name}"
            defaulted = True
        elif defaulted:
            raise TypeError(f"non-default argument {name!r} follows default argument")
        else:
            params.append(name)
        body.append(f"_set(self, {name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    source = (
        f"def _make_init({', '.join(values)}):\n"
        f" def __init__({', '.join(params)}):\n"
        + "".join(f"  {line}\n" for line in body or ["pass"])
        + " return __init__\n"
    )
    namespace: dict[str, Any] = {}
    exec(source, {}, namespace)  # our own source, built from field names
    init = namespace["_make_init"](**values)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


class _FactoryDefault:
    def __repr__(self) -> str:
        return "<factory>"


_FACTORY_DEFAULT = _FactoryDefault()
"""The default a ``default_factory`` field's parameter shows: the factory is called instead."""


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


def _no_assign(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _no_delete(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=True):
        object.__setattr__(self, f.name, value)
