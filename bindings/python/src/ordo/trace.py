"""Pass traces (docs/devtools.md): what one notification pass did, as the
core's ``Bus.onTrace``, C's ``ordo_set_trace`` and D-Bus's ``Trace`` signal
report it. Shared by :class:`ordo.Bus` (ctypes) and :class:`ordo.Client`
(D-Bus).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple, Union

__all__ = ["Trace", "TraceStep", "ContractInfo"]


class TraceStep(NamedTuple):
    """One scheduled contract, in pass order. ``contract`` is its id (int)
    in-process, its object path (str) over D-Bus. ``outcome`` is
    ``"called"``, ``"failed"``, ``"unchanged"`` (not called: nothing that
    scheduled it still counted as changed at its turn) or ``"unregistered"``.
    ``because``: the keypaths that scheduled it; ``refused``: writes the bus
    refused, ``"KEYPATH: CODE: message"``; ``failure``: what its callback
    raised (None unless failed)."""
    contract: Union[int, str]
    name: str
    txn: int
    outcome: str
    initial: bool
    because: Tuple[str, ...]
    writes: Tuple[str, ...]
    refused: Tuple[str, ...]
    failure: Optional[str]
    duration_ns: int
    #: over D-Bus: the keypath lists were left out (the trace was too large)
    truncated: bool = False


class Trace(NamedTuple):
    """One notification pass: its transaction id, whether it committed,
    every keypath it changed, the steps in order and its duration."""
    txn: int
    committed: bool
    changed: Tuple[str, ...]
    steps: Tuple[TraceStep, ...]
    duration_ns: int

    @property
    def called(self) -> Tuple[str, ...]:
        """The names of the contracts whose callback ran, in order."""
        return tuple(s.name for s in self.steps if s.outcome in ("called", "failed"))


class ContractInfo(NamedTuple):
    """What ``ordo_get_contract_info`` (and ``Contracts()`` over D-Bus) tell
    about a contract. ``kind``: ``"priority"``, ``"data"`` or
    ``"every-transaction"``; ``priority`` None unless a priority contract;
    ``unused_reads``/``unused_writes``: declared patterns its callbacks never
    read or wrote through the bus so far."""
    id: int
    name: str
    kind: str
    priority: Optional[int]
    level: int
    position: int
    calls: int
    failures: int
    last_txn: int
    reads: Tuple[str, ...]
    writes: Tuple[str, ...]
    unused_reads: Tuple[str, ...]
    unused_writes: Tuple[str, ...]
