"""`tracking.clients`: the one list of trackers (`settings.TRACKERS`) names a client of
this module for each, and `make_tracker` makes that client."""

import pytest

from alf_async.tracking import clients
from alf_async.tracking.settings import TRACKERS, TrackerSettings


def test_every_tracker_but_none_has_its_client_and_no_client_is_left_unnamed():
    named = {kind.client for kind in TRACKERS.values() if kind is not None}
    assert named == set(clients.CLIENTS)
    for kind in filter(None, TRACKERS.values()):
        assert clients.CLIENTS[kind.client].__module__ == clients.__name__


@pytest.mark.parametrize("kind", sorted(k for k, v in TRACKERS.items() if v is not None))
def test_make_tracker_makes_the_client_of_the_kind_asked(kind, monkeypatch):
    made = []
    for name in clients.CLIENTS:
        monkeypatch.setitem(clients.CLIENTS, name,
                            lambda settings, name=name: made.append((name, settings)) or name)
    settings = TrackerSettings(kind=kind)
    assert clients.make_tracker(settings) == TRACKERS[kind].client
    assert made == [(TRACKERS[kind].client, settings)]
