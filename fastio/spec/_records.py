"""``record``: a dataclass whose methods are shared functions, not generated code.

Python 3.11's ``@dataclass`` writes and compiles the source of ``__init__``,
``__repr__``, ``__eq__``, ``__hash__`` and, when frozen, ``__setattr__`` and
``__delattr__`` for every class: about half a millisecond a class. The
classes a first sample needs (settings, plans, layouts) number some thirty,
so their methods alone took longer than another loader's whole start.

:func:`record` keeps everything else of a dataclass (``dataclasses.fields``,
``replace``, ``asdict``, field metadata, defaults and factories,
``__post_init__``, ``__match_args__``, slots) and gives each class the same
generic methods, which read the class's fields from a small table built as
the class is made. They behave as the generated ones do, with the same error
messages. The generic ``__init__`` is a microsecond slower per instance: a
class made in bulk (a layout per shard) gets its own, compiled as a
dataclass's is, at its :data:`COMPILE_AFTER`-th instance. A class whose
``__init__`` checks and converts (a caller's byte ranges) writes its own,
which the record keeps.

A class of plain annotated fields (every class here) has its fields found
as ``@dataclass`` finds them, without the checks for ``ClassVar``,
``InitVar`` and ``KW_ONLY`` annotations, inherited fields or a missing
docstring that cost a dataclass most of its making: a class with any of
them is made by ``dataclasses`` itself.
"""

from __future__ import annotations

import abc
import dataclasses
import operator
import reprlib
from dataclasses import MISSING, FrozenInstanceError
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    from collections.abc import Callable

    from typing_extensions import dataclass_transform
else:  # read by type checkers only; and Python 3.10's typing has none

    def dataclass_transform(**_options: Any) -> Any:
        return lambda function: function


__all__ = ["record"]

T = TypeVar("T")

_NO_DEFAULT: Any = object()

# Instances a class makes through the generic __init__ before it gets one of
# its own, compiled as @dataclass compiles it (a tenth of a millisecond): a
# class made once a dataset never pays for that, one made per shard pays once
# and then makes each instance as fast as a dataclass (a microsecond less).
COMPILE_AFTER = 64


class _Shape:
    """What the generic methods need of a record class. (A plain class: a
    NamedTuple compiles code as it is made, as a dataclass does.)"""

    __slots__ = ("compared", "defaults", "factories", "frozen", "made", "names", "owner",
                 "post_init", "shown", "unset")  # fmt: skip

    def __init__(self, cls: type, frozen: bool, fields: tuple[dataclasses.Field[Any], ...]) -> None:
        taken = [field for field in fields if field.init]
        self.owner = cls
        self.frozen = frozen
        self.made = 0  # instances made by the generic __init__ so far
        self.names = tuple(field.name for field in taken)  # the __init__ parameters, in order
        # Per name: its default (or _NO_DEFAULT), its factory (or None).
        self.defaults = tuple(_NO_DEFAULT if field.default is MISSING else field.default
                              for field in taken)  # fmt: skip
        self.factories: tuple[Callable[[], Any] | None, ...] = tuple(
            None if field.default_factory is MISSING else field.default_factory for field in taken
        )
        # Fields left out of __init__: name, default, factory.
        self.unset = tuple(
            (field.name, field.default, None if field.default_factory is MISSING
             else field.default_factory) for field in fields if not field.init
        )  # fmt: skip
        self.shown = tuple(field.name for field in fields if field.repr)
        # The fields eq and hash compare, as one value.
        compared = [field for field in fields if field.compare]
        self.compared = _values(
            tuple(field.name for field in compared if field.hash is None or field.hash)
        )
        self.post_init = hasattr(cls, "__post_init__")


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The named fields of an instance as one tuple (compared as the
    generated methods compare: identical values are equal, arrays too)."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    getters = [operator.attrgetter(name) for name in names]
    return lambda instance: tuple(getter(instance) for getter in getters)


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    shape: _Shape = type(self).__record__
    shape.made += 1
    if shape.made == COMPILE_AFTER and shape.owner.__dict__.get("__init__") is _init:
        shape.owner.__init__ = _compiled_init(shape)  # type: ignore[misc]  # the next ones
    names = shape.names
    if len(args) > len(names):
        raise _too_many(type(self), shape, len(args))
    setattr_ = object.__setattr__
    for name, value in zip(names, args, strict=False):
        setattr_(self, name, value)
    if kwargs:
        for name, value in kwargs.items():
            if name not in names:
                raise TypeError(f"{type(self).__qualname__}.__init__() got an unexpected keyword "
                                f"argument {name!r}")  # fmt: skip
            if names.index(name) < len(args):
                raise TypeError(f"{type(self).__qualname__}.__init__() got multiple values for "
                                f"argument {name!r}")  # fmt: skip
            setattr_(self, name, value)
    missing = []
    for index in range(len(args), len(names)):
        name = names[index]
        if name in kwargs:
            continue
        default = shape.defaults[index]
        if default is not _NO_DEFAULT:
            setattr_(self, name, default)
        else:
            factory = shape.factories[index]
            if factory is None:
                missing.append(name)
            else:
                setattr_(self, name, factory())
    if missing:
        listed = " and ".join(", ".join(repr(name) for name in missing).rsplit(", ", 1))
        plural = "s" if len(missing) > 1 else ""
        raise TypeError(f"{type(self).__qualname__}.__init__() missing {len(missing)} required "
                        f"positional argument{plural}: {listed}")  # fmt: skip
    for name, default, factory in shape.unset:
        setattr_(self, name, factory() if factory is not None else default)
    if shape.post_init:
        self.__post_init__()


def _compiled_init(shape: _Shape) -> Callable[..., None]:
    """The class's own ``__init__``, as :func:`_init` behaves for it."""
    scope: dict[str, Any] = {"_record_set": object.__setattr__, "_record_nothing": _NO_DEFAULT}
    parameters, body = [], []
    # A frozen class's fields are set past its __setattr__, others directly.
    assign = "_record_set(self, {0!r}, {1})" if shape.frozen else "self.{0} = {1}"
    for index, name in enumerate(shape.names):
        default, factory = shape.defaults[index], shape.factories[index]
        value = name
        if default is not _NO_DEFAULT:
            scope[f"_record_default_{name}"] = default
            parameters.append(f"{name}=_record_default_{name}")
        elif factory is not None:
            scope[f"_record_factory_{name}"] = factory
            parameters.append(f"{name}=_record_nothing")
            value = f"_record_factory_{name}() if {name} is _record_nothing else {name}"
        else:
            parameters.append(name)
        body.append(assign.format(name, value))
    for name, default, factory in shape.unset:
        scope[f"_record_unset_{name}"] = default if factory is None else factory
        call = "" if factory is None else "()"
        body.append(assign.format(name, f"_record_unset_{name}{call}"))
    if shape.post_init:
        body.append("self.__post_init__()")
    source = f"def __init__(self, {', '.join(parameters)}):\n"
    source += "".join(f"    {line}\n" for line in body or ["pass"])
    exec(source, scope)  # names and values from the class's own fields
    function: Callable[..., None] = scope["__init__"]
    function.__qualname__ = f"{shape.owner.__qualname__}.__init__"
    return function


def _too_many(cls: type, shape: _Shape, given: int) -> TypeError:
    required = sum(1 for default, factory in zip(shape.defaults, shape.factories, strict=True)
                   if default is _NO_DEFAULT and factory is None)  # fmt: skip
    most = len(shape.names) + 1  # self counted, as Python counts it
    takes = f"from {required + 1} to {most}" if required + 1 < most else str(most)
    return TypeError(
        f"{cls.__qualname__}.__init__() takes {takes} positional arguments but "
        f"{given + 1} were given"
    )


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self).__record__.shown)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    compared = type(self).__record__.compared
    return bool(compared(self) == compared(other))


def _hash(self: Any) -> int:
    return hash(type(self).__record__.compared(self))


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:  # frozen slots: pickled by value, restored past setattr
    return [getattr(self, field.name) for field in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for field, value in zip(dataclasses.fields(self), state, strict=True):
        object.__setattr__(self, field.name, value)


def _shape(cls: type, frozen: bool) -> _Shape:
    shape = _Shape(cls, frozen, dataclasses.fields(cls))
    has_default = False
    for name, default, factory in zip(shape.names, shape.defaults, shape.factories, strict=True):
        if default is not _NO_DEFAULT or factory is not None:
            has_default = True
        elif has_default:
            raise TypeError(f"non-default argument {name!r} follows default argument")
    return shape


_FIELD_KIND = getattr(dataclasses, "_FIELD", None)  # what marks a field (not a ClassVar)


# The parameters of every record :func:`_plain_fields` makes: those it is
# made with as a dataclass (its methods are the record's), from a class of none.
_PARAMS = dataclasses.dataclass(init=False, repr=False, eq=False)(
    type("_Params", (), {"__doc__": "No fields."})
).__dataclass_params__  # type: ignore[attr-defined]


def _plain_fields(cls: type) -> dict[str, dataclasses.Field[Any]] | None:
    """The fields ``dataclasses.dataclass(cls, init=False, repr=False, eq=False)``
    would find, found the same way and set on ``cls`` as it sets them; None
    (and ``cls`` untouched) where the class has more than plain annotated
    fields with hashable defaults, for ``dataclasses`` to make."""
    if _FIELD_KIND is None or not cls.__doc__ or isinstance(cls, abc.ABCMeta):
        return None
    if any("__dataclass_fields__" in base.__dict__ for base in cls.__mro__[1:]):
        return None  # inherited fields: their order and overrides are dataclasses'
    body = cls.__dict__
    annotations: dict[str, Any] = body.get("__annotations__", {})
    fields: dict[str, dataclasses.Field[Any]] = {}
    for name, kind in annotations.items():
        if not isinstance(kind, str) or "Var" in kind or "KW_ONLY" in kind:
            return None  # ClassVar, InitVar (or a name like them: dataclasses tells), KW_ONLY
        default: Any = getattr(cls, name, MISSING)
        made = (
            default
            if isinstance(default, dataclasses.Field)
            else dataclasses.field(default=default)
        )
        if type(made.default).__hash__ is None or made.kw_only is True:
            return None  # a mutable default (dataclasses' own error), or keyword-only
        fields[name] = made
    if any(isinstance(value, dataclasses.Field) and name not in annotations
           for name, value in body.items()):  # fmt: skip
        return None  # a field without a type: dataclasses' own error
    for name, made in fields.items():
        made.name, made.type = name, annotations[name]
        made._field_type = _FIELD_KIND  # type: ignore[attr-defined]  # as dataclasses marks it
        made.kw_only = False
        if isinstance(body.get(name), dataclasses.Field):
            if made.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, made.default)
    return fields


def _plainly_made(cls: type, slots: bool) -> type | None:
    """``cls`` made a dataclass of no methods as :func:`_plain_fields` can
    (with ``slots``: the new class ``dataclasses`` would make, for a class
    of no base), else None."""
    if slots and (cls.__bases__ != (object,) or "__slots__" in cls.__dict__):
        return None
    fields = _plain_fields(cls)
    if fields is None:
        return None
    target: Any = cls
    target.__dataclass_fields__ = fields
    target.__dataclass_params__ = _PARAMS
    if "__match_args__" not in cls.__dict__:
        names = tuple(name for name, entry in fields.items() if entry.init)
        target.__match_args__ = names  # type: ignore[misc]  # as dataclasses sets it
    if not slots:
        return cls
    body = {name: value for name, value in cls.__dict__.items()
            if name not in fields and name not in ("__dict__", "__weakref__")}  # fmt: skip
    body["__slots__"] = tuple(fields)
    slotted = type(cls)(cls.__name__, cls.__bases__, body)
    slotted.__qualname__ = cls.__qualname__
    return slotted


def _set(cls: type, name: str, value: Any) -> None:
    if name not in cls.__dict__:  # what the class defines itself stays
        setattr(cls, name, value)


@dataclass_transform(field_specifiers=(dataclasses.field,))
@overload
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(*, frozen: bool = False, slots: bool = False) -> Callable[[type[T]], type[T]]: ...


def record(
    cls: type[T] | None = None, /, *, frozen: bool = False, slots: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """``@dataclass``, ``@dataclass(frozen=True)``, ``slots=True``: the same
    class and the same behaviour, made without compiling code (but the
    ``__init__`` of a class made in bulk, see the module)."""

    def make(cls: type[T]) -> type[T]:
        body = cls.__dict__
        explicit_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
        made: Any = _plainly_made(cls, slots)
        if made is None:
            made = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=slots)
        made.__record__ = _shape(made, frozen)
        _set(made, "__init__", _init)
        _set(made, "__repr__", _repr)
        if "__eq__" not in body:
            made.__eq__ = _eq
        if frozen:
            _set(made, "__setattr__", _frozen_setattr)
            _set(made, "__delattr__", _frozen_delattr)
            if slots:
                _set(made, "__getstate__", _getstate)
                _set(made, "__setstate__", _setstate)
        if not explicit_hash:  # as a dataclass: hashable by value when frozen, else not at all
            made.__hash__ = _hash if frozen else None
        return made  # type: ignore[no-any-return]

    return make if cls is None else make(cls)
