"""What handlers raise, and what ends a worker.

A handler fails an attempt by raising :class:`TaskFailure` (or its two spellings
:class:`RetryableError` / :class:`NonRetryableError`): the server retries a retryable
failure under the step's retry policy and fails the step at once on a non-retryable one.
Any other exception is reported as ``UNHANDLED_EXCEPTION`` (retryable) with its traceback.
"""

from __future__ import annotations

from typing import Any

#: Code of a failure raised as any exception other than :class:`TaskFailure` (retryable).
UNHANDLED_EXCEPTION = "UNHANDLED_EXCEPTION"
#: Code of an attempt the server cancelled (not retryable).
CANCELLED = "CANCELLED"
#: Code of a task this worker has no handler for (retryable: another worker may have one).
TASK_NOT_REGISTERED = "TASK_NOT_REGISTERED"
#: Code of a task delivered without a free credit (retryable).
WORKER_OVER_CAPACITY = "WORKER_OVER_CAPACITY"


class TaskFailure(Exception):
    """Raise from a handler to report ``Fail{error}`` with your own code.

    ``retryable`` decides whether the server retries the attempt; ``details`` is any JSON
    value recorded with the failure."""

    def __init__(self, code: str, message: str = "", retryable: bool = False, details: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.details = details


class RetryableError(TaskFailure):
    """A failure the server retries (a timeout of a downstream service, a lock)."""

    def __init__(self, code: str, message: str = "", details: Any = None) -> None:
        super().__init__(code, message, retryable=True, details=details)


class NonRetryableError(TaskFailure):
    """A failure no retry can fix (a declined card, invalid input): the step fails at once."""

    def __init__(self, code: str, message: str = "", details: Any = None) -> None:
        super().__init__(code, message, retryable=False, details=details)


class WorkerRejected(Exception):
    """The server refused the session for a reason a reconnect cannot fix
    (``UNAUTHENTICATED``, ``PERMISSION_DENIED``, ``INVALID_ARGUMENT``, ``UNIMPLEMENTED``).
    Its text starts with the status code name, e.g. ``PERMISSION_DENIED: ...``."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class DrainTimeout(Exception):
    """Shutdown did not finish within the drain timeout."""


class ProtocolError(Exception):
    """The server broke the session protocol (e.g. no ``Welcome`` first); reconnects."""
