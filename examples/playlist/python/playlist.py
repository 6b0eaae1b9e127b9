#!/usr/bin/env python3
"""The playlist model (examples/schema/playlist.json) through its generated
accessors (playlist_model.py, made by `ordoctl codegen --python`), in-process
over ordo.Bus (libordo.so through ctypes; ORDO_LIBRARY names it). The same
accessors work over ordo.Client against `ordod --schema`.

    python3 playlist.py ../../schema/playlist.json
"""
import os
import sys

import ordo
from playlist_model import PlaylistModel, PlaylistModelPlaylistTracksRecord as Track

here = os.path.dirname(os.path.abspath(__file__))
schema = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "schema", "playlist.json")
bus = ordo.Bus(schema_file=schema)
model = PlaylistModel(bus)
playlist = model.playlist


# Computed data: the total of the tracks' durations (reading records needs
# their whole elements in the read set).
@bus.contract("total", reads=[playlist.tracks.tree], writes=[playlist.total.keypath])
def total(note):
    playlist.total.set(sum(t.duration for t in playlist.tracks.records().values()))


# A view of the titles: called only when a title changes.
title_views = []
bus.register("titles", [playlist.tracks.any_element("title")], (), title_views.append)

print(f"before any write: total = {playlist.total.get()}, mode = {playlist.mode.get()}")
with bus.transaction():
    playlist.title.set("Road trip")
    playlist.tracks.set("t1", Track(duration=200, title="Intro"))
    playlist.tracks.set("t2", Track(duration=340, title="Drive"))
    playlist.tracks.set("t3", Track(duration=95, title="Outro"))
    playlist.selection.set("t2")
print(f"after adding 3 tracks: total = {playlist.total.get()}, title views = {len(title_views)}")

drive = playlist.tracks.get("t2")
drive.duration = 300
playlist.tracks.set("t2", drive)
print(f"after shortening t2: total = {playlist.total.get()}, title views = {len(title_views)}")

playlist.tracks.remove("t3")
print(f"after removing t3: tracks = {','.join(playlist.tracks.records())}, total = {playlist.total.get()}")
print(f"selected: {playlist.tracks.get(playlist.selection.get()).title}")
model.ui.refresh.touch()
print(f"refresh counter = {bus.counter(model.ui.refresh.keypath)}")
bus.close()
