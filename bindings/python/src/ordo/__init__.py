"""Ordo for Python: a D-Bus client of an Ordo bus (:class:`Client`, over
jeepney) and an in-process bus through ``libordo.so`` (:class:`Bus`, ctypes).

Both share one exception hierarchy (:class:`OrdoError` and its subclasses,
named after ``ordo_status`` and ``dev.ordo.Error.*``) and one value model:
``bool``, ``int`` (int64), ``float`` (double), ``str`` and ``bytes``.
"""

from .errors import (AccessDenied, ConnectionLost, ContractViolation, Cycle, DBus, DuplicateName, Internal,
                     InvalidArgument, InvalidKeypath, LibraryNotFound, Limit, NoTransaction, NotFound,
                     OrderConflict, OrdoError, Schema, Conflict, Stability, Stale, Storage, Timeout, TypeMismatch)
from .values import Value
from .client import (Changes, Client, Entry, MergedWrite, MergingWriter, Notification, Position, Snapshot, TraceWatch,
                     Watch, Writer, Writes)
from .native import Bus, Contract, Handle, Note, Owner, load_library
from .trace import ContractInfo, Trace, TraceStep

__version__ = "0.1.0"

__all__ = [
    "Client", "Entry", "Snapshot", "Changes", "Position", "Notification", "Writes", "Watch", "Writer",
    "MergingWriter", "MergedWrite",
    "Bus", "Contract", "Handle", "Note", "Owner", "load_library", "Value",
    "Trace", "TraceStep", "TraceWatch", "ContractInfo",
    "OrdoError", "InvalidArgument", "InvalidKeypath", "TypeMismatch", "NotFound", "NoTransaction",
    "ContractViolation", "Stability", "Cycle", "OrderConflict", "DuplicateName", "Limit", "DBus", "Internal",
    "AccessDenied", "Storage", "Schema", "Conflict", "Stale", "Timeout", "ConnectionLost", "LibraryNotFound",
]
