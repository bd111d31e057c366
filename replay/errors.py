"""The replay package's error taxonomy: bad input (the user's), and bugs in a model.

A participant refusing a protocol call is not an error here: it answers with a ``Reply`` that
carries an ``ErrorCode`` (failures come back as data; raising is the caller's choice).
"""

from __future__ import annotations


class ReplayError(Exception):
    """Base class of every error the replay package raises."""


class ScenarioError(ReplayError):
    """A scenario document is invalid: names the path of the offending key or value."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"{path}: {detail}" if path else detail)


class UnknownScenarioError(ReplayError):
    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        self.name = name
        super().__init__(f"unknown scenario {name!r}; known: {', '.join(known)}")


class UnknownVariantError(ReplayError):
    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        self.name = name
        super().__init__(f"unknown variant {name!r}; known: {', '.join(known)}")


class ModelInvariantError(ReplayError):
    """A participant model reached a state its rules forbid: a bug in the model, not input."""
