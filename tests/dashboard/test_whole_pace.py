"""The reads of the whole views (the incident detectors) keep to their share of the time
(``datastore.WHOLE_READ_SHARE``): a tick or a full reload starts none before the pace allows,
and one held back is still read once it does."""

from __future__ import annotations

import time

import pytest

from rolloutscope.dashboard import datastore
from rolloutscope.dashboard.datastore import DataStore


def test_the_pace_waits_nine_times_a_read_at_a_tenth():
    pace = datastore._Pace(0.1)
    assert pace.due()
    pace.took(0.2)
    assert not pace.due()
    time.sleep(1.9)
    assert pace.due()
    pace.took(0.0)
    assert pace.due()


@pytest.fixture
def paced(monkeypatch):
    pace = datastore._Pace(datastore.WHOLE_READ_SHARE)
    monkeypatch.setattr(datastore, "_WHOLE_PACE", pace)
    return pace


def _incident_reads(monkeypatch) -> list[str]:
    reads: list[str] = []
    real = DataStore._read_tokened

    def counted(self, spec, since):
        if spec.name == "incidents":
            reads.append(spec.name)
        return real(self, spec, since)

    monkeypatch.setattr(DataStore, "_read_tokened", counted)
    return reads


def test_a_full_reload_holds_the_incidents_back_until_the_pace_allows(p1_store, paced,
                                                                      monkeypatch):
    data = DataStore(p1_store, live=True)
    assert len(data.frames["incidents"])  # the first read of a run is never held back
    reads = _incident_reads(monkeypatch)
    paced.took(3600.0)  # a read that took an hour: the next in nine hours
    data.refresh(full=True)
    assert reads == []
    assert len(data.frames["incidents"])  # kept, not emptied
    data._read_whole_in_background()
    assert data._whole is None and data._grown  # not started, still due
    paced.took(0.0)
    data.refresh(full=True)
    assert reads == ["incidents"]


def test_a_background_read_starts_once_the_pace_allows(p1_store, paced, monkeypatch):
    data = DataStore(p1_store, live=True)
    reads = _incident_reads(monkeypatch)
    paced.took(3600.0)
    data._read_whole_in_background()
    assert data._whole is None
    paced.took(0.0)
    data._read_whole_in_background()
    data._whole.result(60)
    assert reads == ["incidents"]
    assert data._take_whole() is False  # the same rows: nothing changed
