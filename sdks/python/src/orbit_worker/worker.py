"""The worker: one ``orbit.v1.WorkerService/Session`` stream at a time, reconnecting across
one or several frontends.

The protocol as implemented (the same as the Rust ``orbit-worker`` crate):

1. Connect, open ``Session``, send ``Hello{worker_id, runtime, sdk, tasks,
   max_concurrency, labels}``; the first server message must be ``Welcome`` (its
   ``heartbeat_interval`` is used; its warnings are logged).
2. At the start of every stream: ``Drain{}`` first if shutting down, then every result
   still in the outbox again, then ``Credits{n}`` for the free slots
   (``max_concurrency - running - granted but unused``; credits are per stream). The
   concurrency limit is thus enforced by the server, which never sends more tasks than
   credits.
3. Each ``Task`` uses one credit and runs its handler (looked up by task name and
   version). A task without a credit fails with ``WORKER_OVER_CAPACITY``, one without a
   handler with ``TASK_NOT_REGISTERED`` (both retryable).
4. A returned value becomes ``Complete{token, output}``; a raised ``TaskFailure`` becomes
   ``Fail{token, error}``; any other exception ``Fail{code: "UNHANDLED_EXCEPTION",
   retryable: true}`` with the traceback in ``details``. Each result goes into the outbox,
   is sent, and the freed slot is granted again (not while draining).
5. A result leaves the outbox when ``Ack{token}`` arrives; after a reconnect the outbox is
   sent again (results are token-addressed; the server ignores duplicates).
6. Right after ``welcome`` and then every ``heartbeat_interval``: ``Heartbeat{tokens:
   <running tasks and unacknowledged results>, complete: true}`` (after a restart under
   the same worker id, the server redelivers at once what the previous process left).
   ``ctx.heartbeat(details)`` sends one for its task at once.
7. ``Cancel{token, reason}`` sets ``ctx.cancelled`` / ``ctx.cancel_event``; a coroutine
   handler is also cancelled after ``cancel_grace``, a thread handler must notice. Either
   way the worker reports ``Fail{code: "CANCELLED", retryable: false}`` when it ends.
8. ``Ping`` is not answered (``worker.proto``: the worker does not answer it).
9. Shutdown (SIGTERM/SIGINT with :meth:`Worker.run_sync`, or the ``shutdown`` event):
   ``Drain{}``, no more credits, finish running tasks, wait for their acks, then
   half-close the stream. After ``drain_timeout`` the remaining tasks are abandoned
   (:class:`DrainTimeout`).
10. Any broken connection or stream reconnects, to the next address of the list, after a
    capped, jittered exponential backoff; ``INVALID_ARGUMENT``, ``PERMISSION_DENIED``,
    ``UNAUTHENTICATED`` and ``UNIMPLEMENTED`` end ``run`` with :class:`WorkerRejected`:
    the server refused this worker's credentials or its ``Hello`` (a task outside its
    identity's patterns), and the same request would be refused again.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import socket
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Tuple, Union

import grpc

from . import tracing
from ._proto import common_pb2, worker_pb2, worker_pb2_grpc
from ._version import RUNTIME, SDK
from .connection import Addresses, connection_list
from .context import TaskContext
from .errors import (
    CANCELLED,
    TASK_NOT_REGISTERED,
    UNHANDLED_EXCEPTION,
    WORKER_OVER_CAPACITY,
    DrainTimeout,
    ProtocolError,
    TaskFailure,
    WorkerRejected,
)
from .flow import Backoff, Credits, Outbox
from .messages import complete_message, fail_message
from .values import Json, payload_violation, to_proto_value

log = logging.getLogger("orbit_worker")

#: A task handler: takes the :class:`TaskContext`, returns a JSON value (or raises). A
#: coroutine function runs on the worker's event loop, a plain function on a thread pool.
Handler = Callable[[TaskContext], Union[Json, Awaitable[Json]]]

_FATAL_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED,
}
_CLOSE_GRACE = 5.0


class _Running:
    def __init__(self, ctx: TaskContext, task: "asyncio.Future[None]", is_async: bool) -> None:
        self.ctx = ctx
        self.task = task
        self.is_async = is_async


def _labels(labels: Optional[Dict[str, str]]) -> Dict[str, str]:
    """``Hello.labels``: what this worker announces. A workflow step's ``on:`` routes its
    attempts only to workers whose labels hold every pair it names (worker pools; see the
    repository's docs/flow-control.md), so both names and values must be strings."""
    out = dict(labels or {})
    for k, v in out.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"labels must map strings to strings, got {k!r}: {v!r}")
        if not k:
            raise ValueError("a label name must not be empty")
    return out


def _default_worker_id() -> str:
    return f"{socket.gethostname() or 'python-worker'}-{os.getpid()}"


class Registry:
    """Task handlers by ``(name, version)``; a :class:`Worker` is one, and a registry
    built elsewhere (e.g. in a module of handlers) can be passed to ``Worker(registry=)``."""

    def __init__(self) -> None:
        self._handlers: Dict[Tuple[str, str], Handler] = {}

    def register(self, name: str, version: str, handler: Handler) -> None:
        """Registers ``handler`` for task ``name`` at contract ``version``. A coroutine
        function runs on the event loop; a plain function on a thread pool."""
        if not name:
            raise ValueError("task name must not be empty")
        self._handlers[(name, version)] = handler

    def task(self, name: str, version: str = "1") -> Callable[[Handler], Handler]:
        """Decorator form of :meth:`register`::

            @worker.task("greet", "1")
            def greet(ctx): ...
        """

        def decorate(handler: Handler) -> Handler:
            self.register(name, version, handler)
            return handler

        return decorate

    def handlers(self) -> Mapping[Tuple[str, str], Handler]:
        """The registered handlers."""
        return dict(self._handlers)


class Worker(Registry):
    """An Orbit worker: one ``Session`` stream at a time, reconnecting as needed.

    ``address`` is one frontend (``host:port`` or an ``http(s)://`` URL) or several (a list
    or a comma-separated string): the worker connects to the first and moves to the next
    whenever a connection or stream fails.

    ``bearer_token``, ``tls_ca``, ``tls_client_cert`` and ``tls_client_key`` default to
    ``ORBIT_TOKEN``, ``ORBIT_TLS_CA``, ``ORBIT_TLS_CLIENT_CERT`` and
    ``ORBIT_TLS_CLIENT_KEY`` (pass ``""`` to ignore a variable); see
    :func:`connection_options` for the rules and the module doc for the refusals."""

    def __init__(
        self,
        address: Addresses = "127.0.0.1:7233",
        *,
        registry: Optional[Registry] = None,
        worker_id: Optional[str] = None,
        max_concurrency: int = 10,
        labels: Optional[Dict[str, str]] = None,
        bearer_token: Optional[str] = None,
        tls_ca: Optional[str] = None,
        tls_client_cert: Optional[str] = None,
        tls_client_key: Optional[str] = None,
        drain_timeout: float = 30.0,
        handshake_timeout: float = 10.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 10.0,
        default_heartbeat_interval: float = 10.0,
        outbox_capacity: Optional[int] = None,
        on_task_done: Optional[Callable[[TaskContext, bool], None]] = None,
        cancel_grace: float = 0.0,
        on_ready: Optional[Callable[[], None]] = None,
    ) -> None:
        super().__init__()
        if registry is not None:
            self._handlers.update(registry.handlers())
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.address = address
        self.worker_id = worker_id or _default_worker_id()
        if not 1 <= len(self.worker_id.encode()) <= 256:
            raise ValueError("worker_id must be 1 to 256 bytes")
        self.max_concurrency = max_concurrency
        self.labels = _labels(labels)
        self.drain_timeout = drain_timeout
        self.handshake_timeout = handshake_timeout
        self.default_heartbeat_interval = default_heartbeat_interval
        self.on_task_done = on_task_done
        self.cancel_grace = cancel_grace
        self.on_ready = on_ready
        self._ready = False
        # A missing or unreadable PEM file fails now, not at the first connect.
        self._connections = connection_list(address, tls_ca, tls_client_cert, tls_client_key, bearer_token)
        self._current = 0
        self._metadata = self._connections[0].metadata
        self._backoff = Backoff(backoff_initial, backoff_max)
        self._credits = Credits(max_concurrency)
        self._outbox = Outbox(outbox_capacity or max(256, 4 * max_concurrency))
        self._running: Dict[str, _Running] = {}
        self._draining = False
        self._drain_deadline: Optional[float] = None
        self._out: Optional["asyncio.Queue[Any]"] = None
        self._wake: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._executor: Optional[ThreadPoolExecutor] = None

    def hello(self) -> Any:
        """The ``Hello`` this worker sends."""
        return worker_pb2.WorkerMessage(
            hello=worker_pb2.WorkerMessage.Hello(
                worker_id=self.worker_id,
                runtime=RUNTIME,
                sdk=SDK,
                tasks=[common_pb2.TaskRef(name=n, version=v) for (n, v) in self._handlers],
                max_concurrency=self.max_concurrency,
                labels=self.labels,
            )
        )

    # -- running ------------------------------------------------------------------------

    def run_sync(self, shutdown: Optional[asyncio.Event] = None) -> None:
        """Runs until SIGINT/SIGTERM (or ``request_shutdown``), then drains."""

        async def main() -> None:
            stop = shutdown or asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, stop.set)
                except (NotImplementedError, RuntimeError):  # pragma: no cover - Windows
                    pass
            await self.run(stop)

        asyncio.run(main())

    async def run(self, shutdown: Optional[asyncio.Event] = None) -> None:
        """Runs until ``shutdown`` is set and the drain completes."""
        if not self._handlers:
            raise ValueError("register at least one task")
        shutdown = shutdown or asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(
            max_workers=self.max_concurrency, thread_name_prefix="orbit-task"
        )
        watcher = asyncio.ensure_future(self._watch_shutdown(shutdown))
        try:
            while True:
                if self._is_done():
                    return
                try:
                    if await self._session():
                        return
                    log.info("the server closed the session; reconnecting")
                except grpc.aio.AioRpcError as e:
                    if e.code() in _FATAL_CODES:
                        name = e.code().name
                        raise WorkerRejected(f"{name}: {e.details()}", name) from e
                    log.warning("worker session lost (%s: %s); reconnecting", e.code().name, e.details())
                    self._next_address()
                except (asyncio.TimeoutError, ProtocolError, OSError) as e:
                    log.warning("worker session lost (%r); reconnecting", e)
                    self._next_address()
                await self._sleep_offline(self._backoff.next_delay())
        finally:
            watcher.cancel()
            for running in list(self._running.values()):
                running.ctx._cancel("worker stopped")
                running.task.cancel()
            self._running.clear()
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _next_address(self) -> None:
        """Moves to the next frontend of the list (a no-op with one)."""
        self._current = (self._current + 1) % len(self._connections)

    async def _watch_shutdown(self, shutdown: asyncio.Event) -> None:
        await shutdown.wait()
        self._begin_drain()

    def _begin_drain(self) -> None:
        if self._draining:
            return
        log.info("draining: %d running, %d unacknowledged", len(self._running), len(self._outbox))
        self._draining = True
        self._drain_deadline = time.monotonic() + self.drain_timeout
        self._send(worker_pb2.WorkerMessage(drain=worker_pb2.WorkerMessage.Drain()))
        self._wake.set()

    def _is_done(self) -> bool:
        return self._draining and not self._running and len(self._outbox) == 0

    def _check_deadline(self) -> Optional[float]:
        """Seconds left to drain, None when not draining; raises DrainTimeout when over."""
        if self._drain_deadline is None:
            return None
        left = self._drain_deadline - time.monotonic()
        if left <= 0:
            raise DrainTimeout(
                f"{len(self._running)} task(s) still running, "
                f"{len(self._outbox)} result(s) not acknowledged"
            )
        return left

    async def _wait_wake(self, timeout: Optional[float]) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    async def _sleep_offline(self, delay: float) -> None:
        end = time.monotonic() + delay
        while not self._is_done():
            left = self._check_deadline()
            remaining = end - time.monotonic()
            if left is not None:
                remaining = min(remaining, left)
            if remaining <= 0:
                return
            self._wake.clear()
            await self._wait_wake(remaining)

    async def _session(self) -> bool:
        """One stream. True when the drain completed, False when the server ended it."""
        out: "asyncio.Queue[Any]" = asyncio.Queue()
        out.put_nowait(self.hello())

        async def requests():
            while True:
                message = await out.get()
                if message is None:
                    return
                yield message

        options = [("grpc.keepalive_time_ms", 30_000), ("grpc.keepalive_timeout_ms", 10_000)]
        connection = self._connections[self._current]
        channel = connection.channel(options)
        call = None
        reader = heartbeats = None
        try:
            stub = worker_pb2_grpc.WorkerServiceStub(channel)
            call = stub.Session(requests(), metadata=self._metadata)
            first = await asyncio.wait_for(call.read(), self.handshake_timeout)
            if first is grpc.aio.EOF:
                raise ProtocolError("the stream ended before welcome")
            if first.WhichOneof("kind") != "welcome":
                raise ProtocolError(f"expected welcome first, got {first.WhichOneof('kind')}")
            welcome = first.welcome
            self._backoff.reset()
            for warning in welcome.warnings:
                log.warning("server warning: %s", warning)
            interval = self.default_heartbeat_interval
            if welcome.HasField("heartbeat_interval"):
                interval = welcome.heartbeat_interval.ToTimedelta().total_seconds() or interval
            interval = max(interval, 0.05)
            log.info("session %s established with %s (heartbeat every %.1fs)", welcome.session_id, connection.target, interval)

            self._out = out
            if not self._ready:
                self._ready = True
                if self.on_ready is not None:
                    self.on_ready()
            if self._draining:
                self._send(worker_pb2.WorkerMessage(drain=worker_pb2.WorkerMessage.Drain()))
            for message in self._outbox.pending():
                self._send(message)
            self._heartbeat_all()
            self._grant()

            reader = asyncio.ensure_future(self._read_loop(call))
            heartbeats = asyncio.ensure_future(self._heartbeat_loop(interval))
            while True:
                if self._is_done():
                    self._out = None
                    out.put_nowait(None)  # half-close
                    try:
                        await asyncio.wait_for(asyncio.shield(reader), _CLOSE_GRACE)
                    except Exception:  # noqa: BLE001 - the drain is complete either way
                        pass
                    return True
                left = self._check_deadline()
                self._wake.clear()
                waker = asyncio.ensure_future(self._wake.wait())
                done, _ = await asyncio.wait(
                    {reader, waker}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                waker.cancel()
                if reader in done:
                    reader.result()  # raises the stream's error, if any
                    return False
        finally:
            self._out = None
            self._credits.stream_reset()
            for t in (reader, heartbeats):
                if t is not None:
                    t.cancel()
            if call is not None:
                call.cancel()
            await channel.close()

    async def _read_loop(self, call: Any) -> None:
        while True:
            message = await call.read()
            if message is grpc.aio.EOF:
                return
            self._on_server_message(message)

    def _heartbeat_all(self) -> None:
        tokens = list(self._running) + self._outbox.tokens()
        heartbeat = worker_pb2.WorkerMessage.Heartbeat(tokens=tokens, complete=True)
        self._send(worker_pb2.WorkerMessage(heartbeat=heartbeat))

    async def _heartbeat_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self._heartbeat_all()

    # -- the state machine (event-loop thread only) -------------------------------------

    def _send(self, message: Any) -> None:
        if self._out is not None:
            self._out.put_nowait(message)

    def _grant(self) -> None:
        if self._draining or self._outbox.is_full() or self._out is None:
            return
        n = self._credits.grant()
        if n:
            self._send(worker_pb2.WorkerMessage(credits=worker_pb2.WorkerMessage.Credits(n=n)))

    def _report(self, token: str, message: Any) -> None:
        self._outbox.push(token, message)
        self._send(message)

    def _on_server_message(self, message: Any) -> None:
        kind = message.WhichOneof("kind")
        if kind == "task":
            self._on_task(message.task)
        elif kind == "ack":
            ack = message.ack
            if self._outbox.ack(ack.token) and not ack.accepted:
                log.debug("result for %s recorded but not applied: %s", ack.token, ack.reason)
            self._grant()
            self._wake.set()
        elif kind == "cancel":
            running = self._running.get(message.cancel.token)
            if running is None:
                log.debug("cancel for a task not running here: %s", message.cancel.token)
                return
            running.ctx._cancel(message.cancel.reason)
            if running.is_async:
                # Cooperative first (ctx.cancel_event); CancelledError after the grace.
                if self.cancel_grace <= 0:
                    running.task.cancel()
                else:
                    self._loop.call_later(self.cancel_grace, running.task.cancel)
        elif kind == "ping":
            pass  # keepalive; not answered
        elif kind == "welcome":
            log.warning("ignoring a second welcome on the same stream")

    def _on_task(self, task: Any) -> None:
        token = task.token
        if not self._credits.take():
            log.warning("the server sent task %s without a credit; refusing it", token)
            self._report(
                token,
                fail_message(token, WORKER_OVER_CAPACITY, "task delivered without a free credit", True),
            )
            return
        if token in self._running:
            self._grant()
            return
        previous = self._outbox.get(token)
        if previous is not None:
            self._send(previous)
            self._grant()
            return
        handler = self._handlers.get((task.task, task.version))
        if handler is None:
            self._report(
                token,
                fail_message(
                    token,
                    TASK_NOT_REGISTERED,
                    f"this worker has no handler for {task.task}@{task.version}",
                    True,
                ),
            )
            self._grant()
            return
        ctx = TaskContext(task, self._heartbeat_threadsafe, self._loop)
        is_async = inspect.iscoroutinefunction(handler)
        self._credits.start()
        future = asyncio.ensure_future(self._execute(handler, ctx, is_async))
        self._running[token] = _Running(ctx, future, is_async)

    async def _execute(self, handler: Handler, ctx: TaskContext, is_async: bool) -> None:
        span = tracing.start_task_span(ctx, self.worker_id)
        try:
            if is_async:
                output = await tracing.run_in_span(span, handler(ctx))
            else:
                output = await self._loop.run_in_executor(self._executor, handler, ctx)
            if ctx.cancelled:
                message = fail_message(ctx.token, CANCELLED, ctx.cancel_reason or "cancelled", False)
            else:
                message = complete_message(ctx.token, output)
        except asyncio.CancelledError:
            if not ctx.cancelled:
                raise  # the worker is stopping, not a server cancel
            message = fail_message(ctx.token, CANCELLED, ctx.cancel_reason or "cancelled", False)
        except TaskFailure as f:
            message = fail_message(ctx.token, f.code, f.message, f.retryable, f.details)
        except Exception as e:  # noqa: BLE001 - reported as UNHANDLED_EXCEPTION
            message = fail_message(
                ctx.token,
                UNHANDLED_EXCEPTION,
                f"{type(e).__name__}: {e}",
                True,
                {"traceback": traceback.format_exc()},
            )
        if span is not None:
            failed = message.WhichOneof("kind") == "fail"
            tracing.end_task_span(span, message.fail.error.code if failed else None)
        self._on_finished(ctx, message)

    def _on_finished(self, ctx: TaskContext, message: Any) -> None:
        if self._running.pop(ctx.token, None) is None:
            return
        self._credits.finish()
        self._report(ctx.token, message)
        self._grant()
        self._wake.set()
        if self.on_task_done is not None:
            try:
                self.on_task_done(ctx, message.WhichOneof("kind") == "complete")
            except Exception:  # noqa: BLE001 - a callback must not break the worker
                log.exception("on_task_done failed")

    def _heartbeat_threadsafe(self, token: str, details: Json) -> None:
        def send() -> None:
            if token in self._running:
                heartbeat = worker_pb2.WorkerMessage.Heartbeat(tokens=[token])
                violation = None if details is None else payload_violation(details, "heartbeat details")
                if violation is not None:
                    # The server would fail the attempt: keep it alive without the details.
                    log.warning("heartbeat details dropped: %s", violation[1])
                elif details is not None:
                    heartbeat.details.CopyFrom(to_proto_value(details))
                self._send(worker_pb2.WorkerMessage(heartbeat=heartbeat))

        if self._loop is None:
            return
        try:
            running_loop = asyncio.get_running_loop()
        except RuntimeError:
            running_loop = None
        if running_loop is self._loop:
            send()
        else:
            self._loop.call_soon_threadsafe(send)

