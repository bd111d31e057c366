"""Stand-in for NVIDIA-NeMo/Gym ``nemo_gym/_checkpoint/errors.py`` at 7f40a59: the control
plane's refusals, each with an HTTP status and a machine-readable ``code``."""

from __future__ import annotations

from typing import ClassVar


class ControlError(Exception):
    status_code: ClassVar[int] = 409
    code: ClassVar[str] = "checkpoint_error"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class StaleCheckpointError(ControlError):
    code = "stale_checkpoint"


class CheckpointConflictError(ControlError):
    code = "checkpoint_conflict"


class InvalidPhaseError(ControlError):
    code = "invalid_phase"


class DeadlineExceededError(ControlError):
    code = "deadline_exceeded"


class StaleAttemptError(ControlError):
    code = "stale_attempt"


class AdmissionClosedError(ControlError):
    code = "admission_closed"


class RestartInScopeError(ControlError):
    code = "restart_in_scope"
