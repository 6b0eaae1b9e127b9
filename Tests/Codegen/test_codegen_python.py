"""The generated Python accessors of the playlist schema (playlist_model.py,
examples/playlist/python) over ordo.Bus (in-process) and ordo.Client (D-Bus,
against `ordod --schema` on a private dbus-daemon): records written as one
transaction's net changes, element removal, listings of records (also
inside contracts), defaults, typed writes (Tests/Codegen/run.sh)."""
import os
import sys

import pytest

import ordo
from playlist_model import PlaylistModel, PlaylistModelPlaylistTracksRecord as Track

SCHEMA = os.environ["ORDO_SCHEMA"]
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bindings", "python", "tests"))
from conftest import Env  # noqa: E402  (the private dbus-daemon and ordod of the package's tests)


@pytest.fixture(params=["bus", "client"])
def session(request):
    """A bus with the schema, and how to read a keypath's change counter."""
    if request.param == "bus":
        bus = ordo.Bus(schema_file=SCHEMA)
        yield bus, bus.counter
        bus.close()
        return
    env = Env(ordod_args=["--schema", SCHEMA])
    client = ordo.Client(env.address, timeout=10)
    yield client, lambda k: client.snapshot([k]).counters.get(k, 0)
    client.close()
    assert env.close() in (0, None), env.log()[-3000:]


def test_record_write_is_net_changes(session):
    bus, counter = session
    tracks = PlaylistModel(bus).playlist.tracks
    tracks.set("t1", Track(duration=200, title="Intro"))
    title, duration = counter("playlist.tracks.t1.title"), counter("playlist.tracks.t1.duration")
    tracks.set("t1", Track(duration=200, title="Intro"))
    assert (counter("playlist.tracks.t1.title"), counter("playlist.tracks.t1.duration")) == (title, duration)
    tracks.set("t1", Track(duration=180, title="Intro"))
    assert (counter("playlist.tracks.t1.title"), counter("playlist.tracks.t1.duration")) == (title, duration + 1)
    assert tracks.get("t1") == Track(duration=180, title="Intro")


def test_a_contract_reading_one_field_runs_when_it_changes():
    bus = ordo.Bus(schema_file=SCHEMA)
    tracks = PlaylistModel(bus).playlist.tracks
    titles, durations, passes = [], [], []
    bus.register("titles", [tracks.any_element("title")], (), titles.append)
    bus.register("durations", [tracks.any_element("duration")], (), durations.append)
    bus.register("any", [tracks.tree], (), passes.append)
    tracks.set("t1", Track(duration=200, title="Intro"))
    assert (len(titles), len(durations), len(passes)) == (1, 1, 1)
    tracks.set("t1", Track(duration=180, title="Intro"))
    assert (len(titles), len(durations), len(passes)) == (1, 2, 2)
    bus.close()


def test_removal_removes_the_subtree(session):
    bus, counter = session
    tracks = PlaylistModel(bus).playlist.tracks
    tracks.set("t1", Track(duration=1, title="a"))
    tracks.set("t2", Track(duration=2, title="b"))
    tracks.remove("t1")
    assert tracks.get("t1") is None
    assert tracks.get("t2") == Track(duration=2, title="b")


def test_records_list_every_element(session):
    bus, _ = session
    tracks = PlaylistModel(bus).playlist.tracks
    assert tracks.records() == {}
    tracks.set("t2", Track(duration=2, title="b"))
    tracks.set("t1", Track(title="a"))
    tracks.set("t3", Track(duration=3))
    tracks.remove("t3")
    records = tracks.records()
    assert list(records) == ["t1", "t2"]
    assert records == {"t1": Track(duration=0, title="a"), "t2": Track(duration=2, title="b")}


def test_records_inside_contracts_obey_the_read_rules():
    errors = []
    bus = ordo.Bus(schema_file=SCHEMA, on_error=lambda contract, e: errors.append((contract.name, type(e))))
    playlist = PlaylistModel(bus).playlist
    bus.register("total", [playlist.tracks.tree], [playlist.total.keypath],
                 lambda note: playlist.total.set(sum(t.duration for t in playlist.tracks.records().values())))
    bus.register("titles", [playlist.tracks.any_element("title")], (), lambda note: playlist.tracks.records())
    with bus.transaction():
        playlist.tracks.set("t1", Track(duration=200, title="Intro"))
        playlist.tracks.set("t2", Track(duration=95, title="Outro"))
    assert playlist.total.get() == 295
    assert errors == [("titles", ordo.ContractViolation)]
    bus.close()


def test_defaults_and_absent_fields(session):
    bus, _ = session
    model = PlaylistModel(bus)
    assert model.playlist.mode.get() == "list" and model.playlist.mode.default == "list"
    model.playlist.tracks.set("t1", Track(title="only a title"))
    assert model.playlist.tracks.get("t1") == Track(duration=0, title="only a title")
    model.playlist.tracks.set("t1", Track(duration=5))
    assert model.playlist.tracks.get("t1") == Track(duration=5, title=None)


def test_writes_are_typed(session):
    bus, counter = session
    model = PlaylistModel(bus)
    with pytest.raises(ordo.TypeMismatch):
        model.playlist.total.set("5")
    with pytest.raises(ordo.TypeMismatch):
        model.playlist.tracks.set("t1", Track(duration=True))
    model.ui.refresh.touch()
    assert counter(model.ui.refresh.keypath) == 1
