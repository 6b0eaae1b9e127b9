"""One exception hierarchy for both halves of the package.

Every error is an :class:`OrdoError`. Its subclasses are named after the C
``ordo_status`` values (``ORDO_E_NOT_FOUND`` -> :class:`NotFound`) and the
D-Bus errors ``dev.ordo.Error.<Name>``; the D-Bus client and the ctypes
binding raise the same classes, so ``except ordo.NotFound`` works with
either.

Each instance carries:

* ``message``  -- the service's or library's message (what was wrong),
* ``status``   -- the ``ordo_status`` code (``None`` for the D-Bus-only ones),
* ``dbus_name`` -- the D-Bus error name of the reply it came from (``None``
  when it did not come from a D-Bus reply).
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "OrdoError", "InvalidArgument", "InvalidKeypath", "TypeMismatch", "NotFound", "NoTransaction",
    "ContractViolation", "Stability", "Cycle", "OrderConflict", "DuplicateName", "Limit", "DBus",
    "Internal", "Timeout", "ConnectionLost", "AccessDenied", "Storage", "Schema", "Conflict", "Stale", "LibraryNotFound",
    "error_for_status",
    "error_for_dbus",
]


class OrdoError(Exception):
    """Base of every Ordo error."""

    #: the ordo_status code of this class (None: D-Bus only)
    status: Optional[int] = None
    #: the short name used by ordo_status and dev.ordo.Error.<name>
    name: str = "Error"

    def __init__(self, message: str = "", *, dbus_name: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.dbus_name = dbus_name

    def __str__(self) -> str:
        return f"{self.name}: {self.message}" if self.message else self.name


def _make(name: str, status: Optional[int], doc: str) -> Type[OrdoError]:
    return type(name, (OrdoError,), {"status": status, "name": name, "__doc__": doc,
                                     "__module__": __name__})


InvalidArgument = _make("InvalidArgument", 1,
                        "A bad argument: a NULL/empty/too long name, a value of an unsupported type, "
                        "a call in a state that does not allow it (also D-Bus InvalidArgs).")
InvalidKeypath = _make("InvalidKeypath", 2, "A malformed keypath or pattern (the message gives the position).")
TypeMismatch = _make("TypeMismatch", 3, "The keypath holds a value of another type than the one asked for.")
NotFound = _make("NotFound", 4, "The keypath holds no value, or no contract has that id/path.")
NoTransaction = _make("NoTransaction", 5, "A write, commit or rollback outside a transaction.")
ContractViolation = _make("ContractViolation", 6, "A read or write outside the running contract's sets.")
Stability = _make("Stability", 7, "A write to a keypath that an earlier contract of the pass reads.")
Cycle = _make("Cycle", 8, "Data contracts would depend on each other in a cycle.")
OrderConflict = _make("OrderConflict", 9, "The contract's position in the pass contradicts its dependencies.")
DuplicateName = _make("DuplicateName", 10, "A contract with that name is already registered on the bus.")
Limit = _make("Limit", 11, "A configured limit was reached.")
DBus = _make("DBus", 12, "A D-Bus failure: no connection, the service is not there, no reply in time, "
                         "or a D-Bus error that is not one of Ordo's.")


class Timeout(DBus, TimeoutError):  # type: ignore[misc, valid-type]
    """No reply (or nothing to return) within the timeout."""

    name = "Timeout"


class ConnectionLost(DBus):  # type: ignore[misc, valid-type]
    """The connection to the bus daemon was lost (or closed)."""

    name = "ConnectionLost"


Internal = _make("Internal", 99, "A bug in Ordo (please report it with the message).")
AccessDenied = _make("AccessDenied", None, "The peer may not do this (another peer's contract, or the policy).")
Storage = _make("Storage", 13, "The service could not store the transaction (nothing was applied).")
Schema = _make("Schema", 14, "A write, value or contract the bus's schema does not allow, or a schema that "
                             "does not validate (the message names the keypath and the rule).")
Conflict = _make("Conflict", 15, "A conditional commit found a keypath's counter other than expected; "
                                 "nothing was applied.")
Stale = _make("Stale", None, "A Complete for a call that is not awaited (timed out, answered, or another txn).")


class LibraryNotFound(OrdoError, OSError):
    """libordo.so could not be found or loaded (ctypes binding)."""

    name = "LibraryNotFound"


_BY_STATUS: Dict[int, Type[OrdoError]] = {
    c.status: c for c in (InvalidArgument, InvalidKeypath, TypeMismatch, NotFound, NoTransaction,
                          ContractViolation, Stability, Cycle, OrderConflict, DuplicateName, Limit, DBus,
                          Storage, Schema, Conflict, Internal)
}
_BY_NAME: Dict[str, Type[OrdoError]] = {c.name: c for c in list(_BY_STATUS.values()) +
                                        [AccessDenied, Stale]}


def error_for_status(status: int, message: str) -> OrdoError:
    """The exception for an ``ordo_status`` code (unknown codes: Internal)."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        return Internal(f"status {status}: {message}")
    return cls(message)


def error_for_dbus(dbus_name: Optional[str], message: str) -> OrdoError:
    """The exception for a D-Bus error reply."""
    dbus_name = dbus_name or "org.freedesktop.DBus.Error.Failed"
    prefix = "dev.ordo.Error."
    if dbus_name.startswith(prefix):
        cls = _BY_NAME.get(dbus_name[len(prefix):], Internal)
        if cls is Internal and dbus_name[len(prefix):] != "Internal":
            return Internal(f"{dbus_name}: {message}", dbus_name=dbus_name)
        return cls(message, dbus_name=dbus_name)
    if dbus_name == "org.freedesktop.DBus.Error.InvalidArgs":
        return InvalidArgument(message, dbus_name=dbus_name)
    if dbus_name == "org.freedesktop.DBus.Error.AccessDenied":
        return AccessDenied(message, dbus_name=dbus_name)
    if dbus_name == "org.freedesktop.DBus.Error.LimitsExceeded":
        return Limit(message, dbus_name=dbus_name)
    return DBus(f"{dbus_name}: {message}", dbus_name=dbus_name)
