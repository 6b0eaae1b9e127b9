"""What the accessors that `ordoctl codegen --python` generates from a schema
share (docs/schema.md, "Generated accessors"): typed reads and writes of
declared keypaths over an :class:`ordo.Bus` (in-process) or an
:class:`ordo.Client` (D-Bus)."""
from typing import Any, Dict, Generic, Mapping, Optional, Tuple, TypeVar

from .errors import TypeMismatch
from .native import Bus

T = TypeVar("T")


class Access:
    """Reads and writes of one bus: an ordo.Bus (a write joins the thread's
    transaction or makes one) or an ordo.Client (a write is one Commit)."""

    def __init__(self, bus: Any) -> None:
        self.bus = bus
        self.native = isinstance(bus, Bus)

    def get(self, keypath: str) -> Any:
        return self.bus.get(keypath) if self.native else self.bus.get(keypath).value

    def stored(self, prefix: str, keys: Tuple[str, ...]) -> Dict[str, Any]:
        """The stored values among ``prefix.key`` for ``keys``, by key, read at
        one moment (one snapshot of ``prefix.**``)."""
        values = self.bus.snapshot([prefix + ".**"]).values
        return {k: values[prefix + "." + k] for k in keys if prefix + "." + k in values}

    def elements(self, keypath: str) -> Dict[str, Dict[str, Any]]:
        """The stored values under each element ``keypath.<id>``, by id (in
        order) and by the rest of their keypath, read at one moment (one
        snapshot of ``keypath.**``)."""
        out: Dict[str, Dict[str, Any]] = {}
        for k, v in sorted(self.bus.snapshot([keypath + ".**"]).values.items()):
            id, _, rest = k[len(keypath) + 1:].partition(".")
            if rest:
                out.setdefault(id, {})[rest] = v
        return out

    def children(self, keypath: str) -> Dict[str, Any]:
        """The stored values of ``keypath.<id>`` by id (in order), read at one
        moment (one snapshot of ``keypath.*``)."""
        values = self.bus.snapshot([keypath + ".*"]).values
        return {k[len(keypath) + 1:]: v for k, v in sorted(values.items())}

    def write(self, set: Mapping[str, Any] = {}, touch: Tuple[str, ...] = (), remove: Tuple[str, ...] = (),
              remove_tree: Tuple[str, ...] = ()) -> None:
        """One transaction of these writes."""
        if not self.native:
            self.bus.commit(set=dict(set), touch=touch, remove=remove + tuple(k + ".**" for k in remove_tree))
            return
        with self.bus.transaction():
            for k, v in set.items():
                self.bus.set(k, v)
            for k in touch:
                self.bus.touch(k)
            for k in remove:
                self.bus.remove(k)
            for k in remove_tree:
                self.bus.remove_tree(k)


def typed(value: Any, type_: type, keypath: str) -> Any:
    """``value`` when it is exactly of ``type_`` (a bool is not an int here);
    :class:`ordo.TypeMismatch` otherwise."""
    if type(value) is not type_:
        raise TypeMismatch(f"{keypath}: a {type_.__name__} value, not {value!r}")
    return value


class Property(Generic[T]):
    """One declared keypath holding values of one type."""

    def __init__(self, access: Access, keypath: str, type_: type, default: Optional[T]) -> None:
        self._access = access
        self.keypath = keypath
        self.type = type_
        self.default = default

    def get(self) -> T:
        """The value, the default when none is stored (ordo.NotFound without one)."""
        return self._access.get(self.keypath)

    def set(self, value: T) -> None:
        self._access.write(set={self.keypath: typed(value, self.type, self.keypath)})

    def remove(self) -> None:
        self._access.write(remove=(self.keypath,))


class Event:
    """One declared event: a keypath that is only touched."""

    def __init__(self, access: Access, keypath: str) -> None:
        self._access = access
        self.keypath = keypath

    def touch(self) -> None:
        self._access.write(touch=(self.keypath,))
