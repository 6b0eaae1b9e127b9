"""SPEC §14 through the ctypes binding: ordo.Bus(schema=...)."""
import json
import os

import pytest

import ordo

SCHEMA = {"ordo-schema": 1, "keys": {
    "playlist.title": {"type": "string", "default": "", "max-length": 8},
    "playlist.tracks.*.duration": {"type": "int64", "min": 0, "default": 0},
    "playlist.mode": {"type": "string", "choices": ["list", "grid"], "default": "list"},
    "ui.refresh": {"type": "event"}}}


def test_schema_from_text_dict_and_file(library, tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    for kwargs in ({"schema": SCHEMA}, {"schema": json.dumps(SCHEMA)}, {"schema_file": str(path)}):
        with ordo.Bus(library, **kwargs) as bus:
            assert json.loads(bus.schema)["keys"]["playlist.mode"]["choices"] == ["list", "grid"]
    with ordo.Bus(library) as bus:
        assert bus.schema is None
    with pytest.raises(ordo.Schema, match='schema entry "a": unknown type "float"'):
        ordo.Bus(library, schema={"ordo-schema": 1, "keys": {"a": {"type": "float"}}})
    with pytest.raises(ordo.InvalidArgument, match="nope.json"):
        ordo.Bus(library, schema_file=str(tmp_path / "nope.json"))
    with pytest.raises(ordo.InvalidArgument, match="not both"):
        ordo.Bus(library, schema=SCHEMA, schema_file=str(path))


def test_enforced_with_defaults(library):
    with ordo.Bus(library, schema=SCHEMA) as bus:
        assert bus.get("playlist.mode") == "list"
        assert not bus.is_stored("playlist.mode")
        assert bus.get("playlist.tracks.t1.duration") == 0
        with pytest.raises(ordo.Schema, match='did you mean "playlist.title"'):
            with bus.transaction():
                bus.set("playlist.titel", "x")
        with pytest.raises(ordo.TypeMismatch):
            with bus.transaction():
                bus.set("playlist.mode", 3)
        with pytest.raises(ordo.Schema, match="not one of the choices"):
            with bus.transaction():
                bus.set("playlist.mode", "tile")
        with pytest.raises(ordo.Schema, match="matches no keypath declared"):
            bus.register("typo", reads=["playlist.trakcs.**"], callback=lambda note: None)
        with bus.transaction():
            bus.set("playlist.mode", "grid")
            bus.touch("ui.refresh")
        assert bus.get("playlist.mode") == "grid"
        assert bus.is_stored("playlist.mode")
        assert bus.counter("playlist.titel") == 0


def test_client_over_a_schema(env):
    """The D-Bus client against ordod --schema: the Schema property, refusals
    as ordo.Schema / ordo.TypeMismatch, and Get's defaults."""
    path = os.path.join(env.dir, "schema.json")
    with open(path, "w") as f:
        json.dump(SCHEMA, f)
    env.stop_ordod()
    env.start_ordod(["--schema", path])
    with ordo.Client(env.address, timeout=10) as c:
        assert json.loads(c.schema)["keys"]["playlist.mode"]["default"] == "list"
        assert c.get("playlist.mode").value == "list"
        with pytest.raises(ordo.Schema, match='did you mean "playlist.title"'):
            c.commit(set={"playlist.titel": "x"})
        with pytest.raises(ordo.TypeMismatch):
            c.commit(set={"playlist.mode": 3})
        assert c.commit(set={"playlist.mode": "grid"}) == 1
    env.stop_ordod()
    env.start_ordod([])
    with ordo.Client(env.address, timeout=10) as c:
        assert c.schema is None
