"""What an import read, wrote and could not use: the summary the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_QUOTED_BAD = 20  # bad records kept with their location; the rest are only counted


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A line or record that could not be used, and where it is (line 0: the whole file)."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.reason}"


@dataclass
class ImportReport:
    kind: str
    run_id: str
    files: list[str] = field(default_factory=list)
    lines_read: int = 0
    spans: int = 0
    events: int = 0
    metrics: int = 0
    logs: int = 0
    unknown_lines: int = 0
    bad_count: int = 0
    bad: list[BadRecord] = field(default_factory=list)
    recognised: dict[str, int] = field(default_factory=dict)  # line or record kind -> count

    def add_bad(self, file: str, line: int, reason: str) -> None:
        self.bad_count += 1
        if len(self.bad) < MAX_QUOTED_BAD:
            self.bad.append(BadRecord(file, line, reason))

    def count(self, kind: str) -> None:
        self.recognised[kind] = self.recognised.get(kind, 0) + 1

    def summary(self, *, quote: int = 5) -> str:
        """A few lines for a terminal: totals, then the first ``quote`` bad records."""
        lines = [
            f"imported {self.kind} into run {self.run_id} from {len(self.files)} file(s)",
            f"  lines/records read {self.lines_read:,}; written: spans {self.spans:,}, "
            f"events {self.events:,}, metrics {self.metrics:,}, log lines {self.logs:,}",
            f"  unknown lines {self.unknown_lines:,}; bad records {self.bad_count:,}",
        ]
        if self.recognised:
            kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(self.recognised.items()))
            lines.append(f"  recognised: {kinds}")
        for bad in self.bad[:quote]:
            lines.append(f"  bad: {bad}")
        if self.bad_count > quote:
            lines.append(f"  … and {self.bad_count - quote:,} more bad record(s)")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "run_id": self.run_id, "files": list(self.files),
                "lines_read": self.lines_read, "spans": self.spans, "events": self.events,
                "metrics": self.metrics, "logs": self.logs, "unknown_lines": self.unknown_lines,
                "bad_count": self.bad_count, "bad": [str(b) for b in self.bad],
                "recognised": dict(self.recognised)}
