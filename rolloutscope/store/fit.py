"""What each column of the run store can hold: the rules every value passes before it joins a
commit, in one place.

A value that decodes but does not fit its column (a uint64 time past 2^63 − 1 ns, a checkpoint
id sent as a list, an attempt of 2^40) would make DuckDB refuse the whole transaction it is in,
and with it every other sender's rows in that group commit. So ``RowBatch`` checks each value as
it is added and raises ``ColumnFitError`` naming it; the OTLP decoder and the in-process
exporter reject that one item (span, data point, log record) and keep the rest, the importers
report a bad line. A value that can be stored without losing anything is coerced instead, and
the coercion is reported.

The rules (``PROMOTED`` below lists the promoted attributes; a compiled decoder must apply the
same). For each column: its type, what is accepted, and what is coerced (and reported):

- every ``*_ns`` time (BIGINT): an int in [-2^63, 2^63 - 1]; nothing coerced. OTLP's times are
  uint64, so one past 2^63 - 1 (after 2262-04-11) is refused.
- ``run_id``, ``service``, ``rollout_id``, ``checkpoint_id``, ``participant_kind`` and the open
  markers' ids (VARCHAR): a str; an int is coerced to its decimal text.
- ``attempt``, ``shard_idx`` (INTEGER): an int in [-2^31, 2^31 - 1]; a finite float without a
  fraction, or decimal text, is coerced when in range.
- ``prompt_idx``, metric ``step`` (BIGINT): as INTEGER, in [-2^63, 2^63 - 1].
- other columns (``RowBatch.add_row``): VARCHAR takes a str, BIGINT / INTEGER an int in range,
  DOUBLE an int or float (NaN and +-inf included; an int is coerced to float); nothing else.

None is NULL and always fits. ``bool`` is never an integer here (``True`` is not attempt 1).
Ints of other libraries (numpy) count as ints. Anything else is refused: a list, a float with a
fraction, a value out of range, text that is not a decimal integer, text with lone surrogates.

Copied attributes (``COPIED`` below) are another kind: the attributes the views filter, group
and join on (a deadline's kind, a try's outcome, an HTTP status), copied to typed columns of
spans so that no view parses the attributes JSON of every span of a name to read them. A copy
never refuses or coerces anything: the JSON keeps the value as sent, and the column holds it
as the JSON holds it when that is of the column's kind, else NULL. Of a column's keys the first
one present is copied, the next ones only when it is absent or null (in the JSON: None, and the
NaN and infinities it writes as null):

- a text column takes a JSON string: a str, or bytes (the JSON holds their hex digits);
- ``http_status`` (INTEGER) takes a JSON integer in [-2^31, 2^31 - 1], or a JSON string of one
  in decimal (ASCII digits after an optional sign, nothing around them); anything else (a bool,
  a float, text like "200.0"): NULL;
- ``server_authority`` takes ``http.host`` when present (a string, else NULL), else
  ``server.address`` (a string) and ``server.port`` (an integer or a string) joined by ':';
  either missing: NULL.

A value of a type JSON has no kind for (a Decimal, a datetime, a numpy int) is copied as the
JSON text holds it (``rows.attributes_json`` writes it as orjson or ``str`` renders it).

A compiled decoder must copy the same, and ``schema.copy_sql`` writes the same rules in SQL over
the JSON, for files written before the columns existed (tests/store/test_copied_columns.py
holds them to one result).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

from rolloutscope.vocabulary import Attr, ResourceAttr

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_NS = INT64_MAX  # 2262-04-11T23:47:16.854775807Z, the latest time a BIGINT of ns holds
_RANGES = {"INTEGER": (INT32_MIN, INT32_MAX), "BIGINT": (INT64_MIN, INT64_MAX)}


class ColumnFitError(ValueError):
    """A value that its column cannot hold; the item carrying it cannot be stored."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Rule:
    """How one promoted attribute fits its column."""

    key: str
    column: str
    sql: str  # VARCHAR | INTEGER | BIGINT
    # the key's name in the compiled decoder's and encoder's key enums (K_...), which index the
    # keys in this table's order; "": the compiled code does not look it up
    index: str = ""
    # where it is read: "span" (a span's or an event's attributes; the run id also on the
    # resource), "resource" (the resource only: the decoder reads it, the encoder gets it whole)
    on: str = "span"


# Attributes promoted to a column of their own, with that column: the one table the row builder
# (rows.promoted), the compiled decoder and encoder (their key lists and K_ enums), the store's
# schema and the views are held to (tests/store/test_promoted_keys.py). A span's rollout id is
# ROLLOUT_ID, else EPISODE_ROLLOUT_ID (and likewise for the attempt); only the one used is fitted.
PROMOTED: tuple[Rule, ...] = (
    Rule(Attr.ROLLOUT_ID, "rollout_id", "VARCHAR", "K_ROLLOUT"),
    Rule(Attr.EPISODE_ROLLOUT_ID, "rollout_id", "VARCHAR", "K_EP_ROLLOUT"),
    Rule(Attr.RL_ATTEMPT, "attempt", "INTEGER", "K_ATTEMPT"),
    Rule(Attr.EPISODE_ATTEMPT, "attempt", "INTEGER", "K_EP_ATTEMPT"),
    Rule(Attr.PROMPT_IDX, "prompt_idx", "BIGINT", "K_PROMPT"),
    Rule(Attr.CHECKPOINT_ID, "checkpoint_id", "VARCHAR", "K_CHECKPOINT"),
    Rule(Attr.CK_PARTICIPANT_KIND, "participant_kind", "VARCHAR", "K_KIND"),
    Rule(Attr.SHARD_IDX, "shard_idx", "INTEGER", "K_SHARD"),
    Rule(Attr.RUN_ID, "run_id", "VARCHAR", "K_RUN"),  # on the resource, or on a span
    Rule(Attr.OPEN_MARKER_FOR, "span_id", "VARCHAR", "K_MARKER_FOR"),
    Rule(ResourceAttr.SERVICE_NAME, "service", "VARCHAR", "K_SERVICE", on="resource"),
    Rule(Attr.OPEN_MARKER_PARENT, "parent_span_id", "VARCHAR"),
    Rule(Attr.METRIC_STEP, "step", "BIGINT"),
)
RULE_OF: dict[str, Rule] = {rule.key: rule for rule in PROMOTED}
# The keys the compiled decoder looks up, in its order (collectors/otlp/fastdecode.py sets them)
INDEXED_KEYS: tuple[str, ...] = tuple(rule.key for rule in PROMOTED if rule.index)
# Every span key that changes a span's row beyond its attributes JSON and the copied columns,
# in the compiled encoder's order (collectors/exporter.py); a span with none of them is one row
# of plain columns.
ROW_KEYS: tuple[str, ...] = tuple(rule.key for rule in PROMOTED
                                  if rule.index and rule.on == "span")


@dataclass(frozen=True)
class Copy:
    """A span column that copies an attribute (see the module docstring)."""

    column: str
    sql: str  # VARCHAR | INTEGER
    keys: tuple[str, ...]  # the first one present (not null) is copied


# In the order of the spans table's columns (schema.py). What each is read for: the deadline's
# and the try's outcome and failure (deadlines, rollout_attempts, the incidents over them), the
# HTTP request a CLIENT or SERVER span records (http_requests, gym_attempts, model_calls).
# Each column costs every span stored (DuckDB appends and compresses a text column of NULLs at
# ~800 instructions a row), so a key is copied only where reading it from the JSON cost the
# incident views measurably: http.request.method and error.type did not (the views read them
# from the JSON on the few rows that pass the status and URL filters first).
COPIED: tuple[Copy, ...] = (
    Copy("deadline_kind", "VARCHAR", (Attr.DEADLINE_KIND,)),
    Copy("deadline_outcome", "VARCHAR", (Attr.DEADLINE_OUTCOME,)),
    Copy("rollout_outcome", "VARCHAR", (Attr.ROLLOUT_OUTCOME,)),
    Copy("failure_class", "VARCHAR", (Attr.FAILURE_CLASS,)),
    Copy("failure_reason", "VARCHAR", (Attr.FAILURE_REASON,)),
    Copy("http_status", "INTEGER", (Attr.HTTP_STATUS, Attr.HTTP_STATUS_OLD)),
    Copy("url", "VARCHAR", (Attr.URL_FULL, Attr.HTTP_URL_OLD)),
    # http.host, else server.address ':' server.port (both, or NULL)
    Copy("server_authority", "VARCHAR", (Attr.HTTP_HOST_OLD, Attr.SERVER_ADDRESS,
                                         Attr.SERVER_PORT)),
)
COPIED_KEYS: frozenset[str] = frozenset(key for copy in COPIED for key in copy.keys)


def is_null(value: Any) -> bool:
    """Whether the attributes JSON holds ``value`` as null: a copy takes it for absent."""
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def copy_text(value: Any) -> str | None:
    """A text column's copy of a value: the JSON string it is stored as, or None. A subclass
    of str (an enum's member) is its text, bytes their hex digits, as the JSON writes them."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return None


def copy_int(value: Any) -> int | None:
    """``http_status``'s copy of a value: an INTEGER, or None."""
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            text = copy_text(value)
            return None if text is None else _decimal_int(text)
        value = int.__index__(value)
    return value if INT32_MIN <= value <= INT32_MAX else None


def _decimal_int(text: str) -> int | None:
    if not text.isascii() or not (text[1:] if text[:1] in "+-" else text).isdigit():
        return None
    number = int(text)
    return number if INT32_MIN <= number <= INT32_MAX else None


def copy_authority(host: Any, address: Any, port: Any) -> str | None:
    """``server_authority``'s copy of http.host, server.address and server.port."""
    if not is_null(host):
        return copy_text(host)
    address = copy_text(address)
    if isinstance(port, int) and not isinstance(port, bool):
        port = str(int.__index__(port))
    else:
        port = copy_text(port)
    return None if address is None or port is None else f"{address}:{port}"


def describe(value: Any) -> str:
    """A value as a message quotes it: short, with its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _refuse(key: str, value: Any, column: str, sql: str, why: str) -> ColumnFitError:
    return ColumnFitError(f"attribute {key!r} = {describe(value)} does not fit column "
                          f"{column} ({sql}): {why}")


def fit_text(value: Any, key: str, column: str, notes: list[str] | None) -> str | None:
    """A promoted text value (ids, kinds)."""
    if value is None or type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    if not isinstance(value, bool):
        try:
            number = operator.index(value)
        except TypeError:
            pass
        else:
            if notes is not None:
                notes.append(f"attribute {key!r} = {describe(value)} stored as text "
                              f"{str(number)!r}")
            return str(number)
    raise _refuse(key, value, column, "VARCHAR", "send a string")


def fit_int(value: Any, key: str, column: str, sql: str, notes: list[str] | None) -> int | None:
    """A promoted integer value, in the range of ``sql`` (INTEGER or BIGINT)."""
    if value is None:
        return None
    lo, hi = _RANGES[sql]
    number: int | None = None
    coerced = False
    if type(value) is int:
        number = value
    elif isinstance(value, bool):
        raise _refuse(key, value, column, sql, "a boolean is not an integer")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _refuse(key, value, column, sql, "not a finite number")
        if not value.is_integer():
            raise _refuse(key, value, column, sql, "has a fraction")
        number, coerced = int(value), True
    elif isinstance(value, str):
        text = value.strip()
        if not (text.lstrip("+-").isdigit() and text.isascii()):
            raise _refuse(key, value, column, sql, "not a decimal integer")
        number, coerced = int(text), True
    else:
        try:
            number = operator.index(value)
        except TypeError:
            raise _refuse(key, value, column, sql, "not an integer") from None
    if not lo <= number <= hi:
        raise _refuse(key, value, column, sql, f"out of range {lo}..{hi}")
    if coerced and notes is not None:
        notes.append(f"attribute {key!r} = {describe(value)} stored as {number}")
    return number


def time_problem(value: Any, what: str) -> str | None:
    """Why ``value`` cannot be a ``*_ns`` time, or None."""
    if type(value) is not int:
        if isinstance(value, bool) or not _is_int(value):
            return f"{what} {describe(value)} is not an integer number of nanoseconds"
        value = operator.index(value)
    if value > MAX_NS:
        return (f"{what} {value} is past the latest time the store holds "
                f"({MAX_NS} ns, 2262-04-11)")
    if value < INT64_MIN:
        return f"{what} {value} is before the earliest time the store holds ({INT64_MIN} ns)"
    return None


def check_time(value: Any, what: str) -> None:
    problem = time_problem(value, what)
    if problem is not None:
        raise ColumnFitError(problem)


def fits_time(value: int) -> bool:
    """The fast check for an int known to be an int (OTLP's fixed64 times)."""
    return INT64_MIN <= value <= MAX_NS


def _is_int(value: Any) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def valid_text(value: str) -> bool:
    """False for text with lone surrogates, which no UTF-8 column can hold."""
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


# -- plain columns (``RowBatch.add_row``) -------------------------------------------------
def fit_column(table: str, column: str, sql: str, value: Any) -> Any:
    """``value`` as column ``column`` of type ``sql`` stores it, or ``ColumnFitError``."""
    if value is None:
        return None
    if sql == "VARCHAR":
        if isinstance(value, str) and valid_text(value):
            return value if type(value) is str else str(value)
        raise ColumnFitError(f"{table}.{column} (VARCHAR) cannot hold {describe(value)}")
    if sql == "DOUBLE":
        if isinstance(value, float) and type(value) is float:
            return value
        if not isinstance(value, bool) and isinstance(value, int | float):
            try:
                return float(value)
            except OverflowError:
                pass
        raise ColumnFitError(f"{table}.{column} (DOUBLE) cannot hold {describe(value)}")
    lo, hi = _RANGES[sql]
    if isinstance(value, bool) or not _is_int(value):
        raise ColumnFitError(f"{table}.{column} ({sql}) cannot hold {describe(value)}")
    number = operator.index(value)
    if not lo <= number <= hi:
        raise ColumnFitError(f"{table}.{column} ({sql}) cannot hold {number}: out of range "
                             f"{lo}..{hi}")
    return number


def fit_attribute(key: str, value: Any, notes: list[str] | None) -> Any:
    """A promoted attribute's value as its column (``RULE_OF[key]``) stores it."""
    rule = RULE_OF[key]
    if rule.sql == "VARCHAR":
        return fit_text(value, key, rule.column, notes)
    return fit_int(value, key, rule.column, rule.sql, notes)
