"""Values and the error hierarchy, without a service."""
import math

import pytest

import ordo
from ordo.errors import error_for_dbus, error_for_status
from ordo.values import from_variant, to_variant

NAMES = ["InvalidArgument", "InvalidKeypath", "TypeMismatch", "NotFound", "NoTransaction", "ContractViolation",
         "Stability", "Cycle", "OrderConflict", "DuplicateName", "Limit", "DBus", "Internal", "AccessDenied",
         "Storage", "Schema", "Conflict"]
STATUS = {"InvalidArgument": 1, "InvalidKeypath": 2, "TypeMismatch": 3, "NotFound": 4, "NoTransaction": 5,
          "ContractViolation": 6, "Stability": 7, "Cycle": 8, "OrderConflict": 9, "DuplicateName": 10,
          "Limit": 11, "DBus": 12, "Storage": 13, "Schema": 14, "Conflict": 15, "Internal": 99}


@pytest.mark.parametrize("value,sig", [
    (True, "b"), (False, "b"), (0, "x"), (-2**63, "x"), (2**63 - 1, "x"), (1.5, "d"), (float("-inf"), "d"),
    ("", "s"), ("héllo ✓", "s"), (b"", "ay"), (b"\x00\xff", "ay"), (bytearray(b"ab"), "ay"),
    (memoryview(b"cd"), "ay"),
])
def test_values_map_to_the_five_variants(value, sig):
    s, v = to_variant(value, "k")
    assert s == sig
    back = from_variant((s, v))
    assert type(back) is {"b": bool, "x": int, "d": float, "s": str, "ay": bytes}[sig]
    assert back == (bytes(value) if sig == "ay" else value)


def test_nan_is_a_double():
    s, v = to_variant(float("nan"))
    assert s == "d" and math.isnan(v)


@pytest.mark.parametrize("value,what", [
    (None, "NoneType"), ([1], "list"), ({"a": 1}, "dict"), ((1,), "tuple"), (object(), "object"),
    (2**63, "does not fit"), (-2**63 - 1, "does not fit"), ("\udc80", "not valid UTF-8"), (1j, "complex"),
    ("a\x00b", "NUL"),  # D-Bus strings cannot hold NUL: the bus daemon would drop the connection
])
def test_other_values_are_refused_with_a_clear_message(value, what):
    with pytest.raises(ordo.InvalidArgument) as e:
        to_variant(value, "doc.x")
    assert "'doc.x'" in str(e.value) and what in str(e.value)


def test_one_hierarchy_named_after_ordo_status_and_dbus_errors():
    for name in NAMES:
        cls = getattr(ordo, name)
        assert issubclass(cls, ordo.OrdoError) and cls.name == name
        assert cls.status == STATUS.get(name)
        err = error_for_dbus("dev.ordo.Error." + name, "because")
        assert type(err) is cls and err.message == "because" and err.dbus_name == "dev.ordo.Error." + name
        assert str(err) == f"{name}: because"
    for name, code in STATUS.items():
        err = error_for_status(code, "msg")
        assert type(err) is getattr(ordo, name) and err.status == code and err.dbus_name is None
    assert type(error_for_status(42, "m")) is ordo.Internal


def test_dbus_standard_errors_map_to_the_hierarchy():
    assert type(error_for_dbus("org.freedesktop.DBus.Error.InvalidArgs", "m")) is ordo.InvalidArgument
    e = error_for_dbus("org.freedesktop.DBus.Error.UnknownMethod", "no Changes")
    assert type(e) is ordo.DBus and e.dbus_name == "org.freedesktop.DBus.Error.UnknownMethod"
    assert "UnknownMethod" in str(e)
    assert type(error_for_dbus("dev.ordo.Error.Stale", "m")) is ordo.Stale
    assert type(error_for_dbus("dev.ordo.Error.SomethingNew", "m")) is ordo.Internal
    assert isinstance(ordo.Timeout("t"), TimeoutError) and isinstance(ordo.Timeout("t"), ordo.DBus)
    assert issubclass(ordo.ConnectionLost, ordo.DBus)
    assert issubclass(ordo.LibraryNotFound, OSError) and issubclass(ordo.LibraryNotFound, ordo.OrdoError)
