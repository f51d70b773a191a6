"""What a handler sees of its task attempt: input, identity, deadline, trace context,
heartbeats and cancellation."""

from __future__ import annotations

import asyncio
import datetime
import threading
from typing import Any, Callable, Optional

from .values import Json, from_proto_value

#: Sends a heartbeat for a token with details; thread-safe (the worker's).
HeartbeatSender = Callable[[str, Json], None]


class TaskContext:
    """One task attempt, as seen by its handler.

    Attributes: ``input`` (JSON), ``token``, ``execution_id``, ``workflow``, ``step``,
    ``task``, ``version``, ``idempotency_key`` (the same for every attempt of the step: use
    it to make side effects idempotent), ``attempt`` (1, 2, ...), ``redelivery`` (the
    attempt was handed out before, e.g. to a worker that died), ``deadline`` (UTC datetime
    or None), ``heartbeat_timeout`` (seconds or None), ``traceparent`` / ``tracestate``
    (W3C trace context of the step attempt, empty when untraced).

    Cancellation is cooperative: when the server cancels the attempt, ``cancelled``
    becomes True, :meth:`wait` returns early and :attr:`cancel_event` is set (an
    ``asyncio.Event`` for coroutine handlers). A coroutine handler is in addition
    cancelled (``CancelledError`` at its next ``await``) after the worker's
    ``cancel_grace``. However the handler ends, the worker reports
    ``Fail{code: "CANCELLED", retryable: false}``.
    """

    def __init__(self, task: Any, heartbeat: HeartbeatSender, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        self.token: str = task.token
        self.execution_id: str = task.execution_id
        self.workflow: str = task.workflow
        self.step: str = task.step
        self.task: str = task.task
        self.version: str = task.version
        self.input: Json = from_proto_value(task.input if task.HasField("input") else None)
        self.idempotency_key: str = task.idempotency_key
        self.attempt: int = task.attempt
        self.redelivery: bool = task.redelivery
        self.deadline: Optional[datetime.datetime] = (
            task.deadline.ToDatetime(tzinfo=datetime.timezone.utc) if task.HasField("deadline") else None
        )
        self.heartbeat_timeout: Optional[float] = (
            task.heartbeat_timeout.ToTimedelta().total_seconds() if task.HasField("heartbeat_timeout") else None
        )
        self.traceparent: str = task.trace_context.traceparent
        self.tracestate: str = task.trace_context.tracestate
        self.cancel_reason: Optional[str] = None
        self._cancelled = threading.Event()
        self._heartbeat = heartbeat
        self._loop = loop
        self._cancel_event: Optional[asyncio.Event] = None

    @property
    def cancelled(self) -> bool:
        """True once the server sent ``Cancel`` for this attempt (or the worker stopped)."""
        return self._cancelled.is_set()

    @property
    def cancel_event(self) -> asyncio.Event:
        """An ``asyncio.Event`` set on cancellation; for coroutine handlers only (it
        belongs to the worker's event loop)."""
        if self._cancel_event is None:
            self._cancel_event = asyncio.Event()
            if self.cancelled:
                self._cancel_event.set()
        return self._cancel_event

    def wait(self, seconds: float) -> bool:
        """Sleeps up to ``seconds`` (thread handlers); returns True early when cancelled."""
        return self._cancelled.wait(seconds)

    async def sleep(self, seconds: float) -> bool:
        """Sleeps up to ``seconds`` (coroutine handlers); returns True early when cancelled."""
        try:
            await asyncio.wait_for(self.cancel_event.wait(), seconds)
            return True
        except asyncio.TimeoutError:
            return False

    def heartbeat(self, details: Json = None) -> None:
        """Sends ``Heartbeat{tokens: [this task], details}`` at once (the worker also
        heartbeats every running task automatically). ``details`` (any JSON, e.g. progress)
        is recorded by the server; None keeps the attempt alive without details.
        Thread-safe; dropped while disconnected."""
        self._heartbeat(self.token, details)

    def _cancel(self, reason: str) -> None:
        """Marks the attempt cancelled (event-loop thread)."""
        self.cancel_reason = reason or "cancelled by the server"
        self._cancelled.set()
        if self._cancel_event is not None:
            self._cancel_event.set()
