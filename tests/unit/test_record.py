"""``@record`` behaves as ``@dataclass(frozen=True)`` does, for every use the library makes."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import FrozenInstanceError, field

import pytest

from acp_bridge.record import record


@record
class Point:
    x: int
    y: int = 0
    note: str = field(default="", compare=False, repr=False)


@record(slots=False)
class Bag:
    name: str
    items: tuple[str, ...] = field(default_factory=tuple)


@dataclasses.dataclass(frozen=True, slots=True)
class RealPoint:
    x: int
    y: int = 0
    note: str = field(default="", compare=False, repr=False)


@record
class Base:
    a: int


@record
class Derived(Base):
    b: str = "b"


@record(eq=False)
class Identity:
    value: int


@record
class Made:
    items: list[int] = field(default_factory=list)
    total: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(self.items))


@pytest.mark.parametrize("cls", [Point, RealPoint])
def test_equality_hash_and_repr_match_a_frozen_dataclass(cls: type) -> None:
    one, same, other = cls(1, 2, note="a"), cls(1, 2, note="b"), cls(1, 3)
    assert one == same and one != other and hash(one) == hash(same) == hash((1, 2))
    assert repr(one).endswith("Point(x=1, y=2)")
    assert {one, same, other} == {one, other}
    assert one.__eq__(object()) is NotImplemented
    assert (one == (1, 2)) is False


def test_fields_cannot_be_assigned_or_deleted_after_construction() -> None:
    point, bag = Point(1), Bag("b")
    for target, name in ((point, "x"), (point, "y"), (bag, "name"), (bag, "items")):
        with pytest.raises(FrozenInstanceError):
            setattr(target, name, 5)
        with pytest.raises(FrozenInstanceError):
            delattr(target, name)
    with pytest.raises(AttributeError):
        point.other = 1  # type: ignore[attr-defined]  # slots: no new attributes


def test_defaults_factories_replace_fields_copy_and_match_work() -> None:
    bag = Bag("b")
    assert bag.items == () and Bag("c").items is not None
    assert dataclasses.replace(Point(1, 2), y=5) == Point(1, 5)
    assert [f.name for f in dataclasses.fields(Point)] == ["x", "y", "note"]
    assert dataclasses.asdict(Point(1, 2)) == {"x": 1, "y": 2, "note": ""}
    assert dataclasses.is_dataclass(Point) and Point.__slots__ == ("x", "y", "note")
    assert copy.copy(Point(3, 4)) == Point(3, 4) and copy.deepcopy(bag) == bag
    match Point(7, 8):
        case Point(x, y):
            assert (x, y) == (7, 8)


def test_subclasses_compare_by_class_and_all_fields() -> None:
    derived = Derived(1, "z")
    assert derived == Derived(1, "z") and derived != Derived(1, "y")
    assert Base(1) != Derived(1)  # another class: never equal, as with dataclasses
    assert repr(derived) == "Derived(a=1, b='z')"
    with pytest.raises(FrozenInstanceError):
        derived.a = 2  # type: ignore[misc]


def test_eq_false_keeps_identity() -> None:
    first = Identity(1)
    assert first != Identity(1) and first == first and hash(first) == object.__hash__(first)
    assert len({first, Identity(1)}) == 2


def test_init_takes_positions_names_defaults_factories_and_runs_post_init() -> None:
    assert Point(1) == Point(x=1) == Point(1, 0) and Point(y=3, x=2).y == 3
    first, second = Made(), Made()
    assert first.items == [] and first.items is not second.items  # a new list each time
    assert Made([1, 2]).total == 3
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point(1, 2, "n", 4)  # type: ignore[call-arg]
    assert Point.__init__.__qualname__ == "Point.__init__"


def test_fields_record_cannot_build_are_refused_when_the_class_is_defined() -> None:
    with pytest.raises(TypeError, match="only plain fields"):

        @record
        class KeywordOnly:
            value: int = field(kw_only=True)

    with pytest.raises(TypeError, match="only plain fields"):

        @record
        class NotInInit:
            value: int = field(default=0, init=False)


def test_a_field_without_default_after_one_with_is_refused_as_dataclass_refuses_it() -> None:
    with pytest.raises(TypeError, match="non-default argument 'late' follows default argument"):

        @record
        class Unordered:
            early: int = 0
            late: int  # type: ignore[misc]


def test_a_record_that_writes_its_own_eq_is_still_hashed_by_its_fields() -> None:
    @record
    class Loose:
        value: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Loose)

        __hash__ = None  # type: ignore[assignment]  # what Python puts here implicitly

    @dataclasses.dataclass(frozen=True)
    class LooseDataclass:
        value: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, LooseDataclass)

    assert hash(Loose(3)) == hash(LooseDataclass(3)) == hash((3,))
    assert Loose(1) == Loose(2)  # its own __eq__ is kept
