"""`@frozen`: a frozen dataclass with slots (every message of `bxcore.wire.messages`, and the values
of `bxcore` and brokerd's core), made for a fraction of what `@dataclass(frozen=True,
slots=True)` costs to define.

On Python 3.11 that decorator compiles six methods for each class: the 72 messages alone cost
each process 40-60 ms of its start, and `bxctl up` starts five (bench startup). Here `dataclasses`
still makes the class (its fields, slots and `__match_args__`, so `dataclasses.fields` and
`replace` work on it) and only `__init__` is compiled, as the generated one is; equality,
hashing, `repr` and the refusal to be changed are shared functions that do what the generated
ones do. Instances are neither copied nor pickled (nothing does). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")
Values = Callable[[Any], tuple[Any, ...]]


@dataclass_transform(frozen_default=True)
def frozen(cls: type[T]) -> type[T]:
    """`cls` as a frozen dataclass with slots. Its fields have plain defaults if any (no
    `field(...)`, no subclasses); its own `__repr__`, if it has one, is kept."""
    own = vars(cls).keys()
    assert not own & {"__eq__", "__hash__", "__setattr__", "__delattr__", "__post_init__"}, cls
    documented = cls.__doc__ is not None
    if not documented:  # for now: dataclasses would write one from a signature, at a cost
        cls.__doc__ = cls.__name__
    made: Any = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=True)
    fields = dataclasses.fields(made)
    names = tuple(f.name for f in fields)
    if not documented:
        made.__doc__ = f"{made.__name__}({', '.join(names)})"
    values = _values(names)
    made.__init__ = _init(made, fields)
    made.__eq__ = _eq(values)
    made.__hash__ = lambda self: hash(values(self))
    if "__repr__" not in own:
        made.__repr__ = _repr(names)
    made.__setattr__ = _refuse_setattr
    made.__delattr__ = _refuse_delattr
    result: type[T] = made
    return result


def _init(cls: type[Any], fields: tuple[dataclasses.Field[Any], ...]) -> Callable[..., None]:
    """The `__init__` dataclasses would write for a frozen class, compiled once for `cls`, with
    the same annotations and the module's globals (`typing.get_type_hints` reads them). Each
    field is set through its slot's own descriptor, which `object.__setattr__` would look up
    by name first (0.41 against 0.59 us for four fields; every message is made so)."""
    assert all(f.init and f.default_factory is dataclasses.MISSING for f in fields), cls
    defaults = {
        f"__default_{f.name}__": f.default for f in fields if f.default is not dataclasses.MISSING
    }
    setters = {f"__set_{f.name}__": getattr(cls, f.name).__set__ for f in fields}
    params = ", ".join(
        f.name if f.default is dataclasses.MISSING else f"{f.name}=__default_{f.name}__"
        for f in fields
    )
    body = "".join(f"  __set_{f.name}__(self, {f.name})\n" for f in fields)
    body = body or "  pass\n"
    outer = ", ".join([*setters, *defaults])
    source = f"def __make__({outer}):\n def __init__(self, {params}):\n{body} return __init__\n"
    scope: dict[str, Any] = {}
    exec(source, sys.modules[cls.__module__].__dict__, scope)
    init: Callable[..., None] = scope["__make__"](*setters.values(), *defaults.values())
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**{f.name: f.type for f in fields}, "return": None}
    return init


def _values(names: tuple[str, ...]) -> Values:
    """An instance's field values, as the tuple the generated methods compare and hash."""
    if len(names) > 1:
        many: Values = operator.attrgetter(*names)
        return many
    if names:
        one = operator.attrgetter(names[0])
        return lambda self: (one(self),)
    return lambda self: ()


def _eq(values: Values) -> Callable[[Any, object], Any]:
    def __eq__(self: Any, other: object) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _refuse_setattr(self: Any, name: str, value: object) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
