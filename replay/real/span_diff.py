"""Where two replays of one scenario part ways: the first span (or event) that differs.

Spans are compared by what they say, not by their ids (a different participant may emit a
different number of spans, which shifts every id after it): in time order, by start, name and
attributes; the first mismatch is reported as the span's name, its start in run seconds, and
the field that differs (an attribute, the end, the status) or ``missing`` / ``extra``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from rolloutscope.replay.real.records import SpanDifference
from rolloutscope.replay.telemetry import VIRTUAL_EPOCH_NS
from rolloutscope.store import RunStore
from rolloutscope.vocabulary import Attr

_SPANS = ("SELECT start_ns, name, end_ns, status_code, attributes FROM spans WHERE run_id = ? "
          "ORDER BY start_ns, name, attributes, end_ns")
_EVENTS = ("SELECT ts_ns, span_name || ' / ' || name, NULL, NULL, attributes FROM all_events "
           "WHERE run_id = ? ORDER BY ts_ns, span_name, name, attributes")


def _rows(store: RunStore, run_id: str, sql: str) -> Iterator[tuple[Any, ...]]:
    for start, name, end, status, attributes in store.query(sql, [run_id]):
        attrs = json.loads(attributes) if attributes else {}
        attrs.pop("rolloutscope.replay.scenario", None)
        yield int(start), str(name), end, status, attrs


_SUBJECT_KEYS = ((Attr.SHARD_IDX, "shard"), (Attr.FLEET_STATE, ""),
                 (Attr.ROLLOUT_ID, "rollout"), (Attr.RL_ATTEMPT, "try"),
                 (Attr.CHECKPOINT_ID, "checkpoint"), (Attr.CK_PARTICIPANT_KIND, ""))


def _subject(attrs: dict[str, Any]) -> str:
    parts = []
    for key, label in _SUBJECT_KEYS:
        if key in attrs:
            parts.append(f"{label} {attrs[key]}".strip())
    return ", ".join(parts)


def _seconds(ns: Any) -> float | None:
    return None if ns is None else (int(ns) - VIRTUAL_EPOCH_NS) / 1e9


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _first(reference: list[tuple], plugged: list[tuple]) -> SpanDifference | None:
    i = j = 0
    while i < len(reference) or j < len(plugged):
        a = reference[i] if i < len(reference) else None
        b = plugged[j] if j < len(plugged) else None
        if a is not None and b is not None and a[:2] == b[:2]:
            for field, x, y in (("end_s", _seconds(a[2]), _seconds(b[2])),
                                ("status", a[3], b[3])):
                if x != y:
                    return SpanDifference(at_s=(a[0] - VIRTUAL_EPOCH_NS) / 1e9, span=a[1],
                                          field=field, reference=_text(x), plugged=_text(y),
                                          subject=_subject(a[4]))
            if a[4] != b[4]:
                key = next(k for k in sorted(set(a[4]) | set(b[4]))
                           if a[4].get(k) != b[4].get(k))
                return SpanDifference(at_s=(a[0] - VIRTUAL_EPOCH_NS) / 1e9, span=a[1],
                                      field=key, reference=_text(a[4].get(key)),
                                      plugged=_text(b[4].get(key)), subject=_subject(a[4]))
            i, j = i + 1, j + 1
            continue
        if b is None or (a is not None and a[:2] < b[:2]):
            assert a is not None
            return SpanDifference(at_s=(a[0] - VIRTUAL_EPOCH_NS) / 1e9, span=a[1],
                                  field="missing", reference="present", plugged=None,
                                  subject=_subject(a[4]))
        return SpanDifference(at_s=(b[0] - VIRTUAL_EPOCH_NS) / 1e9, span=b[1], field="extra",
                              reference=None, plugged="present", subject=_subject(b[4]))
    return None


def first_difference(reference: RunStore, reference_run: str, plugged: RunStore,
                     plugged_run: str) -> SpanDifference | None:
    """The first span, then the first event, where ``plugged_run`` differs from
    ``reference_run``; None when they say the same."""
    for sql in (_SPANS, _EVENTS):
        found = _first(list(_rows(reference, reference_run, sql)),
                       list(_rows(plugged, plugged_run, sql)))
        if found is not None:
            return found
    return None
