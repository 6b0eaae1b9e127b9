"""Typed values: the five kinds a keypath may hold (SPEC §2).

========  ==============  ================  ==========
Python    D-Bus variant   C (ordo_type)     note
========  ==============  ================  ==========
bool      ``b``           ORDO_TYPE_BOOL    checked before int (bool is an int)
int       ``x``           ORDO_TYPE_INT64   -2**63 .. 2**63-1
float     ``d``           ORDO_TYPE_DOUBLE  any double, NaN included
str       ``s``           ORDO_TYPE_STRING  UTF-8 (lone surrogates and NUL characters are refused)
bytes     ``ay``          ORDO_TYPE_BYTES   bytearray and memoryview are accepted
========  ==============  ================  ==========

Anything else (None, lists, dicts, numpy scalars ...) is refused with
:class:`ordo.InvalidArgument` before anything is sent or written.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple, Union

from .errors import InvalidArgument, InvalidKeypath, OrdoError

Value = Union[bool, int, float, str, bytes]

INT64_MIN = -(2 ** 63)
INT64_MAX = 2 ** 63 - 1

__all__ = ["Value", "check_value", "to_variant", "from_variant", "INT64_MIN", "INT64_MAX"]


def _what(key: str) -> str:
    return f"value of {key!r}" if key else "value"


def check_value(value: Any, key: str = "") -> Value:
    """Returns the value as one of the five types, or raises InvalidArgument."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidArgument(f"{_what(key)}: {value} does not fit in a signed 64-bit integer")
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        check_text(value, _what(key))
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgument(f"{_what(key)}: a value of type {type(value).__name__}; "
                          "values must be bool, int, float, str or bytes")


def to_variant(value: Any, key: str = "") -> Tuple[str, Value]:
    """The D-Bus variant (signature, value) jeepney sends for a value."""
    v = check_value(value, key)
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return ("x", v)
    if isinstance(v, float):
        return ("d", v)
    if isinstance(v, str):
        return ("s", v)
    return ("ay", v)


def from_variant(variant: Tuple[str, Any], key: str = "") -> Value:
    """The Python value of a received variant (b, x, d, s or ay)."""
    sig, v = variant
    if sig == "b":
        return bool(v)
    if sig == "x":
        return int(v)
    if sig == "d":
        return float(v)
    if sig == "s":
        return str(v)
    if sig == "ay":
        return bytes(v)
    raise InvalidArgument(f"{_what(key)}: the service sent a variant of type {sig!r}")


def is_uint64(x: Any) -> bool:
    """Whether ``x`` is an int (not a bool) that fits an unsigned 64-bit
    field: a counter, a transaction id, a contract id."""
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**64


def check_text(s: str, what: str, error: type[OrdoError] = InvalidArgument) -> None:
    """Refuses a str that C and D-Bus strings cannot carry: one with a NUL
    character, or with lone surrogates (not UTF-8). Raises `error`."""
    if "\0" in s:
        raise error(f"{what}: {s!r} contains a NUL character (C and D-Bus strings cannot hold one)")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise error(f"{what}: {s!r} is not valid UTF-8 ({e.reason} at {e.start})") from None


def check_expect(expect: Any) -> Dict[str, int]:
    """The conditions of a commit (``expect``: keypath → counter) checked
    before anything is sent or begun: a mapping of keypath strings to
    counters; None is none."""
    if expect is None:
        return {}
    if not isinstance(expect, Mapping):
        raise InvalidArgument(f"expect: a mapping of keypath to counter, not {expect!r}")
    out: Dict[str, int] = {}
    for k, n in expect.items():
        if not isinstance(k, str):
            raise InvalidArgument(f"expect: keypaths are str, not {k!r}")
        check_text(k, "expect keypath", InvalidKeypath)
        if not is_uint64(n):
            raise InvalidArgument(f"expect[{k!r}]: a counter (an int from 0 to 2**64 - 1), not {n!r}")
        out[k] = n
    return out
