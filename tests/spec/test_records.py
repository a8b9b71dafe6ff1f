"""record() behaves as @dataclass does: each test runs on both, with the same expectations."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import types
from dataclasses import FrozenInstanceError, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from fastio.spec import _records
from fastio.spec._records import record

if TYPE_CHECKING:
    from collections.abc import Callable


@pytest.fixture(params=["dataclass", "record", "record compiled at once"])
def make(request, monkeypatch) -> Any:
    """Each test runs on @dataclass, on record, and on record with its
    compiled __init__ (made at the first instance instead of the 64th)."""
    if request.param == "dataclass":
        return dataclass
    if request.param.endswith("at once"):
        monkeypatch.setattr(_records, "COMPILE_AFTER", 1)
    return record


def point_class(make: Any, **options: Any) -> Any:
    @make(**options)
    class Point:
        """A point."""

        x: int
        y: int = 2
        tags: list[str] = field(default_factory=list)
        note: str = field(default="", repr=False, compare=False)

    return Point


@pytest.mark.parametrize("options", [{}, {"frozen": True}, {"slots": True},
                                     {"frozen": True, "slots": True}])  # fmt: skip
def test_a_record_is_made_read_compared_and_copied_as_a_dataclass(make, options) -> None:
    Point = point_class(make, **options)
    point = Point(1, tags=["a"], note="n")
    assert (point.x, point.y, point.tags, point.note) == (1, 2, ["a"], "n")
    assert Point(1).tags == []
    assert Point(1).tags is not Point(1).tags
    assert repr(point) == "point_class.<locals>.Point(x=1, y=2, tags=['a'])"
    assert point == Point(1, 2, ["a"], note="other")  # note is not compared
    assert point != Point(1, 3, ["a"])
    assert point != (1, 2, ["a"])  # another class is never equal
    assert [f.name for f in dataclasses.fields(point)] == ["x", "y", "tags", "note"]
    assert dataclasses.asdict(point) == {"x": 1, "y": 2, "tags": ["a"], "note": "n"}
    assert dataclasses.replace(point, y=5) == Point(1, 5, ["a"])
    assert Point.__match_args__ == ("x", "y", "tags", "note")
    assert copy.deepcopy(point) == point
    if options.get("frozen"):
        assert hash(Point(1, 2, ("a",))) == hash(Point(1, 2, ("a",), note="x"))  # equal, same hash
        assert hash(Point(1, 2, ())) != hash(Point(2, 2, ()))
        with pytest.raises(FrozenInstanceError, match="cannot assign to field 'x'"):
            point.x = 3
        with pytest.raises(FrozenInstanceError, match="cannot delete field 'x'"):
            del point.x
    else:
        assert Point.__hash__ is None  # eq without frozen: unhashable, as a dataclass
        point.x = 3
        assert point.x == 3


@pytest.mark.parametrize("options", [{"frozen": True}, {"frozen": True, "slots": True}])
def test_a_frozen_record_pickles(make, options) -> None:
    # Module-level classes pickle by name: make them under this module's name.
    Point = point_class(make, **options)
    Point.__qualname__ = Point.__name__ = f"Pickled{len(options)}"
    globals()[Point.__name__] = Point
    point = Point(1, 4, ["z"], note="kept")
    restored = pickle.loads(pickle.dumps(point))
    assert restored == point
    assert restored.note == "kept"


def test_a_record_rejects_calls_with_pythons_own_messages(make) -> None:
    Point = point_class(make, frozen=True)
    name = Point.__qualname__
    cases = {
        lambda: Point(): f"{name}.__init__() missing 1 required positional argument: 'x'",
        lambda: Point(1, 2, [], "", 5): f"{name}.__init__() takes from 2 to 5 positional "
                                        "arguments but 6 were given",
        lambda: Point(1, x=2): f"{name}.__init__() got multiple values for argument 'x'",
        lambda: Point(1, z=2): f"{name}.__init__() got an unexpected keyword argument 'z'",
    }  # fmt: skip
    for call, message in cases.items():
        with pytest.raises(TypeError) as raised:
            call()
        assert str(raised.value) == message

    @make
    class Pair:
        """Two required."""

        first: int
        second: int

    with pytest.raises(TypeError, match=r"missing 2 required positional arguments: "
                                        r"'first' and 'second'"):  # fmt: skip
        Pair()
    with pytest.raises(TypeError, match="non-default argument 'second' follows default argument"):

        @make
        class Wrong:
            """A default before a required field."""

            first: int = 0
            second: int  # type: ignore[misc]


def test_a_record_keeps_what_the_class_defines(make) -> None:
    @make(frozen=True)
    class Checked:
        """Its own eq and hash; a post-init check and a normal form."""

        value: Any
        seen: list[int] = field(default_factory=list, init=False)

        def __post_init__(self) -> None:
            if self.value < 0:
                raise ValueError("negative")
            object.__setattr__(self, "value", int(self.value))

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Checked) and abs(self.value - other.value) <= 1

        def __hash__(self) -> int:
            return 7

        def __repr__(self) -> str:
            return "checked"

    assert Checked(2.0).value == 2
    assert isinstance(Checked(2.0).value, int)
    assert Checked(2) == Checked(3)
    assert hash(Checked(5)) == 7
    assert repr(Checked(1)) == "checked"
    assert Checked(1).seen == []  # a field left out of __init__ still gets its default
    with pytest.raises(ValueError, match="negative"):
        Checked(-1)


def test_identical_arrays_compare_equal_as_in_a_tuple(make) -> None:
    @make(frozen=True)
    class Holder:
        """One array."""

        array: Any

    array = np.arange(3)
    assert Holder(array) == Holder(array)  # the same object: equal without comparing elements
    with pytest.raises(ValueError, match="ambiguous"):
        _ = Holder(array) == Holder(array.copy())


def test_a_record_made_in_bulk_compiles_its_own_init_once() -> None:
    Point = point_class(record, frozen=True)
    made = [Point(index, tags=[index]) for index in range(_records.COMPILE_AFTER + 5)]
    compiled = Point.__init__
    assert compiled is not _records._init
    assert compiled.__qualname__ == f"{Point.__qualname__}.__init__"
    assert made[-1] == Point(_records.COMPILE_AFTER + 4, 2, [_records.COMPILE_AFTER + 4])
    assert Point(1).tags is not Point(1).tags
    with pytest.raises(TypeError, match=r"Point\.__init__\(\) missing 1 required positional"):
        Point()
    Point(0)
    assert Point.__init__ is compiled  # compiled once


def _kind_of(value: Any) -> Any:
    """A class attribute, a slot's descriptor told by its kind (each class has its own)."""
    return "a slot" if isinstance(value, types.MemberDescriptorType) else value


def _described(cls: Any) -> dict[str, Any]:
    """What ``dataclasses`` leaves on a class it made of ``cls``, but its methods."""
    fields = [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.hash, f.compare,
               dict(f.metadata), f.kw_only, f._field_type)  # type: ignore[attr-defined]
              for f in dataclasses.fields(cls)]  # fmt: skip
    names = [name for name, *_ in fields]
    return {
        "fields": fields,
        "class attributes": {name: _kind_of(cls.__dict__.get(name, "absent")) for name in names},
        "match_args": cls.__match_args__,
        "slots": cls.__dict__.get("__slots__"),
        "has a __dict__": "__dict__" in dir(cls),
        "qualname": cls.__qualname__,
        "module": cls.__module__,
        "doc": cls.__doc__,
        "params": (cls.__dataclass_params__.init, cls.__dataclass_params__.frozen),
    }


def _plain(**options: Any) -> Any:
    class Plain:
        """Plain annotated fields: those record finds itself."""

        name: str
        size: int = 0
        parts: list[int] = field(default_factory=list, metadata={"unit": "bytes"})
        shown: bool = field(default=True, repr=False, compare=False, hash=False)
        hidden: float = field(default=1.5, init=False)
        pending: Any = field(init=False)

        def area(self) -> int:
            return self.size * 2

    return Plain


@pytest.mark.parametrize("slots", [False, True], ids=["dict", "slots"])
def test_a_record_finds_the_fields_a_dataclass_finds(slots) -> None:
    """record finds plain fields itself (``dataclasses`` spent most of a
    record's making on checks for what they are not): what it leaves on
    the class is what ``dataclasses`` leaves, field by field."""
    made = record(slots=slots)(_plain())
    reference = dataclass(init=False, repr=False, eq=False, slots=slots)(_plain())
    assert "__record__" in made.__dict__  # made by record
    assert _described(made) == _described(reference)
    assert made(name="a", size=3).area() == 6
    if slots:
        with pytest.raises(AttributeError):
            made(name="a").other = 1  # no __dict__


def _made_alike(build: Callable[[Any], Any]) -> None:
    """``build(make)`` makes the same class with ``record`` as with ``dataclass``."""
    reference = build(dataclass(init=False, repr=False, eq=False))
    assert _described(build(record)) == _described(reference)


def test_a_record_leaves_what_is_more_than_plain_fields_to_dataclasses() -> None:
    """ClassVar, InitVar and KW_ONLY annotations, inherited fields, a class
    without a docstring, a mutable default and a field without a type are
    made, or refused, by ``dataclasses`` itself."""
    from typing import ClassVar

    def classvar(make: Any) -> Any:
        @make
        class Counted:
            """A class-level count and one field."""

            made: ClassVar[int] = 0
            value: int = 1

        return Counted

    _made_alike(classvar)

    def undocumented(make: Any) -> Any:
        @make
        class Bare:
            value: int = 1

        return Bare

    _made_alike(undocumented)

    def inherited(make: Any) -> Any:
        @make
        class Base:
            """Two fields."""

            first: int
            second: int = 2

        @make
        class Derived(Base):
            """One more, and one overridden."""

            third: int = 3
            first: int = 0

        return Derived

    assert [f.name for f in dataclasses.fields(inherited(record))] == ["first", "second", "third"]
    assert inherited(record)().first == 0
    assert _described(inherited(record))["fields"] == _described(inherited(dataclass))["fields"]

    with pytest.raises(ValueError, match="mutable default <class 'list'> for field items"):

        @record
        class Mutable:
            """A list default."""

            items: list[int] = []  # noqa: RUF012  # refused, as intended

    with pytest.raises(TypeError, match="'loose' is a field but has no type annotation"):

        @record
        class Loose:
            """A field without a type."""

            loose = field(default=1)
