"""A D-Bus client of an Ordo bus (interface ``dev.ordo.Bus1``), over jeepney.

Blocking and thread-safe: any thread may call any method. There is no
background thread unless you start one (:meth:`Client.start`): whichever
thread waits for something (a reply, a watch's next notification,
:meth:`Client.process`) reads the connection for everybody and hands each
message to whoever it belongs to. Writer contracts are answered by that
thread too, so a program may commit from the connection that holds its
writers without deadlocking the pass.

Security: ``Notify`` and ``NameOwnerChanged`` signals are accepted only
from their legitimate senders -- ``Notify`` from the unique name that owns
the service's well-known name right now (read with ``GetNameOwner`` at
connect, then followed through ``NameOwnerChanged`` from the bus daemon),
``NameOwnerChanged`` from ``org.freedesktop.DBus``. Anything else is
dropped and counted in :attr:`Client.forged`; a forged ``Notify`` never
reaches a watch and is never answered with ``Complete``. On a direct
connection (``ordod --listen``, peer to peer) only the service can send, so
everything read on it is the service's.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import secrets
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import (AbstractSet, Any, Callable, Deque, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple)

from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
from jeepney.bus import get_connectable_addresses
from jeepney.io.blocking import DBusConnection, DBusConnectionBase, open_dbus_connection, prep_socket

from .errors import (ConnectionLost, DBus, DuplicateName, InvalidArgument, InvalidKeypath, Limit, NotFound,
                     OrdoError, Timeout, error_for_dbus)
from .trace import Trace, TraceStep
from .values import Value, check_expect, check_text, from_variant, is_uint64, to_variant

__all__ = ["ADDRESS_VARIABLE", "Client", "Entry", "Snapshot", "Changes", "Position", "Notification", "Writes", "Watch", "Writer", "TraceWatch",
           "MergingWriter", "MergedWrite", "NAME", "PATH", "INTERFACE"]

log = logging.getLogger("ordo")

NAME = "dev.ordo.Bus"
PATH = "/dev/ordo/Bus"
INTERFACE = "dev.ordo.Bus1"
_DBUS = "org.freedesktop.DBus"
_DBUS_PATH = "/org/freedesktop/DBus"
_PROPS = "org.freedesktop.DBus.Properties"
#: The environment variable naming a service's direct address
#: (``ORDO_ADDRESS=unix:path=/run/ordo/bus``, ``ordod --listen``): a client
#: given neither ``address`` nor ``direct`` connects there.
ADDRESS_VARIABLE = "ORDO_ADDRESS"
# The sender the messages of a direct connection are read as (the service's).
_DIRECT_SERVICE = ":direct.service"
_NOTIFY_SIG = "otasa{sv}"
_TRACE_SIG = "tbasaa{sv}t"


class Entry(NamedTuple):
    """The result of :meth:`Client.get`: a value and its counter."""
    value: Value
    counter: int


class Snapshot(NamedTuple):
    """One consistent read: the values and counters of every matching keypath
    (counters include keypaths that hold no value), and the last committed id."""
    values: Dict[str, Value]
    counters: Dict[str, int]
    txn: int


class Changes(NamedTuple):
    """What changed after ``since`` (SPEC §10): matching keypaths that hold a
    value (with it), those that hold none, their counters, the last committed id."""
    values: Dict[str, Value]
    removed: List[str]
    counters: Dict[str, int]
    txn: int


class Position(NamedTuple):
    """Where a watch is: the bus's epoch (None if the service has no Epoch
    property) and the last transaction the watch has delivered."""
    epoch: Optional[str]
    txn: int


@dataclass(frozen=True)
class Notification:
    """What a watch yields and a writer receives.

    ``kind`` is ``"notify"`` for a ``Notify`` of the service (one per
    transaction that affected the patterns), ``"changes"`` for a catch-up
    read with ``Changes`` after a gap or a reconnect to the same epoch
    (``changed`` lists every keypath that changed since the last delivered
    transaction), and ``"snapshot"`` for a full read (the first one with
    ``initial=True``, or after a reconnect to another epoch: replace your
    whole state with ``values``). :attr:`initial` tells a writer's initial
    call.

    ``cache`` (a watch or writer registered with ``cache=True``): a
    read-only mapping of every keypath of the read set that holds a value,
    as of ``txn`` -- the values of the keypaths that did not change too. It
    stays as it is when later notifications come. None without ``cache``.
    """
    txn: int
    changed: Tuple[str, ...]
    values: Dict[str, Value]
    contract: str = ""
    kind: str = "notify"
    cache: Optional[Mapping[str, Value]] = None

    @property
    def initial(self) -> bool:
        """An initial call (a ``"notify"`` with an empty ``changed``): a writer
        registered with ``notify_initial=True``, registered again after the
        service came back, or called again after it was suspended. Read
        everything you compute from and answer with all of it. A cached
        contract's ``Notify`` after a write under a keypath it may not read
        (with a policy) also has an empty ``changed``: its ``cache`` then
        holds the whole read set, as after an initial call."""
        return self.kind == "notify" and not self.changed

    @property
    def removed(self) -> Tuple[str, ...]:
        """The keypaths of ``changed`` that hold no value (removed or touched)."""
        return tuple(k for k in self.changed if k not in self.values)


@dataclass
class Writes:
    """What a writer answers: sets, touches and removes (``k.**`` removes the tree)."""
    set: Mapping[str, Any] = field(default_factory=dict)
    touch: Sequence[str] = ()
    remove: Sequence[str] = ()


#: The changed list of a cached contract's Notify that was too large to send:
#: re-read the read set (``"**"`` is never a keypath).
_TRUNCATED = ("**",)


def _matches(pattern: str, k: str) -> bool:
    """Whether a pattern matches keypath k (SPEC §1: ``*`` is one segment,
    a last ``**`` the node itself and everything under it)."""
    ps, ks = pattern.split("."), k.split(".")
    if ps[-1] == "**":
        ps.pop()
        del ks[len(ps):]
    return len(ps) == len(ks) and all(p in ("*", s) for p, s in zip(ps, ks))


def _within(k: str, roots: AbstractSet[str]) -> bool:
    """Whether keypath k is one of roots or lies under one of them."""
    if k in roots:
        return True
    i = k.find(".")
    while i != -1:
        if k[:i] in roots:
            return True
        i = k.find(".", i + 1)
    return False


class _ReadCache:
    """A contract's read set (its values) as of one transaction, kept as the
    ``cache`` Register option lays out (docs/dbus.md): filled from the initial
    Notify or a read, then each Notify drops every entry at or under its
    changed keypaths and puts its values. Every state is a new dict that is
    never changed afterwards, so the view a notification holds stays the read
    set as of its transaction."""

    def __init__(self) -> None:
        self.view: Mapping[str, Value] = MappingProxyType({})

    def fill(self, values: Mapping[str, Value]) -> None:
        """Replaces everything (an initial Notify, a Snapshot)."""
        self.view = MappingProxyType(dict(values))

    def apply(self, changed: Sequence[str], values: Mapping[str, Value]) -> None:
        """A Notify: the read set's values under its changed keypaths are all
        in ``values``; with no changed keypath (an initial call, a write the
        peer may not read) the whole read set is."""
        if not changed:
            self.fill(values)
            return
        roots = set(changed)
        kept = {k: v for k, v in self.view.items() if not _within(k, roots)}
        kept.update(values)
        self.view = MappingProxyType(kept)

    def update(self, values: Mapping[str, Value], removed: Iterable[str]) -> None:
        """A ``Changes`` read: every keypath that changed since the cache's
        transaction, with its value or among ``removed``."""
        new = dict(self.view)
        for k in removed:
            new.pop(k, None)
        new.update(values)
        self.view = MappingProxyType(new)

    def own(self, sets: Mapping[str, Value], removes: Iterable[str], patterns: List[str]) -> None:
        """A writer's answer that the service accepted: the pass calls a
        writer before its writes, and no later Notify of that transaction
        reaches it, so what it writes and reads (a normalizer) enters here.
        Sets the read set matches, then removes (``k.**`` the tree), as
        ``Complete`` applies them."""
        new = dict(self.view)
        new.update((k, v) for k, v in sets.items() if any(_matches(p, k) for p in patterns))
        for k in removes:
            if k.endswith(".**"):
                roots = {k[:-3]}
                new = {x: v for x, v in new.items() if not _within(x, roots)}
            else:
                new.pop(k, None)
        self.view = MappingProxyType(new)

    def reread(self, client: "Client", patterns: List[str], txn: int) -> Tuple[int, Tuple[str, ...]]:
        """Reads the read set again for a Notify too large to send (of
        transaction ``txn``): the state then, not at ``txn``. One
        ``Snapshot`` per pattern, since one of the whole read set would be
        too large as well; a pattern whose values alone are too large is
        left out (its ``Limit`` goes to the client's ``on_error``). When the
        snapshots read different transactions, one ``Changes`` since the
        first brings them to one. Returns the transaction the cache is then
        as of and the keypaths whose value differs from before, sorted."""
        values: Dict[str, Value] = {}
        read: List[str] = []
        txns: List[int] = []
        for p in patterns:
            try:
                snap = client.snapshot([p])
            except Limit as e:
                client.on_error(f"cache: the read set of {p!r}", e)
                continue
            values.update(snap.values)
            read.append(p)
            txns.append(snap.txn)
        if txns and min(txns) < max(txns):
            try:
                ch = client.changes(min(txns), read)
            except Limit as e:
                # The reads stay apart: the cache is as of the earliest at
                # least, and what came later is caught up from there.
                client.on_error(f"cache: the changes to {read!r} since {min(txns)}", e)
                txns[:] = [min(txns)]
            else:
                for k in ch.removed:
                    values.pop(k, None)
                values.update(ch.values)
                txns.append(ch.txn)
        old = self.view
        self.fill(values)
        differ = set(old.keys() ^ values.keys())
        differ.update(k for k in old.keys() & values.keys() if (type(old[k]), old[k]) != (type(values[k]), values[k]))
        return max(txns, default=txn), tuple(sorted(differ))


def _writes_body(set_: Optional[Mapping[str, Any]], touch: Iterable[str], remove: Iterable[str]):
    if set_ is None:
        set_ = {}
    if not isinstance(set_, Mapping):
        raise InvalidArgument(f"set: a mapping of keypath to value, not {type(set_).__name__}")
    out = {}
    for k, v in set_.items():
        if not isinstance(k, str):
            raise InvalidArgument(f"set: keypath {k!r} is not a str")
        out[k] = to_variant(v, k)
    return out, _strings(touch, "touch"), _strings(remove, "remove")


def _strings(xs: Iterable[str], what: str) -> List[str]:
    if isinstance(xs, (str, bytes)):
        raise InvalidArgument(f"{what}: a list of strings, not a single {type(xs).__name__}")
    out = list(xs)
    for x in out:
        if not isinstance(x, str):
            raise InvalidArgument(f"{what}: {x!r} is not a str")
    return out


# -- checking a message body before it is sent ----------------------------
#
# The bus daemon drops a connection that sends a string holding NUL (D-Bus
# strings cannot), and jeepney raises its own exceptions (UnicodeEncodeError,
# struct.error, ValueError) for lone surrogates, integers out of range and
# malformed object paths, after the reply slot is taken. Every body goes
# through _check_body first, so that all of these are refused with an
# OrdoError and nothing is sent: InvalidKeypath for a keypath or pattern (as
# the service answers for other bad characters), InvalidArgument otherwise.

_INT_RANGES = {"y": (0, 2 ** 8), "n": (-2 ** 15, 2 ** 15), "q": (0, 2 ** 16), "i": (-2 ** 31, 2 ** 31),
               "u": (0, 2 ** 32), "h": (0, 2 ** 32), "x": (-2 ** 63, 2 ** 63), "t": (0, 2 ** 64)}
_OBJECT_PATH = re.compile(r"/\Z|(/[A-Za-z0-9_]+)+\Z")

# what each string argument of a dev.ordo.Bus1 method is ("keypath" and
# "pattern" are refused with InvalidKeypath)
_ARGS: Dict[str, Tuple[str, ...]] = {
    "Register": ("name", "pattern", "pattern", "option"),
    "Unregister": ("contract",),
    "Commit": ("keypath", "keypath", "keypath"),
    "CommitWith": ("keypath", "keypath", "keypath", "option"),
    "Owners": ("pattern",),
    "Get": ("keypath",),
    "Snapshot": ("pattern",),
    "Changes": ("since", "pattern"),
    "Complete": ("contract", "txn", "keypath", "keypath", "keypath"),
    "SubscribeTrace": ("pattern",),
}


def _type_end(sig: str, i: int) -> int:
    """The end of the complete type that starts at sig[i]."""
    if i >= len(sig):
        raise InvalidArgument(f"signature {sig!r} is incomplete")
    c = sig[i]
    if c == "a":
        return _type_end(sig, i + 1)
    if c in "({":
        close = ")" if c == "(" else "}"
        j = i + 1
        while j < len(sig) and sig[j] != close:
            j = _type_end(sig, j)
        if j >= len(sig):
            raise InvalidArgument(f"signature {sig!r} is incomplete")
        return j + 1
    if c in "ybnqiuxtdhsogv":
        return i + 1
    raise InvalidArgument(f"signature {sig!r}: unknown type code {c!r}")


def _types(sig: str) -> List[str]:
    """The complete types of a signature."""
    out, i = [], 0
    while i < len(sig):
        j = _type_end(sig, i)
        out.append(sig[i:j])
        i = j
    return out


def _check_text(s: str, what: str, keypath: bool) -> None:
    check_text(s, what, InvalidKeypath if keypath else InvalidArgument)


def _check_arg(t: str, v: Any, what: str, keypath: bool) -> None:
    """Checks one value of complete type t. Anything it does not recognise is
    left to jeepney (whose errors _call turns into InvalidArgument)."""
    c = t[0]
    if c in _INT_RANGES:
        lo, hi = _INT_RANGES[c]
        if isinstance(v, int) and not lo <= v < hi:
            raise InvalidArgument(f"{what}: {v} is out of range for the D-Bus type {c!r} ({lo} .. {hi - 1})")
    elif c in "sog":
        if isinstance(v, str):
            _check_text(v, what, keypath and c == "s")
            if c == "o" and not _OBJECT_PATH.match(v):
                raise InvalidArgument(f"{what}: {v!r} is not a D-Bus object path")
    elif c == "v":
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
            inner = _types(v[0])
            if len(inner) == 1:
                _check_arg(inner[0], v[1], what, False)
    elif c == "a" and t[1] == "{":
        kv = _types(t[2:-1])
        if len(kv) == 2 and isinstance(v, Mapping):
            for k, x in v.items():
                _check_arg(kv[0], k, what, keypath)
                _check_arg(kv[1], x, f"value of {k!r}" if keypath else f"{what}[{k!r}]", False)
    elif c == "a":
        if isinstance(v, (list, tuple)) and t[1] != "y":
            for x in v:
                _check_arg(t[1:], x, what, keypath)
    elif c == "(":
        fields = _types(t[1:-1])
        if isinstance(v, tuple) and len(v) == len(fields):
            for ft, x in zip(fields, v):
                _check_arg(ft, x, what, keypath)


def _check_body(iface: str, member: str, sig: str, body: tuple) -> None:
    """Refuses, before anything is sent, what D-Bus cannot carry or jeepney
    cannot serialise: NUL characters and lone surrogates in strings, integers
    out of range, malformed object paths."""
    sig = sig or ""
    if not isinstance(sig, str):
        raise InvalidArgument(f"{member}: the signature must be a str, not {type(sig).__name__}")
    names = _ARGS.get(member, ()) if iface == INTERFACE else ()
    for i, (t, v) in enumerate(zip(_types(sig), body)):
        name = names[i] if i < len(names) else f"argument {i + 1}"
        _check_arg(t, v, f"{member}: {name}", name in ("keypath", "pattern"))


def _plain(variant_dict: Mapping[str, Tuple[str, Any]]) -> Dict[str, Any]:
    """{k: (sig, v)} -> {k: v} (for Contracts/Stats dicts)."""
    return {k: v for k, (_sig, v) in variant_dict.items()}


def _values(variant_dict: Mapping[str, Tuple[str, Any]]) -> Dict[str, Value]:
    return {k: from_variant(v, k) for k, v in variant_dict.items()}


def _log_error(source: Any, error: BaseException) -> None:
    log.warning("ordo: %s: %s", source, error)


class Client:
    """A connection to an Ordo bus served over D-Bus (by ``ordod`` or a host).

    ``address``: a bus daemon's D-Bus address (``unix:path=...``),
    ``"SESSION"`` or ``"SYSTEM"``. ``direct``: the address of the service's
    own listening socket (``ordod --listen``), reached peer to peer with no
    bus daemon. With neither, ``ORDO_ADDRESS`` (a direct address) when it is
    set, else the session bus. ``name``: the service's well-known name (on a
    bus). ``timeout``: seconds to wait for each reply.
    ``on_error(source, exception)`` is called for failures that have no
    caller to raise to: a writer's callback that raised, a ``Complete`` the
    service refused, a contract that could not be registered again after the
    service came back. By default they are logged (logger ``"ordo"``).
    ``reconnect``: a call made after the connection was lost (``ordod``
    restarted behind ``direct=``, the bus daemon gone) first opens a new one
    at the same address, once, and :meth:`process` (so the thread of
    :meth:`start`) tries every 0.1 s; with ``False`` both raise
    ``ConnectionLost`` until :meth:`reconnect`.

    Use it as a context manager: leaving the block closes every merging
    writer of this client, unregisters every watch and writer, and closes
    the connection.
    """

    def __init__(self, address: Optional[str] = None, name: str = NAME, *, direct: Optional[str] = None,
                 timeout: float = 10.0, on_error: Optional[Callable[[Any, BaseException], None]] = None,
                 reconnect: bool = True):
        if not isinstance(name, str) or not name:
            raise InvalidArgument("name: the service's well-known name, a non-empty str")
        if address and direct:
            raise InvalidArgument("address (a bus daemon) or direct (the service's socket), not both")
        if not isinstance(reconnect, bool):
            raise InvalidArgument(f"reconnect: a bool, not {reconnect!r}")
        if not address and not direct:
            direct = os.environ.get(ADDRESS_VARIABLE) or None
        #: the service's direct address, None on a bus
        self.direct = direct
        self.address = direct or address or "SESSION"
        self.name = name
        self.timeout = timeout
        self.on_error = on_error or _log_error
        # Whether calls and process() open a lost connection again (see above).
        self._reconnects = reconnect
        self._reopen_lock = threading.Lock()
        #: signals dropped because they did not come from their legitimate sender
        self.forged = 0
        self._state = threading.Condition(threading.Lock())
        self._send_lock = threading.Lock()
        self._conn = None
        self._reading = False
        self._replies: Dict[int, Any] = {}
        self._expect: Dict[int, Optional[str]] = {}
        self._lost: Optional[OrdoError] = None
        self._owner: Optional[str] = None
        self._owner_gen = 0
        self._routes: Dict[str, Any] = {}
        self._orphans: Dict[str, Deque[Any]] = {}
        self._writer_calls: Deque[Tuple["Writer", Notification]] = deque()
        self._writer_lock = threading.RLock()
        self._writers: List["Writer"] = []
        self._watches: List["Watch"] = []
        self._trace: Optional["TraceWatch"] = None
        self._merging: List["MergingWriter"] = []
        self._writers_gen = 0
        self._closing = False
        self._closed = False
        self._names = itertools.count(1)
        self._has_changes: Optional[bool] = None
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._connect(require_owner=True, initial=True)

    # -- connection ---------------------------------------------------------

    @property
    def unique_name(self) -> str:
        """This connection's unique name on the bus (on a direct connection,
        a label made by this client: the service names its peers)."""
        return self._conn.unique_name if self._conn is not None else ""

    @property
    def owner(self) -> Optional[str]:
        """The unique name that owns the service's name now (None: nobody)."""
        return self._owner

    def _connect(self, require_owner: bool, initial: bool = False) -> None:
        try:
            conn = _DirectConnection(self.direct) if self.direct else open_dbus_connection(self.address)
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            conn, why = None, str(e)
        if conn is None:
            # Raised outside the handler: the error raised keeps no traceback
            # of the failed attempt, so the socket jeepney opened for it is
            # freed now, not by the next garbage collection.
            raise ConnectionLost(f"cannot connect to {self.address}: {why}")
        with self._state:
            self._conn = conn
            self._lost = None
            self._replies.clear()
            self._expect.clear()
        if self.direct:
            # Only the service is at the other end of the socket.
            owner = _DIRECT_SERVICE
        else:
            try:
                self._call(_DBUS, _DBUS_PATH, _DBUS, "AddMatch", "s",
                           (f"type='signal',sender='{_DBUS}',path='{_DBUS_PATH}',interface='{_DBUS}',"
                            f"member='NameOwnerChanged',arg0='{self.name}'",), reopen=False)
                try:
                    owner = self._call(_DBUS, _DBUS_PATH, _DBUS, "GetNameOwner", "s", (self.name,),
                                       reopen=False)[0]
                except DBus as e:
                    if e.dbus_name != "org.freedesktop.DBus.Error.NameHasNoOwner":
                        raise
                    if require_owner:
                        raise DBus(f"no service owns {self.name} on {self.address}",
                                   dbus_name=e.dbus_name) from None
                    owner = None
            except BaseException:
                conn.close()
                with self._state:
                    self._conn = None
                raise
        with self._state:
            self._set_owner(owner)
            if initial:
                self._writers_gen = self._owner_gen

    def reconnect(self) -> None:
        """Opens a new connection (after the old one was lost); watches resume
        and writers register again (SPEC §10). The service need not be there
        yet: watches wait for it."""
        with self._state:
            old, self._conn = self._conn, None
            self._lost = ConnectionLost("reconnecting")
            self._set_owner(None)
            self._state.notify_all()
        _shut(old)
        self._connect(require_owner=False)
        self._after_read()

    def _reopen(self, seen) -> None:
        """Opens the connection again after ``seen`` was lost, unless another
        thread (a watch resuming, another call) already did."""
        with self._reopen_lock:
            with self._state:
                if self._closing:
                    raise ConnectionLost("the client is closed")
                if self._conn is not seen and self._conn is not None and self._lost is None:
                    return
            self.reconnect()

    def close(self) -> None:
        """Closes this client's merging writers (after their pending writes
        were answered), unregisters its watches and writers, closes the
        connection."""
        if self._closed:
            return
        with self._state:
            self._closing = True
            merging, self._merging = self._merging, []
        for m in merging:
            m.close()
        self.stop()
        if self._trace is not None:
            self._trace.close()
        for w in list(self._watches):
            w.close()
        for w in list(self._writers):
            w.unregister()
        self._closed = True
        with self._state:
            conn, self._conn = self._conn, None
            self._lost = ConnectionLost("the client is closed")
            self._state.notify_all()
        _shut(conn)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the message loop ---------------------------------------------------

    def _call(self, dest: str, path: str, iface: str, member: str, sig: str = "", body: tuple = (),
              timeout: Optional[float] = None, reopen: bool = True) -> tuple:
        _check_body(iface, member, sig, body)
        try:
            msg = new_method_call(DBusAddress(path, bus_name=dest, interface=iface), member, sig or None, body)
        except Exception as e:  # noqa: BLE001 -- jeepney's ValueError, TypeError ...: an OrdoError
            raise InvalidArgument(f"{member}: the message cannot be built: {e}") from None
        reopen = reopen and self._reconnects and not self._closing
        for attempt in (1, 2):
            with self._state:
                conn, lost = self._conn, self._lost
            if reopen:
                # A connection the other end closed is found before the call
                # is sent on it (a non-blocking peek), and opened again.
                if conn is not None and lost is None and _closed_by_peer(conn):
                    self._mark_lost(conn, ConnectionResetError("closed by the other end"))
                    lost = True
                if conn is None or lost is not None:
                    self._reopen(conn)
                    with self._state:
                        conn, lost = self._conn, self._lost
            if conn is None or lost is not None:
                raise lost or ConnectionLost("not connected")
            serial = next(conn.outgoing_serial)
            with self._state:
                self._expect[serial] = _DBUS if dest == _DBUS else self._owner
            try:
                with self._send_lock:
                    conn.send(msg, serial=serial)
                break
            except OSError as e:
                self._mark_lost(conn, e)
                with self._state:
                    self._expect.pop(serial, None)
                # A send that fails delivered no whole message (the other
                # end is gone: bytes waiting to be read hid its end from the
                # peek), so it is sent once more on a new connection.
                if not reopen or attempt == 2:
                    raise ConnectionLost(f"{member}: the connection was lost ({e})") from None
            except Exception as e:  # noqa: BLE001 -- serialising failed: nothing was sent
                with self._state:
                    self._expect.pop(serial, None)
                raise InvalidArgument(f"{member}: the message cannot be sent: {e!r}") from None
        t = self.timeout if timeout is None else timeout
        try:
            reply = self._wait(lambda: self._replies.pop(serial, None), time.monotonic() + t)
        except Timeout:
            with self._state:
                self._expect.pop(serial, None)
            raise Timeout(f"{member}: no reply within {t:g} s") from None
        if reply.header.message_type == MessageType.error:
            text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
            raise error_for_dbus(reply.header.fields.get(HeaderFields.error_name), text)
        return reply.body

    def _mark_lost(self, conn, error: BaseException) -> None:
        with self._state:
            if self._conn is conn and self._lost is None:
                self._lost = ConnectionLost(f"the connection to {self.address} was lost ({error})")
                self._set_owner(None)
            self._state.notify_all()

    def _wait(self, take: Callable[[], Any], deadline: Optional[float]) -> Any:
        """Returns take()'s first non-None result (called with the state lock
        held), reading the connection meanwhile if no other thread does."""
        while True:
            with self._state:
                while True:
                    r = take()
                    if r is not None:
                        return r
                    if self._lost is not None:
                        raise self._lost
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise Timeout("timed out")
                    if not self._reading:
                        self._reading = True
                        conn = self._conn
                        break
                    self._state.wait(left)
            msg = None
            try:
                msg = conn.receive(timeout=left)
            except TimeoutError:
                pass
            except Exception as e:  # the socket closed or broke: EOF, reset, parse errors
                self._mark_lost(conn, e)
            finally:
                with self._state:
                    self._reading = False
                    if msg is not None:
                        self._route(msg)
                    self._state.notify_all()
            if msg is not None:
                self._after_read()

    def _route(self, msg) -> None:
        """Files one incoming message (state lock held)."""
        h = msg.header
        f = h.fields
        if h.message_type in (MessageType.method_return, MessageType.error):
            rs = f.get(HeaderFields.reply_serial)
            if rs not in self._expect:
                return
            sender = f.get(HeaderFields.sender)
            expected = self._expect[rs]
            # A call sent to an owner that left is answered by the next one,
            # whose NameOwnerChanged came first: the current owner is legitimate.
            if sender != _DBUS and expected is not None and sender != expected and sender != self._owner:
                self.forged += 1
                return
            del self._expect[rs]
            self._replies[rs] = msg
            return
        if h.message_type != MessageType.signal:
            return
        sender = f.get(HeaderFields.sender)
        iface = f.get(HeaderFields.interface)
        member = f.get(HeaderFields.member)
        path = f.get(HeaderFields.path)
        if iface == _DBUS and member == "NameOwnerChanged":
            if sender != _DBUS or path != _DBUS_PATH or f.get(HeaderFields.signature) != "sss":
                self.forged += 1
                return
            name, _old, new = msg.body
            if name == self.name:
                self._set_owner(new or None)
            return
        if iface == INTERFACE and member == "Trace":
            if (self._owner is None or sender != self._owner or path != PATH
                    or f.get(HeaderFields.signature) != _TRACE_SIG):
                self.forged += 1
                return
            if self._trace is not None:
                self._trace._q.append(_trace_of(msg.body))
            return
        if iface == INTERFACE and member == "Notify":
            if (self._owner is None or sender != self._owner or path != PATH
                    or f.get(HeaderFields.signature) != _NOTIFY_SIG):
                self.forged += 1
                return
            contract, txn, changed, values = msg.body
            try:
                note = Notification(txn, tuple(changed), _values(values), contract)
            except InvalidArgument as e:
                self.on_error(f"Notify for {contract}", e)
                return
            route = self._routes.get(contract)
            if route is None:
                q = self._orphans.setdefault(contract, deque(maxlen=1024))
                q.append(note)
                if len(self._orphans) > 64:
                    self._orphans.pop(next(iter(self._orphans)))
                return
            self._deliver(route, note)

    def _deliver(self, route, note: Notification) -> None:
        if isinstance(route, Writer):
            self._writer_calls.append((route, note))
        else:
            route._q.append(note)

    def _set_owner(self, owner: Optional[str]) -> None:
        """(state lock held) The service's name changed hands: every contract
        this client held on the old owner is gone."""
        if owner == self._owner:
            return
        had = self._owner
        self._owner = owner
        self._owner_gen += 1
        if had is not None:
            self._routes.clear()
            self._orphans.clear()
            self._writer_calls.clear()
            for w in self._watches:
                w._path = None
                w._stale = True
            for w in self._writers:
                w.path = None
            if self._trace is not None:
                self._trace._stale = True

    def _claim(self, path: str, route) -> None:
        with self._state:
            if isinstance(route, Writer):
                route.path = path
            else:
                route._path = path
            self._routes[path] = route
            for note in self._orphans.pop(path, ()):
                self._deliver(route, note)

    def _after_read(self) -> None:
        """Runs the work a message left (outside the state lock): writer calls,
        and registering writers again on a new owner."""
        with self._state:
            # A writer without reconnection went with the owner that held it.
            ended = [w for w in self._writers if w.path is None and not w.reconnect]
            for w in ended:
                self._writers.remove(w)
                w.ended = True
            regen = self._owner is not None and self._writers_gen != self._owner_gen and self._writers
            gen = self._owner_gen
        for w in ended:
            self.on_error(w, ConnectionLost(f"the service {self.name} changed owner: writer {w.name!r} ended "
                                            "with the one that held it (reconnect=False)"))
        if regen:
            with self._writer_lock:
                with self._state:
                    if self._writers_gen == gen:
                        regen = False
                    self._writers_gen = gen
                if regen:
                    for w in list(self._writers):
                        if w.path is None:
                            try:
                                w._register(again=True)
                            except OrdoError as e:
                                self.on_error(w, e)
        self._serve_writers()

    def _serve_writers(self) -> None:
        """Answers queued writer calls, one thread at a time; the thread that
        holds the writer lock re-checks the queue after releasing it."""
        while True:
            with self._state:
                if not self._writer_calls:
                    return
            if not self._writer_lock.acquire(blocking=False):
                return
            try:
                while True:
                    with self._state:
                        if not self._writer_calls:
                            break
                        writer, note = self._writer_calls.popleft()
                    writer._handle(note)
            finally:
                self._writer_lock.release()

    def process(self, timeout: float = 0.0) -> None:
        """Reads and handles incoming messages (answers writers' calls) for up
        to ``timeout`` seconds. For programs without a thread of their own
        waiting on the client; or use :meth:`start`. A lost connection is
        opened again meanwhile (``reconnect=True``), tried every 0.1 s: the
        writers then register again. Raises ``ConnectionLost`` when it is
        still lost at the end."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._wait(lambda: None, deadline)
            except Timeout:
                return
            except ConnectionLost:
                if not self._reconnects or self._closing or self._closed:
                    raise
                with self._state:
                    seen = self._conn
                try:
                    self._reopen(seen)
                except ConnectionLost:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise
                    time.sleep(min(0.1, left))

    def start(self) -> None:
        """Starts a daemon thread that handles incoming messages (serves
        writers) until :meth:`stop` or :meth:`close`."""
        if self._thread is not None:
            return
        self._stop.clear()

        def loop():
            while not self._stop.is_set():
                try:
                    self.process(0.2)
                except ConnectionLost:
                    if self._stop.wait(0.2):
                        return
                except OrdoError as e:  # pragma: no cover - reported, the loop goes on
                    self.on_error("message loop", e)

        self._thread = threading.Thread(target=loop, name="ordo-client", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops the thread started by :meth:`start` (waits for it)."""
        t, self._thread = self._thread, None
        if t is not None:
            self._stop.set()
            t.join(timeout=5)

    # -- methods of dev.ordo.Bus1 ------------------------------------------

    def call(self, member: str, signature: str = "", *args, interface: str = INTERFACE, path: str = PATH,
             timeout: Optional[float] = None) -> tuple:
        """Calls any method of the service; returns the reply's body or raises
        the typed error."""
        return self._call(self.name, path, interface, member, signature, args, timeout)

    def commit(self, set: Optional[Mapping[str, Value]] = None, touch: Iterable[str] = (),
               remove: Iterable[str] = (), *, expect: Optional[Mapping[str, int]] = None,
               owned: bool = False) -> int:
        """One atomic transaction: every ``set``, then every ``touch``, then
        every ``remove`` (``k.**`` removes the tree). Returns its id, 0 if
        nothing changed. Values are checked before anything is sent.

        ``expect`` (keypath → counter, 0: never changed) makes it
        conditional: if a counter has moved nothing is applied and
        :class:`Conflict` is raised, naming the keypath and both counters.
        With ``owned`` the values it sets belong to this connection and are
        removed, in one transaction, when it closes (SPEC §15; sent as
        ``CommitWith``)."""
        body = _writes_body(set, touch, remove)
        conditions = check_expect(expect)
        if not isinstance(owned, bool):
            raise InvalidArgument(f"owned: a bool, not {owned!r}")
        if expect is None and not owned:
            return self.call("Commit", "a{sv}asas", *body)[0]
        options: Dict[str, Tuple[str, Any]] = {}
        if conditions:
            options["expect"] = ("a{st}", conditions)
        if owned:
            options["owned"] = ("b", True)
        return self.call("CommitWith", "a{sv}asasa{sv}", *body, options)[0]

    def owners(self, patterns: Iterable[str] = ("**",)) -> Dict[str, str]:
        """The owned values among the keypaths matching ``patterns`` that
        this peer may read: keypath → owner (the owning peer's unique name)."""
        return dict(self.call("Owners", "as", _strings(patterns, "patterns"))[0])

    def get(self, keypath: str) -> Entry:
        """The keypath's value and counter; :class:`NotFound` if it holds none."""
        _check_str(keypath, "keypath")
        variant, counter = self.call("Get", "s", keypath)
        return Entry(from_variant(variant, keypath), counter)

    def snapshot(self, patterns: Iterable[str] = ("**",)) -> Snapshot:
        """One consistent read of every keypath matching a pattern."""
        values, counters, txn = self.call("Snapshot", "as", _strings(patterns, "patterns"))
        return Snapshot(_values(values), dict(counters), txn)

    def changes(self, since: int, patterns: Iterable[str] = ("**",)) -> Changes:
        """Every matching keypath changed after transaction ``since`` (SPEC §10)."""
        if not is_uint64(since):
            raise InvalidArgument(f"since: {since!r} is out of range for a transaction id (an int from 0 to 2**64 - 1)")
        values, removed, counters, txn = self.call("Changes", "tas", since, _strings(patterns, "patterns"))
        return Changes(_values(values), list(removed), dict(counters), txn)

    def get_property(self, name: str) -> Any:
        """A property of the service's interface (Transaction, Version, Epoch ...)."""
        (_sig, value), = self.call("Get", "ss", INTERFACE, name, interface=_PROPS)
        return value

    @property
    def transaction(self) -> int:
        """The last committed transaction id."""
        return self.get_property("Transaction")

    @property
    def version(self) -> str:
        return self.get_property("Version")

    @property
    def epoch(self) -> Optional[str]:
        """The bus's epoch (SPEC §10); None if the service publishes none."""
        try:
            return self.get_property("Epoch")
        except DBus as e:
            if e.dbus_name in ("org.freedesktop.DBus.Error.UnknownProperty",
                               "org.freedesktop.DBus.Error.InvalidArgs"):
                return None
            raise

    @property
    def schema(self) -> Optional[str]:
        """The schema the service enforces (SPEC §14, docs/schema.md), as its
        canonical JSON text; None when it has none."""
        text = self.get_property("Schema")
        return text or None

    def contracts(self) -> List[Dict[str, Any]]:
        """One dict per contract, in pass order (plain values, no variants)."""
        return [_plain(d) for d in self.call("Contracts")[0]]

    def stats(self) -> Dict[str, int]:
        return _plain(self.call("Stats")[0])

    def graph(self) -> str:
        """The dependency graph in Graphviz DOT."""
        return self.call("Graph")[0]

    def unregister(self, contract: str) -> None:
        """Unregisters a contract by path (one of this connection's)."""
        self.call("Unregister", "o", contract)

    def trace(self, patterns: Iterable[str] = ("**",)) -> "TraceWatch":
        """Subscribes to pass traces (``SubscribeTrace``): a
        :class:`TraceWatch` iterating over one :class:`ordo.Trace` per pass
        with a keypath matching ``patterns``, filtered to what this client
        may read. One per client: a second call replaces the patterns."""
        pats = _strings(patterns, "patterns")
        if self._trace is not None and not self._trace._closed:
            self.call("SubscribeTrace", "as", pats)
            self._trace.patterns = pats
            return self._trace
        return TraceWatch(self, pats)

    def _register(self, name: str, reads: Sequence[str], writes: Sequence[str], options: Dict[str, Any],
                  route) -> str:
        path = self.call("Register", "sasasa{sv}", name, list(reads), list(writes), options)[0]
        self._claim(path, route)
        self._serve_writers()  # an initial call may have arrived before the reply was taken
        return path

    def _fresh_name(self, kind: str) -> str:
        return f"python-{kind} {self.unique_name} #{next(self._names)}"

    # -- watches and writers ------------------------------------------------

    def watch(self, patterns: Iterable[str], priority: Optional[int] = None, *, name: Optional[str] = None,
              initial: bool = False, resume_from: Optional[Position] = None, reconnect: bool = True,
              reconnect_timeout: float = 30.0, gap_check: bool = True, cache: bool = False) -> "Watch":
        """Registers an observer of ``patterns`` and returns an iterator of
        its :class:`Notification` s (see :class:`Watch`). With ``cache``
        each notification carries the whole read set as of its transaction
        (:attr:`Notification.cache`)."""
        return Watch(self, _strings(patterns, "patterns"), priority, name, initial, resume_from, reconnect,
                     reconnect_timeout, gap_check, cache)

    def writer(self, name: str, reads: Iterable[str], writes: Iterable[str], priority: Optional[int] = None,
               *, timeout_ms: Optional[int] = None, notify_initial: bool = False, cache: bool = False,
               reconnect: bool = True):
        """A decorator that makes a function a writer contract::

            @client.writer("normalize", reads=["user.name"], writes=["user.name"], priority=-3)
            def normalize(note):
                return {"user.name": note.values["user.name"].strip()}

        The function receives each :class:`Notification` and returns what to
        write: None (nothing), a dict of sets, or :class:`Writes`. The client
        answers with ``Complete``; the decorator returns the :class:`Writer`.
        With ``cache`` (which implies ``notify_initial``) each call's
        :attr:`Notification.cache` holds the whole read set. With
        ``reconnect=False`` the writer ends with the service's owner that held
        it instead of registering again with the next one (:attr:`Writer.ended`).
        """
        def deco(fn):
            return self.add_writer(fn, name, reads, writes, priority, timeout_ms=timeout_ms,
                                   notify_initial=notify_initial, cache=cache, reconnect=reconnect)
        return deco

    def add_writer(self, fn: Callable[[Notification], Any], name: str, reads: Iterable[str],
                   writes: Iterable[str], priority: Optional[int] = None, *, timeout_ms: Optional[int] = None,
                   notify_initial: bool = False, cache: bool = False, reconnect: bool = True) -> "Writer":
        """Registers ``fn`` as a writer contract (see :meth:`writer`)."""
        if not isinstance(reconnect, bool):
            raise InvalidArgument(f"reconnect: a bool, not {reconnect!r}")
        w = Writer(self, fn, name, _strings(reads, "reads"), _strings(writes, "writes"), priority, timeout_ms,
                   notify_initial, cache)
        w.reconnect = reconnect
        w._register()
        with self._state:
            self._writers.append(w)
        return w

    def merging_writer(self, max_batch_keypaths: int = 4096) -> "MergingWriter":
        """A :class:`MergingWriter` on this client: writes issued while one of
        its ``Commit`` s is in flight join the next one (like dconf's
        ``write_fast``). Closing the client closes it."""
        return MergingWriter(self, max_batch_keypaths)


class _DirectConnection(DBusConnection):
    """A peer-to-peer connection to a service's listening socket: no bus
    daemon, so no ``Hello`` and no destination. Only the service can send on
    it, so every message read is marked as sent by ``_DIRECT_SERVICE``."""

    def __init__(self, address: str):
        errors = []
        for path in get_connectable_addresses(address):
            try:
                sock = prep_socket(path)
                break
            except OSError as e:
                errors.append(e)
        else:
            raise errors[-1] if errors else OSError(f"no address to connect to in {address}")
        DBusConnectionBase.__init__(self, sock)
        # A label for this client's contract names: the service names the peer.
        self.unique_name = f"direct-{os.getpid()}-{secrets.token_hex(4)}"

    def send(self, message, serial=None):
        message.header.fields.pop(HeaderFields.destination, None)
        super().send(message, serial)

    def receive(self, *, timeout=None):
        msg = super().receive(timeout=timeout)
        msg.header.fields[HeaderFields.sender] = _DIRECT_SERVICE
        return msg


def _closed_by_peer(conn) -> bool:
    """Whether the other end has closed ``conn`` (a peek that reads nothing
    and never blocks; bytes waiting for a reader leave it open)."""
    try:
        return conn.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def _shut(conn) -> None:
    """Closes a connection, waking a thread blocked reading it."""
    if conn is None:
        return
    try:
        conn.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


def _check_str(x: Any, what: str) -> None:
    if not isinstance(x, str):
        raise InvalidArgument(f"{what}: a str, not {type(x).__name__}")


def _options(priority: Optional[int], notify_initial: bool, timeout_ms: Optional[int] = None, *,
             cache: bool = False, reads: Sequence[str] = ()) -> Dict[str, Any]:
    opts: Dict[str, Any] = {}
    if not isinstance(cache, bool):
        raise InvalidArgument(f"cache: a bool, not {cache!r}")
    if cache:
        if not reads:
            raise InvalidArgument("option \"cache\" needs a read set; this contract reads nothing "
                                  "(an every-transaction contract)")
        # The initial Notify fills the cache (the service implies it too).
        notify_initial = True
        opts["cache"] = ("b", True)
    if priority is not None:
        if not isinstance(priority, int) or isinstance(priority, bool) or not -2**31 < priority < 2**31:
            raise InvalidArgument(f"priority: an int32 (not INT32_MIN), not {priority!r}")
        opts["priority"] = ("i", priority)
    if notify_initial:
        opts["notify-initial"] = ("b", True)
    if timeout_ms is not None:
        if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or not 0 < timeout_ms < 2**32:
            raise InvalidArgument(f"timeout_ms: a uint32 > 0, not {timeout_ms!r}")
        opts["timeout-ms"] = ("u", timeout_ms)
    return opts


class Writer:
    """A writer contract served by a :class:`Client` (made by
    :meth:`Client.writer`). ``path`` is its contract path (None while the
    service is away); it registers again by itself when the service comes
    back, and is then called initially (:attr:`Notification.initial`), as
    after a suspension. ``calls``, ``completed`` and ``refused`` count its
    calls.

    With ``cache`` every call's :attr:`Notification.cache` is the read set
    as of the call's transaction: an initial call fills it, each later call
    applies its ``Notify``, and an answer the service accepts enters it
    where the read set matches (a normalizer sees its own result at its
    next call). A call whose ``Notify`` was too large to send re-reads the
    read set (the state now) and comes with kind ``"snapshot"``: compute
    everything again, as for an initial call."""

    def __init__(self, client: Client, fn, name, reads, writes, priority, timeout_ms, notify_initial, cache):
        if not writes:
            raise InvalidArgument(f"writer {name!r}: a writer needs a non-empty write set (use watch to observe)")
        _check_str(name, "name")
        self.client = client
        self.fn = fn
        self.name = name
        self.reads = reads
        self.writes = writes
        self.options = _options(priority, notify_initial, timeout_ms, cache=cache, reads=reads)
        self._cache = _ReadCache() if cache else None
        self.path: Optional[str] = None
        #: Whether it registers again with the service's next owner.
        self.reconnect = True
        #: Set when it ended with the owner that held it (``reconnect=False``).
        self.ended = False
        self.calls = 0
        self.completed = 0
        self.refused = 0

    def __repr__(self) -> str:
        return f"<ordo.Writer {self.name!r} {self.path}>"

    def __call__(self, note: Notification):
        return self.fn(note)

    def _register(self, again: bool = False) -> None:
        # Registered again (the service came back), it is called initially
        # whatever it asked: what it computes may have missed changes.
        options = {**self.options, "notify-initial": ("b", True)} if again else self.options
        self.path = self.client._register(self.name, self.reads, self.writes, options, self)

    def _handle(self, note: Notification) -> None:
        if note.contract != self.path:
            return
        self.calls += 1
        try:
            if self._cache is not None:
                note = self._cached(note)
            result = self.fn(note)
            if result is None:
                result = Writes()
            elif isinstance(result, Mapping):
                result = Writes(set=result)
            elif isinstance(result, tuple) and len(result) == 3:
                result = Writes(*result)
            elif not isinstance(result, Writes):
                raise InvalidArgument(f"writer {self.name!r} returned {type(result).__name__}; "
                                      "return None, a dict of sets or ordo.Writes")
            body = _writes_body(result.set, result.touch, result.remove)
            # refused here (a NUL in a keypath ...) rather than by the Complete call: answered with nothing
            _check_body(INTERFACE, "Complete", "ota{sv}asas", (note.contract, note.txn, *body))
        except Exception as e:  # the pass waits for us: answer with nothing
            self.client.on_error(self, e)
            body = ({}, [], [])
        try:
            self.client.call("Complete", "ota{sv}asas", note.contract, note.txn, *body)
            self.completed += 1
            if self._cache is not None:
                self._cache.own(_values(body[0]), body[2], self.reads)
        except OrdoError as e:
            self.refused += 1
            self.client.on_error(self, e)

    def _cached(self, note: Notification) -> Notification:
        """The call with the cache brought to its transaction."""
        cache = self._cache
        assert cache is not None
        if note.changed == _TRUNCATED:
            _txn, differ = cache.reread(self.client, self.reads, note.txn)
            return replace(note, changed=differ, values=dict(cache.view), kind="snapshot", cache=cache.view)
        cache.apply(note.changed, note.values)
        return replace(note, cache=cache.view)

    def unregister(self) -> None:
        """Unregisters the writer (no-op if already gone)."""
        c = self.client
        with c._state:
            if self in c._writers:
                c._writers.remove(self)
            path, self.path = self.path, None
            if path is not None:
                c._routes.pop(path, None)
        if path is not None:
            try:
                c.unregister(path)
            except (NotFound, ConnectionLost, Timeout):
                pass


class Watch:
    """An observer contract as an iterator of :class:`Notification` s, with
    automatic resume (SPEC §10).

    It remembers ``(epoch, last txn delivered)`` (:attr:`position`). When the
    service goes away and comes back (a new owner of its name) or the
    connection is lost and made again (``reconnect=True``, for up to
    ``reconnect_timeout`` seconds), it registers again and catches up: same
    epoch -> ``Changes`` since that txn (one ``"changes"`` notification);
    other epoch -> a full ``Snapshot`` (one ``"snapshot"`` notification).
    With ``gap_check`` (and a service that has ``Changes``), a ``Notify``
    whose txn jumps past the last one is checked with ``Changes``: if
    something was missed (signals dropped by the bus daemon), a ``"changes"``
    notification covering everything since the last delivered txn replaces
    it. Transactions already covered by a catch-up are not delivered again.
    ``resume_from`` starts from a saved position (a restarted program).

    With ``cache`` every notification's :attr:`Notification.cache` is the
    read set as of its ``txn``: the initial ``Notify`` of each registration
    fills it, each ``Notify`` is applied to it, and a catch-up (``Changes``
    or the refill after a registration) brings it to the catch-up's txn. A
    ``Notify`` too large to send (``changed == ("**",)``) is replaced by
    reading the read set again (``Snapshot`` s), delivered as a
    ``"snapshot"`` notification listing the keypaths whose value differs.

    ``next(timeout)`` waits up to ``timeout`` seconds (``TimeoutError`` when
    nothing came); plain iteration waits forever. ``close()`` (or leaving a
    ``with`` block) unregisters the contract.
    """

    def __init__(self, client: Client, patterns, priority, name, initial, resume_from, reconnect,
                 reconnect_timeout, gap_check, cache):
        self.client = client
        self.patterns = patterns
        self.name = name
        self.options = _options(priority, True, cache=cache, reads=patterns)
        self._cache = _ReadCache() if cache else None
        self.reconnect = reconnect
        self.reconnect_timeout = reconnect_timeout
        self.gap_check = gap_check
        self._q: Deque[Notification] = deque()
        self._ready: Deque[Notification] = deque()
        self._path: Optional[str] = None
        self._stale = False
        self._closed = False
        self._epoch: Optional[str] = None
        self._last: Optional[int] = None
        self._resume: Optional[Position] = resume_from
        self._initial = initial
        with client._state:
            client._watches.append(self)
        try:
            self._start(time.monotonic() + client.timeout)
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> Optional[str]:
        """The contract's path now (None while the service is away)."""
        return self._path

    @property
    def position(self) -> Position:
        """(epoch, last txn delivered): save it to resume later."""
        return Position(self._epoch, self._last or 0)

    def _start(self, deadline: float) -> None:
        """Registers (with notify-initial) and catches up from the resume point."""
        c = self.client
        self._stale = False
        self._q.clear()
        self._epoch_now = c.epoch
        for attempt in itertools.count():
            name = self.name or c._fresh_name("watch")
            try:
                self._path = c._register(name, self.patterns, (), self.options, self)
                break
            except DuplicateName:
                # our previous connection's contract may not be gone yet
                if self.name is None or time.monotonic() > deadline:
                    raise
                time.sleep(min(0.05 * (attempt + 1), 0.5))
        first = c._wait(lambda: self._q.popleft() if self._q else None, deadline)
        txn = first.txn
        if self._cache is not None and first.changed == _TRUNCATED:
            txn, _differ = self._cache.reread(c, self.patterns, first.txn)
        elif self._cache is not None:
            self._cache.fill(first.values)
        self._catch_up(txn)

    @property
    def _view(self) -> Optional[Mapping[str, Value]]:
        return None if self._cache is None else self._cache.view

    def _catch_up(self, txn_now: int) -> None:
        """After (re)registering: from a resume point, same epoch -> Changes,
        other epoch -> Snapshot; without one, a Snapshot if asked for. With
        a cache (filled as of ``txn_now``), ``Changes`` brings it to the
        catch-up's txn and the cache itself is the snapshot."""
        c = self.client
        cache = self._cache
        resume, initial = self._resume, self._initial
        self._resume = None
        self._initial = False
        self._epoch = self._epoch_now
        if resume is None and not initial:
            self._last = txn_now
            return
        # (A cache as of txn_now misses what changed up to a resume point past
        # it: such a catch-up is a snapshot.)
        if resume is not None and resume.epoch is not None and resume.epoch == self._epoch \
                and c._has_changes is not False and (cache is None or resume.txn <= txn_now):
            try:
                ch = c.changes(resume.txn, self.patterns)
                c._has_changes = True
            except InvalidArgument:
                pass  # since > the last committed id: another history; read everything
            except DBus as e:
                if e.dbus_name != "org.freedesktop.DBus.Error.UnknownMethod":
                    raise
                c._has_changes = False
            else:
                self._last = ch.txn
                keys = set(ch.values) | set(ch.removed)
                if keys:
                    self._caught_up(ch, keys, self._path or "")
                return
        if cache is None:
            snap = c.snapshot(self.patterns)
            txn, keys, values = snap.txn, snap.counters, snap.values
        else:
            txn, keys, values = txn_now, cache.view, dict(cache.view)
        self._last = txn
        self._ready.append(Notification(txn, tuple(sorted(keys)), values, self._path or "", "snapshot", self._view))

    def _resume_now(self, deadline: float) -> None:
        """The service or the connection came back: register again, catch up."""
        c = self.client
        while True:
            try:
                with c._state:
                    lost, seen = c._lost is not None, c._conn
                if lost:
                    if not self.reconnect or c._closed:
                        raise c._lost
                    c._reopen(seen)
                c._wait(lambda: c._owner, deadline)
                self._resume = Position(self._epoch, self._last or 0)
                self._start(deadline)
                return
            except ConnectionLost:
                if not self.reconnect or c._closed or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
            except Timeout:
                raise Timeout(f"the service {c.name} did not come back within {self.reconnect_timeout:g} s") \
                    from None

    def next(self, timeout: Optional[float] = None) -> Notification:
        """The next notification; waits up to ``timeout`` seconds (None: forever)."""
        if self._closed:
            raise StopIteration
        deadline = None if timeout is None else time.monotonic() + timeout
        c = self.client
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._stale and not self.reconnect:
                # Without reconnection the contract went with the old owner.
                self._closed = True
                raise ConnectionLost(f"the service {c.name} changed owner: this watch's contract ended with the "
                                     "old one (reconnect=False)")
            if self._stale or (self.reconnect and c._lost is not None and not c._closed):
                rd = time.monotonic() + self.reconnect_timeout
                self._resume_now(rd if deadline is None else min(rd, deadline))
                continue
            try:
                note = c._wait(lambda: self._q.popleft() if self._q else (False if self._stale else None),
                               deadline)
            except ConnectionLost:
                if not self.reconnect or c._closed:
                    raise
                continue
            if note is False:
                continue
            self._accept(note)

    def _accept(self, note: Notification) -> None:
        c = self.client
        cache = self._cache
        last = self._last or 0
        if note.txn <= last:
            return  # covered by a catch-up already
        if cache is not None and note.changed == _TRUNCATED:
            self._last, differ = cache.reread(c, self.patterns, note.txn)
            self._ready.append(Notification(self._last, differ, dict(cache.view), note.contract, "snapshot",
                                            cache.view))
            return
        if self.gap_check and note.txn > last + 1 and c._has_changes is not False:
            try:
                ch = c.changes(last, self.patterns)
                c._has_changes = True
            except DBus as e:
                if e.dbus_name != "org.freedesktop.DBus.Error.UnknownMethod":
                    raise
                c._has_changes = False
            else:
                keys = set(ch.values) | set(ch.removed)
                # A cached contract's Notify resends the read set under each
                # keypath it lists (all of it when it lists none): it covers
                # what changed under them.
                roots = set(note.changed)
                covered = keys <= roots if cache is None else not roots or all(_within(k, roots) for k in keys)
                if ch.txn < note.txn:
                    # Changes answered before the note's transaction ended (a
                    # pass sends its Notify signals first): what it found came
                    # before the note, which follows it.
                    if keys:
                        self._caught_up(ch, keys, note.contract)
                elif ch.txn != note.txn or not covered:
                    self._caught_up(ch, keys, note.contract)
                    return
        self._last = note.txn
        if cache is not None:
            cache.apply(note.changed, note.values)
            note = replace(note, cache=cache.view)
        self._ready.append(note)

    def _caught_up(self, ch: Changes, keys: Iterable[str], contract: str) -> None:
        """Delivers a ``Changes`` read as one ``"changes"`` notification."""
        self._last = ch.txn
        if self._cache is not None:
            self._cache.update(ch.values, ch.removed)
        self._ready.append(Notification(ch.txn, tuple(sorted(keys)), ch.values, contract, "changes", self._view))

    def __iter__(self) -> Iterator[Notification]:
        return self

    def __next__(self) -> Notification:
        return self.next()

    def close(self) -> None:
        """Unregisters the contract (no-op if already closed)."""
        if self._closed:
            return
        self._closed = True
        c = self.client
        with c._state:
            if self in c._watches:
                c._watches.remove(self)
            path, self._path = self._path, None
            if path is not None:
                c._routes.pop(path, None)
        if path is not None:
            try:
                c.unregister(path)
            except (NotFound, ConnectionLost, Timeout):
                pass

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()



def _trace_of(body) -> Trace:
    txn, committed, changed, steps, duration = body
    out = []
    for d in steps:
        v = {k: x[1] for k, x in d.items()}
        out.append(TraceStep(v.get("contract", ""), v.get("name", ""), v.get("txn", 0), v.get("outcome", ""),
                             bool(v.get("initial", False)), tuple(v.get("because", ())), tuple(v.get("writes", ())),
                             tuple(v.get("refused", ())), v.get("failure"), v.get("duration-ns", 0),
                             bool(v.get("truncated", False))))
    return Trace(txn, bool(committed), tuple(changed), tuple(out), duration)


class TraceWatch:
    """Pass traces from the service as an iterator of :class:`ordo.Trace`
    (``SubscribeTrace``; made by :meth:`Client.trace`). Only ``Trace``
    signals from the service's current owner are taken. ``next(timeout)``
    raises ``TimeoutError`` when nothing came; ``close()`` (or leaving a
    ``with`` block) calls ``UnsubscribeTrace``. When the service's owner
    changes, the subscription is made again on the new one."""

    def __init__(self, client: Client, patterns: List[str]):
        self.client = client
        self.patterns = patterns
        self._q: Deque[Trace] = deque()
        self._stale = False
        self._closed = False
        client.call("SubscribeTrace", "as", patterns)
        with client._state:
            client._trace = self

    def next(self, timeout: Optional[float] = None) -> Trace:
        if self._closed:
            raise StopIteration
        c = self.client
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._stale and c._owner is not None:
                self._stale = False
                c.call("SubscribeTrace", "as", self.patterns)
            t = c._wait(lambda: self._q.popleft() if self._q else (False if self._stale else None), deadline)
            if t is not False:
                return t

    def __iter__(self) -> Iterator[Trace]:
        return self

    def __next__(self) -> Trace:
        return self.next()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        c = self.client
        with c._state:
            if c._trace is self:
                c._trace = None
        try:
            c.call("UnsubscribeTrace")
        except (ConnectionLost, Timeout, DBus):
            pass

    def __enter__(self) -> "TraceWatch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- merging writes (docs/dbus.md "Merging writes") ------------------------

_SEGMENT = re.compile(r"[A-Za-z0-9_-]+\Z")


def _check_keypath(k: Any, what: str) -> None:
    """A concrete keypath (SPEC §1): 1-32 segments of [A-Za-z0-9_-], at most 256 bytes."""
    if not isinstance(k, str):
        raise InvalidArgument(f"{what}: keypath {k!r} is not a str")
    segments = k.split(".")
    if not k or len(k.encode("utf-8", "surrogatepass")) > 256 or len(segments) > 32 \
            or not all(_SEGMENT.match(s) for s in segments):
        raise InvalidKeypath(f"{what}: invalid keypath {k!r}: 1-32 segments of [A-Za-z0-9_-] joined by '.', "
                             "at most 256 bytes")


class MergedWrite:
    """The batch -- the one ``Commit`` -- a merged write joined. Every write
    merged into the same ``Commit`` gets the same object."""

    def __init__(self, batch: int):
        #: the batch's number, from 0, in the order the batches are sent
        self.batch = batch
        self._done = threading.Event()
        self._txn: Optional[int] = None
        self._error: Optional[OrdoError] = None

    def __repr__(self) -> str:
        state = "pending" if not self._done.is_set() else (
            f"error={self._error}" if self._error else f"txn={self._txn}")
        return f"<MergedWrite batch={self.batch} {state}>"

    def done(self) -> bool:
        """Whether the batch's ``Commit`` was answered (or failed)."""
        return self._done.is_set()

    def result(self, timeout: Optional[float] = None) -> int:
        """Waits for the ``Commit`` and returns the transaction id the write
        landed in (0 if the batch changed nothing), or raises its error (then
        none of the batch's writes was applied, unless it is a
        :class:`Timeout` or :class:`ConnectionLost`: read the values back)."""
        if not self._done.wait(timeout):
            raise Timeout(f"batch {self.batch}: not answered within {timeout:g} s")
        if self._error is not None:
            raise self._error
        assert self._txn is not None
        return self._txn

    def exception(self, timeout: Optional[float] = None) -> Optional[OrdoError]:
        """The batch's error, None if it committed."""
        if not self._done.wait(timeout):
            raise Timeout(f"batch {self.batch}: not answered within {timeout:g} s")
        return self._error

    def _resolve(self, txn: Optional[int], error: Optional[OrdoError]) -> None:
        self._txn, self._error = txn, error
        self._done.set()


class _Batch:
    __slots__ = ("ticket", "sets", "touches", "removes", "trees")

    def __init__(self, ticket: MergedWrite):
        self.ticket = ticket
        self.sets: Dict[str, Any] = {}       # keypath -> variant
        self.touches: Dict[str, None] = {}   # an ordered set
        self.removes: Dict[str, None] = {}   # exact removes and tree removals p.**
        self.trees: List[str] = []           # the prefixes p of the tree removals

    def __len__(self) -> int:
        return len(self.sets) + len(self.touches) + len(self.removes)

    def covers(self, k: str) -> bool:
        return any(k == p or k.startswith(p + ".") for p in self.trees)


class MergingWriter:
    """Client-side merging of writes, like dconf's ``dconf_client_write_fast``
    (docs/dbus.md "Merging writes"). At most one ``Commit`` of this writer is
    in flight: a write issued while none is goes out at once, from the
    writer's sending thread, as soon as that thread runs (writes issued
    before it runs join that ``Commit``); the writes issued while
    one is in flight are merged into one pending batch, sent as a single
    ``Commit`` when the reply arrives. A burst of N writes takes a few
    ``Commit`` s, not N.

    Merging keeps the result of applying the writes one by one in the order
    they were issued (last write per keypath wins): a set of ``k`` replaces
    an earlier set or remove of ``k`` in the batch; a remove of ``k``
    replaces an earlier set of ``k``, a tree removal ``p.**`` drops the
    earlier sets of ``p`` and its descendants; touches accumulate (a touch
    never changes a value); a set of a keypath covered by a tree removal
    already in the batch starts a new batch (a ``Commit`` applies removes
    after sets). A batch also closes at ``max_batch_keypaths`` entries (keep
    it at most the service's ``max-keypaths-per-call``, 4096 by default); one
    :meth:`write` is never split.

    What merging gives up: a batch is one transaction (one id, one
    ``Notify`` per observer, net change over the batch), and one failure
    fails every write of its batch. Values and keypaths are checked when a
    write is issued, so a malformed one is refused to its caller alone.

    Thread-safe: any thread may write; each write returns the
    :class:`MergedWrite` of its batch. Use it as a context manager to flush
    and close at the end of a block; closing the client closes it as well
    (the writes issued before are still sent).
    """

    def __init__(self, client: Client, max_batch_keypaths: int = 4096):
        if not isinstance(max_batch_keypaths, int) or max_batch_keypaths < 1:
            raise InvalidArgument("max_batch_keypaths: a positive int")
        self.client = client
        self.max_batch_keypaths = max_batch_keypaths
        #: Commits sent so far
        self.commits = 0
        #: writes accepted so far
        self.writes = 0
        self._cv = threading.Condition(threading.Lock())
        self._queue: Deque[_Batch] = deque()
        self._in_flight: Optional[_Batch] = None
        self._batches = 0
        self._unreported: Optional[OrdoError] = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ordo-merging-writer", daemon=True)
        with client._state:  # closing the client closes it (and ends its thread)
            if client._closing:
                raise ConnectionLost("the client is closed")
            client._merging.append(self)
        self._thread.start()

    def __enter__(self) -> "MergingWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if exc_type is None:
                self.flush()
        finally:
            self.close()

    @property
    def idle(self) -> bool:
        """Whether nothing is pending or in flight."""
        with self._cv:
            return self._in_flight is None and not self._queue

    def set(self, keypath: str, value: Value) -> MergedWrite:
        """Sets one value (merged)."""
        return self.write(set={keypath: value})

    def touch(self, keypath: str) -> MergedWrite:
        """Touches one keypath (merged)."""
        return self.write(touch=[keypath])

    def remove(self, keypath: str) -> MergedWrite:
        """Removes one value, or a tree with ``p.**`` (merged)."""
        return self.write(remove=[keypath])

    def write(self, set: Optional[Mapping[str, Value]] = None, touch: Iterable[str] = (),
              remove: Iterable[str] = ()) -> MergedWrite:
        """Issues one write -- sets, then touches, then removes, as one
        ``Commit`` would apply them -- merged into the pending batch. Returns
        the :class:`MergedWrite` of the batch it joined. Raises, accepting
        nothing, for a malformed keypath or value, an empty write or a closed
        writer."""
        sets, touches, removes = _writes_body(set, touch, remove)
        for k in sets:
            _check_keypath(k, "set")
        for k in touches:
            _check_keypath(k, "touch")
        for k in removes:
            _check_keypath(k[:-3] if k.endswith(".**") else k, "remove")
        size = len(sets) + len(touches) + len(removes)
        if size == 0:
            raise InvalidArgument("a merged write needs at least one set, touch or remove")
        with self._cv:
            if self._closed:
                raise ConnectionLost("the merging writer is closed")
            b = self._queue[-1] if self._queue else None
            if b is None or len(b) + size > self.max_batch_keypaths or any(b.covers(k) for k in sets):
                b = _Batch(MergedWrite(self._batches))
                self._batches += 1
                self._queue.append(b)
                self._cv.notify_all()
            for k, v in sets.items():
                b.removes.pop(k, None)
                b.sets[k] = v
            for k in touches:
                b.touches[k] = None
            for k in removes:
                if k.endswith(".**"):
                    p = k[:-3]
                    if p not in b.trees:
                        b.trees.append(p)
                    for s in [s for s in b.sets if s == p or s.startswith(p + ".")]:
                        del b.sets[s]
                else:
                    b.sets.pop(k, None)
                b.removes[k] = None
            self.writes += 1
            return b.ticket

    def flush(self, timeout: Optional[float] = None) -> None:
        """Waits until every write issued so far is answered; raises the first
        failure of a batch since the previous flush (each
        :class:`MergedWrite` says which failed). ``timeout``: seconds (None:
        as long as the Commits take; each has the client's timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._in_flight is not None or self._queue:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise Timeout(f"flush: writes still pending after {timeout:g} s")
                self._cv.wait(left)
            e, self._unreported = self._unreported, None
        if e is not None:
            raise e

    def close(self) -> None:
        """Stops the sending thread after the writes issued so far were sent
        and answered; further writes raise. Closing its client does this too."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        c = self.client
        with c._state:
            if self in c._merging:
                c._merging.remove(self)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=self.client.timeout + 5)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return
                b = self._queue.popleft()
                self._in_flight = b
                self.commits += 1
            txn: Optional[int] = None
            error: Optional[OrdoError] = None
            try:
                txn = self.client.call("Commit", "a{sv}asas", b.sets, list(b.touches), list(b.removes))[0]
            except OrdoError as e:
                error = e
            except Exception as e:  # noqa: BLE001 -- never lose a batch's outcome
                error = DBus(f"Commit of batch {b.ticket.batch} failed: {e!r}")
            b.ticket._resolve(txn, error)
            with self._cv:
                self._in_flight = None
                if error is not None and self._unreported is None:
                    self._unreported = error
                self._cv.notify_all()
