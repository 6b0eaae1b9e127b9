"""The generated Python accessors of the playlist schema (playlist_model.py,
examples/playlist/python) over ordo.Bus: records written as one transaction's
net changes, element removal, defaults, typed writes (Tests/Codegen/run.sh)."""
import os

import pytest

import ordo
from playlist_model import PlaylistModel, PlaylistModelPlaylistTracksRecord as Track


@pytest.fixture
def bus():
    b = ordo.Bus(schema_file=os.environ["ORDO_SCHEMA"])
    yield b
    b.close()


def test_record_write_is_net_changes(bus):
    tracks = PlaylistModel(bus).playlist.tracks
    titles, durations = [], []
    bus.register("titles", [tracks.any_element("title")], (), titles.append)
    bus.register("durations", [tracks.any_element("duration")], (), durations.append)
    tracks.set("t1", Track(duration=200, title="Intro"))
    assert (len(titles), len(durations)) == (1, 1)
    tracks.set("t1", Track(duration=200, title="Intro"))
    assert (len(titles), len(durations)) == (1, 1)
    tracks.set("t1", Track(duration=180, title="Intro"))
    assert (len(titles), len(durations)) == (1, 2)
    assert tracks.get("t1") == Track(duration=180, title="Intro")


def test_one_transaction_for_the_record(bus):
    tracks = PlaylistModel(bus).playlist.tracks
    txns = []
    bus.register("any", [tracks.tree], (), lambda note: txns.append(note.txn))
    tracks.set("t1", Track(duration=1, title="a"))
    assert len(txns) == 1


def test_removal_removes_the_subtree(bus):
    tracks = PlaylistModel(bus).playlist.tracks
    tracks.set("t1", Track(duration=1, title="a"))
    tracks.remove("t1")
    assert tracks.get("t1") is None
    assert not bus.is_stored("playlist.tracks.t1.title")
    assert not bus.is_stored("playlist.tracks.t1.duration")


def test_defaults_and_absent_fields(bus):
    model = PlaylistModel(bus)
    assert model.playlist.mode.get() == "list" and model.playlist.mode.default == "list"
    model.playlist.tracks.set("t1", Track(title="only a title"))
    assert model.playlist.tracks.get("t1") == Track(duration=0, title="only a title")
    model.playlist.tracks.set("t1", Track(duration=5))
    assert model.playlist.tracks.get("t1") == Track(duration=5, title=None)
    assert not bus.is_stored("playlist.tracks.t1.title")


def test_writes_are_typed(bus):
    model = PlaylistModel(bus)
    with pytest.raises(ordo.TypeMismatch):
        model.playlist.total.set("5")
    with pytest.raises(ordo.TypeMismatch):
        model.playlist.tracks.set("t1", Track(duration=True))
    model.ui.refresh.touch()
    assert bus.counter(model.ui.refresh.keypath) == 1
