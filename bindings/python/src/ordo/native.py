"""An in-process Ordo bus: ``libordo.so`` (include/ordo.h) through ctypes.

The library is found, in this order, at an explicit ``library=`` path, at
the path in the ``ORDO_LIBRARY`` environment variable, or by
``ctypes.util.find_library("ordo")`` (an installed ``libordo.so``).

Contract callbacks are Python functions called synchronously, on the
committing thread, once per transaction whose changes affect their reads.
They receive a :class:`Note` and may read and write the bus within their
contract. An exception raised by a callback cannot cross the C library: it
is handed to the bus's ``on_error(contract, exception)`` (default: logged
on the ``"ordo"`` logger) and the pass goes on, as SPEC §5 says of failing
callbacks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import threading
from contextlib import contextmanager
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_bool, c_char_p, c_double, c_int, c_int32, c_int64,
                    c_size_t, c_uint32, c_uint64, c_void_p)
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Tuple, Union

from .errors import InvalidArgument, LibraryNotFound, OrdoError, error_for_status
from .client import Snapshot
from .trace import ContractInfo, Trace, TraceStep
from .values import Value, check_expect, check_text, check_value, is_uint64

__all__ = ["Bus", "Contract", "Handle", "Note", "load_library", "NO_PRIORITY", "NOTIFY_INITIAL"]

log = logging.getLogger("ordo")

NO_PRIORITY = -2 ** 31
NOTIFY_INITIAL = 1
_TYPES = {1: "bool", 2: "int64", 3: "double", 4: "string", 5: "bytes"}
_KINDS = {bool: "bool", int: "int64", float: "double", str: "string", bytes: "bytes"}


class _Notification(Structure):
    _fields_ = [("txn", c_uint64), ("contract", c_uint64),
                ("changed", POINTER(c_char_p)), ("n_changed", c_size_t)]


_CALLBACK = CFUNCTYPE(None, c_void_p, POINTER(_Notification), c_void_p)
_DESTROY = CFUNCTYPE(None, c_void_p)


class _Spec(Structure):
    _fields_ = [("size", c_uint32), ("name", c_char_p),
                ("reads", POINTER(c_char_p)), ("n_reads", c_size_t),
                ("writes", POINTER(c_char_p)), ("n_writes", c_size_t),
                ("priority", c_int32), ("flags", c_uint32),
                ("callback", _CALLBACK), ("user_data", c_void_p), ("destroy", _DESTROY)]


_STRINGS = POINTER(c_char_p)


class _ContractInfo(Structure):
    _fields_ = [("size", c_uint32), ("id", c_uint64), ("name", c_char_p), ("kind", c_int),
                ("priority", c_int32), ("level", c_uint32), ("position", c_uint32),
                ("calls", c_uint64), ("failures", c_uint64), ("last_txn", c_uint64),
                ("reads", _STRINGS), ("n_reads", c_size_t), ("writes", _STRINGS), ("n_writes", c_size_t),
                ("unused_reads", _STRINGS), ("n_unused_reads", c_size_t),
                ("unused_writes", _STRINGS), ("n_unused_writes", c_size_t)]


class _TraceStep(Structure):
    _fields_ = [("contract", c_uint64), ("name", c_char_p), ("txn", c_uint64), ("outcome", c_int),
                ("initial", c_bool),
                ("because", _STRINGS), ("n_because", c_size_t),
                ("writes", _STRINGS), ("n_writes", c_size_t),
                ("refused", _STRINGS), ("n_refused", c_size_t),
                ("failure", c_char_p), ("duration_ns", c_uint64)]


class _Trace(Structure):
    _fields_ = [("txn", c_uint64), ("committed", c_bool), ("changed", _STRINGS), ("n_changed", c_size_t),
                ("steps", POINTER(_TraceStep)), ("n_steps", c_size_t), ("duration_ns", c_uint64)]


_TRACE_CALLBACK = CFUNCTYPE(None, c_void_p, POINTER(_Trace), c_void_p)
_KIND_NAMES = {1: "priority", 2: "data", 3: "every-transaction"}
_OUTCOMES = {0: "called", 1: "failed", 2: "unchanged", 3: "unregistered"}


class _Value(Structure):
    _fields_ = [("type", c_int), ("b", c_bool), ("i", c_int64), ("d", c_double),
                ("s", c_void_p), ("bytes", c_void_p), ("len", c_size_t)]


_SNAPSHOT_CALLBACK = CFUNCTYPE(None, c_char_p, POINTER(_Value), c_uint64, c_void_p)

_SIGNATURES = {
    "ordo_version": (c_char_p, []),
    "ordo_last_error_message": (c_char_p, []),
    "ordo_status_name": (c_char_p, [c_int]),
    "ordo_bus_new": (c_void_p, []),
    "ordo_bus_new_with_schema": (c_int, [c_char_p, POINTER(c_void_p)]),
    "ordo_bus_new_with_schema_file": (c_int, [c_char_p, POINTER(c_void_p)]),
    "ordo_schema_json": (c_int, [c_void_p, POINTER(c_void_p)]),
    "ordo_is_stored": (c_int, [c_void_p, c_char_p, POINTER(c_bool)]),
    "ordo_bus_free": (None, [c_void_p]),
    "ordo_transaction_id": (c_uint64, [c_void_p]),
    "ordo_begin": (c_int, [c_void_p]),
    "ordo_commit": (c_int, [c_void_p, POINTER(c_uint64)]),
    "ordo_expect_counter": (c_int, [c_void_p, c_char_p, c_uint64]),
    "ordo_owner_new": (c_int, [c_void_p, c_char_p, POINTER(c_void_p)]),
    "ordo_begin_owned": (c_int, [c_void_p, c_void_p]),
    "ordo_owner_free": (None, [c_void_p]),
    "ordo_rollback": (c_int, [c_void_p]),
    "ordo_set_bool": (c_int, [c_void_p, c_char_p, c_bool]),
    "ordo_set_int64": (c_int, [c_void_p, c_char_p, c_int64]),
    "ordo_set_double": (c_int, [c_void_p, c_char_p, c_double]),
    "ordo_set_string": (c_int, [c_void_p, c_char_p, c_char_p]),
    "ordo_set_bytes": (c_int, [c_void_p, c_char_p, c_void_p, c_size_t]),
    "ordo_touch": (c_int, [c_void_p, c_char_p]),
    "ordo_remove": (c_int, [c_void_p, c_char_p]),
    "ordo_remove_tree": (c_int, [c_void_p, c_char_p]),
    "ordo_get_type": (c_int, [c_void_p, c_char_p, POINTER(c_int)]),
    "ordo_get_bool": (c_int, [c_void_p, c_char_p, POINTER(c_bool)]),
    "ordo_get_int64": (c_int, [c_void_p, c_char_p, POINTER(c_int64)]),
    "ordo_get_double": (c_int, [c_void_p, c_char_p, POINTER(c_double)]),
    "ordo_get_string": (c_int, [c_void_p, c_char_p, POINTER(c_void_p)]),
    "ordo_get_bytes": (c_int, [c_void_p, c_char_p, POINTER(c_void_p), POINTER(c_size_t)]),
    "ordo_free": (None, [c_void_p]),
    "ordo_counter": (c_uint64, [c_void_p, c_char_p]),
    "ordo_get_counter": (c_int, [c_void_p, c_char_p, POINTER(c_uint64)]),
    "ordo_snapshot": (c_int, [c_void_p, _STRINGS, c_size_t, _SNAPSHOT_CALLBACK, c_void_p, POINTER(c_uint64)]),
    "ordo_register": (c_int, [c_void_p, POINTER(_Spec), POINTER(c_uint64)]),
    "ordo_unregister": (c_int, [c_void_p, c_uint64]),
    "ordo_current_contract": (c_uint64, [c_void_p]),
    "ordo_resolve": (c_int, [c_void_p, c_char_p, POINTER(c_void_p)]),
    "ordo_handle_keypath": (c_char_p, [c_void_p]),
    "ordo_handle_set_bool": (c_int, [c_void_p, c_bool]),
    "ordo_handle_set_int64": (c_int, [c_void_p, c_int64]),
    "ordo_handle_set_double": (c_int, [c_void_p, c_double]),
    "ordo_handle_set_string": (c_int, [c_void_p, c_char_p]),
    "ordo_handle_set_bytes": (c_int, [c_void_p, c_void_p, c_size_t]),
    "ordo_handle_touch": (c_int, [c_void_p]),
    "ordo_handle_remove": (c_int, [c_void_p]),
    "ordo_handle_get_type": (c_int, [c_void_p, POINTER(c_int)]),
    "ordo_handle_get_bool": (c_int, [c_void_p, POINTER(c_bool)]),
    "ordo_handle_get_int64": (c_int, [c_void_p, POINTER(c_int64)]),
    "ordo_handle_get_double": (c_int, [c_void_p, POINTER(c_double)]),
    "ordo_handle_get_string": (c_int, [c_void_p, POINTER(c_void_p)]),
    "ordo_handle_get_bytes": (c_int, [c_void_p, POINTER(c_void_p), POINTER(c_size_t)]),
    "ordo_handle_get_counter": (c_int, [c_void_p, POINTER(c_uint64)]),
    "ordo_get_contract_info": (c_int, [c_void_p, c_uint64, POINTER(POINTER(_ContractInfo))]),
    "ordo_set_trace": (c_int, [c_void_p, _TRACE_CALLBACK, c_void_p]),
    "ordo_dbus_publish": (c_int, [c_void_p, c_char_p, c_char_p]),
    "ordo_dbus_fd": (c_int, [c_void_p]),
    "ordo_dbus_dispatch": (c_int, [c_void_p, c_int]),
}

_libraries: Dict[str, ctypes.CDLL] = {}
_lib_lock = threading.Lock()


def load_library(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads libordo.so (explicit path, then $ORDO_LIBRARY, then
    find_library("ordo")) and declares its functions. Cached per path."""
    where = "the library= argument"
    if path is None:
        path = os.environ.get("ORDO_LIBRARY") or None
        where = "$ORDO_LIBRARY"
    if path is None:
        path = ctypes.util.find_library("ordo")
        where = 'ctypes.util.find_library("ordo")'
        if path is None:
            raise LibraryNotFound("libordo.so not found (ctypes.util.find_library(\"ordo\") found nothing): "
                                  "pass library=PATH, set ORDO_LIBRARY=PATH, "
                                  "or install it (make install PREFIX=...; ldconfig)")
    with _lib_lock:
        lib = _libraries.get(path)
        if lib is not None:
            return lib
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise LibraryNotFound(f"cannot load {path} (from {where}): {e}") from None
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                f = getattr(lib, name)
            except AttributeError:
                raise LibraryNotFound(f"{path} is not libordo.so: it has no {name}") from None
            f.restype = restype
            f.argtypes = argtypes
        _libraries[path] = lib
        return lib


class Note(NamedTuple):
    """What a contract callback receives: the transaction id, the contract
    id, and the changed keypaths (as written) that affect its reads (empty
    for an initial call)."""
    txn: int
    contract: int
    changed: Tuple[str, ...]


class Contract:
    """A registered contract (returned by :meth:`Bus.register`)."""

    def __init__(self, bus: "Bus", id: int, name: str, fn: Callable[[Note], Any]):
        self.bus = bus
        self.id = id
        self.name = name
        self.fn = fn
        #: True once the library has released it (unregistered, or its bus freed)
        self.gone = False

    def unregister(self) -> None:
        self.bus.unregister(self)

    def __repr__(self) -> str:
        return f"<ordo.Contract {self.id} {self.name!r}{' gone' if self.gone else ''}>"


# One callback and one destroy trampoline for every contract of every bus:
# they live as long as the module, so the library never calls a freed thunk.
# user_data is a token that names the contract in _contracts.
_contracts: Dict[int, Contract] = {}
_contracts_lock = threading.Lock()
_next_token = iter(range(1, 2 ** 62))
_tls = threading.local()


def _call(bus_ptr, note_ptr, user_data) -> None:
    with _contracts_lock:
        contract = _contracts.get(user_data or 0)
    if contract is None:
        return
    n = note_ptr.contents
    if not contract.id:
        contract.id = n.contract  # an initial call inside ordo_register
    changed = tuple(n.changed[i].decode("utf-8", "surrogateescape") for i in range(n.n_changed))
    _tls.depth = getattr(_tls, "depth", 0) + 1
    try:
        contract.fn(Note(n.txn, n.contract, changed))
    except BaseException as e:  # cannot cross the C library
        try:
            contract.bus.on_error(contract, e)
        except BaseException:  # pragma: no cover - a failing error handler
            log.exception("ordo: on_error failed")
    finally:
        _tls.depth -= 1


def _destroy(user_data) -> None:
    with _contracts_lock:
        contract = _contracts.pop(user_data or 0, None)
    if contract is not None:
        contract.gone = True
        contract.bus._contracts.pop(contract.id, None)


_CALL = _CALLBACK(_call)
_DESTROY_FN = _DESTROY(_destroy)


def _log_error(contract: Any, error: BaseException) -> None:
    log.error("ordo: contract %s failed: %r", contract, error, exc_info=error)


def _encode(s: Any, what: str) -> bytes:
    if not isinstance(s, str):
        raise InvalidArgument(f"{what}: a str, not {type(s).__name__}")
    check_text(s, what)
    return s.encode("utf-8")


def _array(items: Iterable[str], what: str):
    if isinstance(items, (str, bytes)):
        raise InvalidArgument(f"{what}: a list of patterns, not a single {type(items).__name__}")
    enc = [_encode(x, what) for x in items]
    arr = (c_char_p * max(len(enc), 1))(*enc)
    return arr, len(enc)


def _strings(arr, n: int) -> Tuple[str, ...]:
    return tuple(arr[i].decode("utf-8", "surrogateescape") for i in range(n))


def _value(v: _Value) -> Value:
    """The Python value of an ordo_value (strings and bytes copied)."""
    kind = _TYPES[v.type]
    if kind == "bool":
        return v.b
    if kind == "int64":
        return v.i
    if kind == "double":
        return v.d
    if kind == "string":
        return ctypes.string_at(v.s, v.len).decode("utf-8")
    return ctypes.string_at(v.bytes, v.len) if v.len else b""


class Handle:
    """A keypath resolved once (``ordo_resolve``): reads and writes through
    it skip parsing and lookup, with the same rules as the keypath functions.
    The bus owns it; it is valid while the bus is open (resolving the same
    keypath again gives the same handle)."""

    __slots__ = ("bus", "_h", "keypath")

    def __init__(self, bus: "Bus", h: int, keypath: str):
        self.bus = bus
        self._h = h
        self.keypath = keypath

    def _ptr(self) -> int:
        self.bus._bus()  # InvalidArgument once the bus is closed
        return self._h

    def set(self, value: Value) -> None:
        """Sets its value (bool, int, float, str or bytes) in the open transaction."""
        v = check_value(value, self.keypath)
        lib, h = self.bus._lib, self._ptr()
        if isinstance(v, bool):
            st = lib.ordo_handle_set_bool(h, v)
        elif isinstance(v, int):
            st = lib.ordo_handle_set_int64(h, v)
        elif isinstance(v, float):
            st = lib.ordo_handle_set_double(h, v)
        elif isinstance(v, str):
            st = lib.ordo_handle_set_string(h, _encode(v, f"value of {self.keypath!r}"))
        else:
            st = lib.ordo_handle_set_bytes(h, v if v else None, len(v))
        self.bus._check(st)

    def touch(self) -> None:
        self.bus._check(self.bus._lib.ordo_handle_touch(self._ptr()))

    def remove(self) -> None:
        self.bus._check(self.bus._lib.ordo_handle_remove(self._ptr()))

    def type_of(self) -> str:
        t = c_int(0)
        self.bus._check(self.bus._lib.ordo_handle_get_type(self._ptr(), byref(t)))
        return _TYPES[t.value]

    def get(self, type: Optional[type] = None) -> Value:
        """As :meth:`Bus.get` for its keypath."""
        lib, h = self.bus._lib, self._ptr()
        if type is None:
            kind = self.type_of()
        else:
            kind = _KINDS.get(type)
            if kind is None:
                raise InvalidArgument(f"type: one of bool, int, float, str, bytes, not {type!r}")
        check = self.bus._check
        if kind == "bool":
            out_b = c_bool()
            check(lib.ordo_handle_get_bool(h, byref(out_b)))
            return out_b.value
        if kind == "int64":
            out_i = c_int64()
            check(lib.ordo_handle_get_int64(h, byref(out_i)))
            return out_i.value
        if kind == "double":
            out_d = c_double()
            check(lib.ordo_handle_get_double(h, byref(out_d)))
            return out_d.value
        p = c_void_p()
        if kind == "string":
            check(lib.ordo_handle_get_string(h, byref(p)))
            try:
                return ctypes.string_at(p.value).decode("utf-8")
            finally:
                lib.ordo_free(p)
        n = c_size_t()
        check(lib.ordo_handle_get_bytes(h, byref(p), byref(n)))
        try:
            return ctypes.string_at(p.value, n.value) if n.value else b""
        finally:
            lib.ordo_free(p)

    @property
    def counter(self) -> int:
        out = c_uint64()
        self.bus._check(self.bus._lib.ordo_handle_get_counter(self._ptr(), byref(out)))
        return out.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Handle) and other._h == self._h

    def __hash__(self) -> int:
        return hash(self._h)

    def __repr__(self) -> str:
        return f"<ordo.Handle {self.keypath!r}>"


class _Transaction:
    """What ``with bus.transaction() as t`` binds: ``t.txn`` is the id after
    the block (0 if nothing changed, or for an inner transaction)."""
    txn: Optional[int] = None


class Owner:
    """An owner of stored values (SPEC §15; ``ordo_owner``): what a
    ``with bus.transaction(owner=o)`` block sets belongs to it, and
    :meth:`release` (or closing it with ``with``, or its garbage collection)
    removes those values in one transaction, with a normal pass."""

    def __init__(self, bus: "Bus", name: str):
        self._bus = bus
        self.name = name
        out = c_void_p(None)
        bus._check(bus._lib.ordo_owner_new(bus._bus(), _encode(name, "name"), byref(out)))
        self._ptr: Optional[int] = out.value

    def release(self) -> None:
        """Removes every value the owner holds (one transaction); afterwards
        it owns nothing more. A second call does nothing."""
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            self._bus._lib.ordo_owner_free(ptr)

    def __enter__(self) -> "Owner":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"Owner({self.name!r}{'' if self._ptr is not None else ', released'})"


class Bus:
    """An Ordo bus in this process (``ordo_bus_new`` ... ``ordo_bus_free``).

    Use it as a context manager (or call :meth:`close`): closing it
    unregisters every contract (their callbacks are released) and stops a
    D-Bus publication.
    """

    def __init__(self, library: Optional[str] = None, *,
                 on_error: Optional[Callable[[Contract, BaseException], None]] = None,
                 schema: Union[str, Dict[str, Any], None] = None, schema_file: Optional[str] = None):
        """``schema`` (the JSON text of a schema, or the document as a dict)
        or ``schema_file`` (its path) makes a bus that enforces it (SPEC
        §14, docs/schema.md): undeclared keypaths and values outside their
        declaration raise :class:`Schema`, values of another type
        :class:`TypeMismatch`, and reads of declared keypaths without a
        stored value return their default (:meth:`is_stored` tells)."""
        self._lib = load_library(library)
        self.on_error = on_error or _log_error
        self._contracts: Dict[int, Contract] = {}
        self._tokens: Dict[int, int] = {}
        self._trace_fn: Optional[Callable[[Trace], Any]] = None
        self._trace_thunk = None
        self._ptr: Optional[int] = None
        if schema is not None and schema_file is not None:
            raise InvalidArgument("give schema or schema_file, not both")
        if schema is None and schema_file is None:
            ptr = self._lib.ordo_bus_new()
            if not ptr:  # pragma: no cover - aborts on OOM rather
                raise OrdoError("ordo_bus_new failed")
        else:
            out = c_void_p()
            if schema_file is not None:
                self._check(self._lib.ordo_bus_new_with_schema_file(_encode(schema_file, "schema_file"), byref(out)))
            else:
                text = schema if isinstance(schema, str) else json.dumps(schema)
                self._check(self._lib.ordo_bus_new_with_schema(_encode(text, "schema"), byref(out)))
            ptr = out.value
        self._ptr = ptr

    # -- plumbing -----------------------------------------------------------

    @property
    def version(self) -> str:
        """The library's version (ordo_version)."""
        return self._lib.ordo_version().decode()

    def _bus(self) -> int:
        if self._ptr is None:
            raise InvalidArgument("the bus is closed")
        return self._ptr

    def _check(self, status: int) -> None:
        if status != 0:
            raise error_for_status(status, self._lib.ordo_last_error_message().decode("utf-8", "replace"))

    def status_name(self, status: int) -> str:
        """The C name of a status ("ORDO_E_CYCLE" ...)."""
        return self._lib.ordo_status_name(status).decode()

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        """Frees the bus (ordo_bus_free): every contract is unregistered and
        released. Not allowed from a callback (InvalidArgument)."""
        if self._ptr is None:
            return
        if getattr(_tls, "depth", 0):
            raise InvalidArgument("a bus cannot be closed from a contract callback")
        ptr, self._ptr = self._ptr, None
        self._lib.ordo_bus_free(ptr)
        with _contracts_lock:  # destroy ran for each; drop anything left just in case
            for token in list(self._tokens.values()):
                c = _contracts.pop(token, None)
                if c is not None:
                    c.gone = True
        self._tokens.clear()
        self._contracts.clear()
        self._trace_fn = None
        self._trace_thunk = None

    def __enter__(self) -> "Bus":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._ptr is not None and not getattr(_tls, "depth", 0):
                self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    # -- transactions -------------------------------------------------------

    def begin(self) -> None:
        """Begins (or joins) a write transaction on this thread."""
        self._check(self._lib.ordo_begin(self._bus()))

    def commit(self) -> int:
        """Commits; the outermost commit runs the notification pass (the
        callbacks run inside this call). Returns the id (0: nothing changed
        or an inner commit)."""
        txn = c_uint64(0)
        self._check(self._lib.ordo_commit(self._bus(), byref(txn)))
        return txn.value

    def rollback(self) -> None:
        """Discards the whole (outermost) transaction."""
        self._check(self._lib.ordo_rollback(self._bus()))

    def expect(self, keypath: str, counter: int) -> None:
        """Makes the open transaction conditional: its outermost commit
        applies it only if ``keypath``'s counter is still ``counter`` (0:
        never changed), else raises :class:`Conflict` and applies nothing."""
        if not is_uint64(counter):
            raise InvalidArgument(f"counter: an int from 0 to 2**64 - 1, not {counter!r}")
        self._check(self._lib.ordo_expect_counter(self._bus(), _encode(keypath, "keypath"), counter))

    def owner(self, name: str) -> Owner:
        """A new :class:`Owner` of values on this bus."""
        return Owner(self, name)

    @contextmanager
    def transaction(self, *, owner: Optional[Owner] = None,
                    expect: Optional[Mapping[str, int]] = None) -> Iterator[_Transaction]:
        """``with bus.transaction() as t:`` begins, commits at the end of the
        block (``t.txn``: the id), and rolls back if the block raises. Inside
        a callback it joins the pass (which cannot be rolled back: the block's
        exception propagates, its writes stay). With ``owner`` the block's
        sets belong to that :class:`Owner`; with ``expect`` (keypath →
        counter) the commit applies only if those counters still hold
        (:meth:`expect`)."""
        conditions = check_expect(expect)
        if owner is not None:
            if not isinstance(owner, Owner) or owner._ptr is None:
                raise InvalidArgument(f"owner: a live Owner of this bus, not {owner!r}")
            self._check(self._lib.ordo_begin_owned(self._bus(), owner._ptr))
        else:
            self.begin()
        t = _Transaction()
        try:
            for k, n in conditions.items():
                self.expect(k, n)
        except BaseException:
            self.rollback()
            raise
        try:
            yield t
        except BaseException:
            if getattr(_tls, "depth", 0):
                self.commit()
            else:
                self.rollback()
            raise
        t.txn = self.commit()

    @property
    def transaction_id(self) -> int:
        """The last transaction id assigned (ordo_transaction_id)."""
        return self._lib.ordo_transaction_id(self._bus())

    # -- writes -------------------------------------------------------------

    def set(self, keypath: str, value: Value) -> None:
        """Sets a value: bool, int (int64), float (double), str or bytes."""
        k = _encode(keypath, "keypath")
        v = check_value(value, keypath)
        b = self._bus()
        if isinstance(v, bool):
            st = self._lib.ordo_set_bool(b, k, v)
        elif isinstance(v, int):
            st = self._lib.ordo_set_int64(b, k, v)
        elif isinstance(v, float):
            st = self._lib.ordo_set_double(b, k, v)
        elif isinstance(v, str):
            st = self._lib.ordo_set_string(b, k, _encode(v, f"value of {keypath!r}"))
        else:
            st = self._lib.ordo_set_bytes(b, k, v if v else None, len(v))
        self._check(st)

    def touch(self, keypath: str) -> None:
        self._check(self._lib.ordo_touch(self._bus(), _encode(keypath, "keypath")))

    def remove(self, keypath: str) -> None:
        self._check(self._lib.ordo_remove(self._bus(), _encode(keypath, "keypath")))

    def remove_tree(self, keypath: str) -> None:
        self._check(self._lib.ordo_remove_tree(self._bus(), _encode(keypath, "keypath")))

    # -- reads --------------------------------------------------------------

    def type_of(self, keypath: str) -> str:
        """"bool", "int64", "double", "string" or "bytes"; NotFound if no value."""
        t = c_int(0)
        self._check(self._lib.ordo_get_type(self._bus(), _encode(keypath, "keypath"), byref(t)))
        return _TYPES[t.value]

    def get(self, keypath: str, type: Optional[type] = None) -> Value:
        """The keypath's value as bool, int, float, str or bytes; NotFound if
        it holds none. With ``type`` (one of those five classes) the value
        must be of that type: TypeMismatch otherwise."""
        k = _encode(keypath, "keypath")
        b = self._bus()
        if type is None:
            t = c_int(0)
            self._check(self._lib.ordo_get_type(b, k, byref(t)))
            kind = _TYPES[t.value]
        else:
            kind = _KINDS.get(type)
            if kind is None:
                raise InvalidArgument(f"type: one of bool, int, float, str, bytes, not {type!r}")
        if kind == "bool":
            out_b = c_bool()
            self._check(self._lib.ordo_get_bool(b, k, byref(out_b)))
            return out_b.value
        if kind == "int64":
            out_i = c_int64()
            self._check(self._lib.ordo_get_int64(b, k, byref(out_i)))
            return out_i.value
        if kind == "double":
            out_d = c_double()
            self._check(self._lib.ordo_get_double(b, k, byref(out_d)))
            return out_d.value
        p = c_void_p()
        if kind == "string":
            self._check(self._lib.ordo_get_string(b, k, byref(p)))
            try:
                return ctypes.string_at(p.value).decode("utf-8")
            finally:
                self._lib.ordo_free(p)
        n = c_size_t()
        self._check(self._lib.ordo_get_bytes(b, k, byref(p), byref(n)))
        try:
            return ctypes.string_at(p.value, n.value) if n.value else b""
        finally:
            self._lib.ordo_free(p)

    @property
    def schema(self) -> Optional[str]:
        """The schema the bus enforces, as canonical JSON text; None without one."""
        p = c_void_p()
        self._check(self._lib.ordo_schema_json(self._bus(), byref(p)))
        if not p.value:
            return None
        try:
            return ctypes.string_at(p.value).decode("utf-8")
        finally:
            self._lib.ordo_free(p)

    def is_stored(self, keypath: str) -> bool:
        """Whether the keypath holds a stored value, as opposed to none or its
        schema default (which :meth:`get` returns alike)."""
        out = c_bool()
        self._check(self._lib.ordo_is_stored(self._bus(), _encode(keypath, "keypath"), byref(out)))
        return out.value

    def counter(self, keypath: str) -> int:
        """How many committed transactions changed the keypath (0 if never)."""
        out = c_uint64()
        self._check(self._lib.ordo_get_counter(self._bus(), _encode(keypath, "keypath"), byref(out)))
        return out.value

    def snapshot(self, patterns: Iterable[str] = ("**",)) -> Snapshot:
        """One consistent read of every keypath matching a pattern
        (ordo_snapshot): stored values, counters (keypaths without a value
        included) and the last committed id, as :meth:`Client.snapshot`
        gives them. Inside a transaction or a callback, this thread's view;
        inside a callback, every pattern must be readable by the contract."""
        arr, n = _array(patterns, "patterns")
        values: Dict[str, Value] = {}
        counters: Dict[str, int] = {}
        failures: List[BaseException] = []

        def each(keypath, value, counter, user_data):
            try:
                k = keypath.decode("utf-8", "surrogateescape")
                if counter:
                    counters[k] = counter
                if value:
                    values[k] = _value(value.contents)
            except BaseException as e:  # cannot cross the C library
                failures.append(e)

        txn = c_uint64(0)
        self._check(self._lib.ordo_snapshot(self._bus(), arr, n, _SNAPSHOT_CALLBACK(each), None, byref(txn)))
        if failures:
            raise failures[0]
        return Snapshot(values, counters, txn.value)

    # -- contracts ----------------------------------------------------------

    def register(self, name: str, reads: Iterable[str], writes: Iterable[str] = (),
                 callback: Optional[Callable[[Note], Any]] = None, *, priority: Optional[int] = None,
                 notify_initial: bool = False) -> Contract:
        """Registers a contract whose callback(note) is called once per pass
        in which its reads changed. ``priority`` None: a data contract. The
        callback object is kept until the library releases the contract
        (its destroy hook: unregistered, or the bus closed)."""
        if not callable(callback):
            raise InvalidArgument(f"contract {name!r}: callback must be callable")
        if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)
                                     or not NO_PRIORITY < priority < 2 ** 31):
            raise InvalidArgument(f"priority: an int32 other than INT32_MIN, not {priority!r}")
        enc_name = _encode(name, "name")
        reads_arr, n_reads = _array(reads, "reads")
        writes_arr, n_writes = _array(writes, "writes")
        b = self._bus()
        contract = Contract(self, 0, name, callback)
        with _contracts_lock:
            token = next(_next_token)
            _contracts[token] = contract
        spec = _Spec(ctypes.sizeof(_Spec), enc_name, reads_arr, n_reads, writes_arr, n_writes,
                     NO_PRIORITY if priority is None else priority, NOTIFY_INITIAL if notify_initial else 0,
                     _CALL, token, _DESTROY_FN)
        out = c_uint64(0)
        # A NOTIFY_INITIAL call made inside ordo_register carries the id
        # before out is written; the contract learns it from the note.
        status = self._lib.ordo_register(b, byref(spec), byref(out))
        if status != 0:
            with _contracts_lock:
                _contracts.pop(token, None)  # destroy is not called on failure
            self._check(status)
        contract.id = out.value
        if not contract.gone:
            self._contracts[contract.id] = contract
            self._tokens[contract.id] = token
        return contract

    def contract(self, name: str, reads: Iterable[str], writes: Iterable[str] = (), *,
                 priority: Optional[int] = None, notify_initial: bool = False):
        """Decorator form of :meth:`register`; returns the :class:`Contract`."""
        def deco(fn):
            return self.register(name, reads, writes, fn, priority=priority, notify_initial=notify_initial)
        return deco

    def unregister(self, contract: Any) -> None:
        """Unregisters a contract (a :class:`Contract` or its id); NotFound if
        it is not registered. Allowed from any callback, its own included."""
        cid = contract.id if isinstance(contract, Contract) else contract
        if not is_uint64(cid):
            raise InvalidArgument(f"unregister: a Contract or a contract id, not {contract!r}")
        self._check(self._lib.ordo_unregister(self._bus(), cid))
        self._tokens.pop(cid, None)

    @property
    def contracts(self) -> List[Contract]:
        """This bus's contracts registered through this object."""
        return list(self._contracts.values())

    @property
    def current_contract(self) -> int:
        """The id of the contract whose callback runs on this thread (0: none)."""
        return self._lib.ordo_current_contract(self._bus())

    # -- handles --------------------------------------------------------------

    def resolve(self, keypath: str) -> Handle:
        """A :class:`Handle` of ``keypath`` (ordo_resolve): InvalidKeypath if
        it is not a keypath."""
        out = c_void_p()
        self._check(self._lib.ordo_resolve(self._bus(), _encode(keypath, "keypath"), byref(out)))
        return Handle(self, out.value, self._lib.ordo_handle_keypath(out.value).decode("utf-8"))

    # -- devtools (docs/devtools.md) ----------------------------------------

    def contract_info(self, contract: Any) -> ContractInfo:
        """What the bus knows of a contract (a :class:`Contract` or its id):
        ordo_get_contract_info. NotFound if it is not registered."""
        cid = contract.id if isinstance(contract, Contract) else contract
        if not is_uint64(cid):
            raise InvalidArgument(f"contract_info: a Contract or a contract id, not {contract!r}")
        p = POINTER(_ContractInfo)()
        self._check(self._lib.ordo_get_contract_info(self._bus(), cid, byref(p)))
        try:
            i = p.contents
            return ContractInfo(
                i.id, i.name.decode("utf-8", "surrogateescape"), _KIND_NAMES.get(i.kind, str(i.kind)),
                None if i.kind != 1 else i.priority, i.level, i.position, i.calls, i.failures, i.last_txn,
                _strings(i.reads, i.n_reads), _strings(i.writes, i.n_writes),
                _strings(i.unused_reads, i.n_unused_reads), _strings(i.unused_writes, i.n_unused_writes))
        finally:
            self._lib.ordo_free(p)

    def on_trace(self, fn: Optional[Callable[[Trace], Any]]) -> None:
        """Calls ``fn(trace)`` after every notification pass (ordo_set_trace),
        on the committing thread; None removes it (then passes record nothing).
        An exception from ``fn`` goes to ``on_error("trace", exception)``."""
        if fn is not None and not callable(fn):
            raise InvalidArgument("on_trace: a callable or None")
        b = self._bus()
        if fn is None:
            self._check(self._lib.ordo_set_trace(b, _TRACE_CALLBACK(), None))
            self._trace_fn = None
            self._trace_thunk = None
            return

        def thunk(bus_ptr, trace_ptr, user_data):
            t = trace_ptr.contents
            steps = []
            for i in range(t.n_steps):
                s = t.steps[i]
                steps.append(TraceStep(
                    s.contract, s.name.decode("utf-8", "surrogateescape"), s.txn, _OUTCOMES.get(s.outcome, "?"),
                    bool(s.initial), _strings(s.because, s.n_because), _strings(s.writes, s.n_writes),
                    _strings(s.refused, s.n_refused),
                    None if not s.failure else s.failure.decode("utf-8", "surrogateescape"), s.duration_ns))
            trace = Trace(t.txn, bool(t.committed), _strings(t.changed, t.n_changed), tuple(steps), t.duration_ns)
            f = self._trace_fn
            if f is None:
                return
            try:
                f(trace)
            except BaseException as e:  # cannot cross the C library
                try:
                    self.on_error("trace", e)
                except BaseException:  # pragma: no cover
                    log.exception("ordo: on_error failed")

        c_thunk = _TRACE_CALLBACK(thunk)
        self._trace_fn = fn
        self._check(self._lib.ordo_set_trace(b, c_thunk, None))
        self._trace_thunk = c_thunk  # kept until replaced, removed or the bus is closed

    @contextmanager
    def tracing(self) -> Iterator[List[Trace]]:
        """``with bus.tracing() as traces:`` collects the traces of the passes
        run inside the block into the list ``traces``."""
        out: List[Trace] = []
        self.on_trace(out.append)
        try:
            yield out
        finally:
            if self._ptr is not None:
                self.on_trace(None)

    # -- D-Bus publication ----------------------------------------------------

    def publish(self, address: Optional[str] = None, name: Optional[str] = None) -> None:
        """Publishes this bus over D-Bus (ordo_dbus_publish): address None =
        the session bus, name None = "dev.ordo.Bus". Then call
        :meth:`dispatch` from your loop (or poll :meth:`fd`)."""
        a = None if address is None else _encode(address, "address")
        n = None if name is None else _encode(name, "name")
        self._check(self._lib.ordo_dbus_publish(self._bus(), a, n))

    def fd(self) -> int:
        """A file descriptor that is readable when dispatch has work."""
        fd = self._lib.ordo_dbus_fd(self._bus())
        if fd < 0:
            raise InvalidArgument(self._lib.ordo_last_error_message().decode("utf-8", "replace"))
        return fd

    def dispatch(self, timeout_ms: int = 0) -> None:
        """Handles pending D-Bus work, waiting up to timeout_ms (negative: forever)."""
        self._check(self._lib.ordo_dbus_dispatch(self._bus(), int(timeout_ms)))
