"""A small, reusable Orbit worker over one ``orbit.v1.WorkerService/Session`` stream.

Generated client: run ``./gen.sh`` first (it writes ``gen/``, which this module puts on
``sys.path``).

Usage::

    from orbit_worker import Worker, TaskFailure

    worker = Worker("127.0.0.1:7233", max_concurrency=8)

    @worker.task("greet", "1")
    def greet(ctx):                      # a plain function runs on a thread pool ...
        return {"greeting": f"Hello, {ctx.input['name']}!"}

    @worker.task("slow", "1")
    async def slow(ctx):                 # ... a coroutine function on the event loop
        ctx.heartbeat({"progress": 0.5})
        return {}

    worker.run_sync()                    # until SIGINT/SIGTERM, then drain

The protocol as implemented (the same as the Rust ``orbit-worker`` crate):

1. Connect, open ``Session``, send ``Hello{worker_id, runtime: "python 3.x", sdk:
   "orbit-python/<version>", tasks, max_concurrency, labels}``; the first server message
   must be ``Welcome`` (its ``heartbeat_interval`` is used; its warnings are logged).
2. At the start of every stream: ``Drain{}`` first if shutting down, then every result
   still in the outbox again, then ``Credits{n}`` for the free slots
   (``max_concurrency - running - granted but unused``; credits are per stream).
3. Each ``Task`` uses one credit and runs its handler (looked up by task name and
   version). A task without a credit fails with ``WORKER_OVER_CAPACITY``, one without a
   handler with ``TASK_NOT_REGISTERED`` (both retryable).
4. A returned value becomes ``Complete{token, output}``; a raised ``TaskFailure`` becomes
   ``Fail{token, error}``; any other exception ``Fail{code: "UNHANDLED_EXCEPTION",
   retryable: true}`` with the traceback in ``details``. Each result goes into the outbox,
   is sent, and the freed slot is granted again (not while draining).
5. A result leaves the outbox when ``Ack{token}`` arrives; after a reconnect the outbox is
   sent again (results are token-addressed; the server ignores duplicates).
6. Every ``heartbeat_interval``: ``Heartbeat{tokens: <running tasks>}``.
   ``ctx.heartbeat(details)`` sends one for its task at once.
7. ``Cancel{token, reason}`` sets ``ctx.cancelled``; a coroutine handler is also cancelled
   at once, a thread handler must notice (``ctx.cancelled``, ``ctx.wait()``). Either way the
   worker reports ``Fail{code: "CANCELLED", retryable: false}`` when it ends.
8. ``Ping`` is not answered (``worker.proto``: the worker does not answer it).
9. Shutdown: ``Drain{}``, no more credits, finish running tasks, wait for their acks, then
   half-close the stream. After ``drain_timeout`` the remaining tasks are abandoned.
10. Any broken connection or stream reconnects after a capped, jittered exponential
    backoff; ``INVALID_ARGUMENT``, ``PERMISSION_DENIED``, ``UNAUTHENTICATED`` and
    ``UNIMPLEMENTED`` end ``run`` with ``WorkerRejected``. Retrying those is pointless: the
    server refused this worker's credentials or its ``Hello`` (a task outside its
    identity's patterns), and the same request would be refused again; a worker that kept
    reconnecting would only hide the misconfiguration. The example workers print one line
    (``orbit worker: refused by the server: UNAUTHENTICATED: ...``) and exit with code 4.

Security (docs/security.md, "Clients"): the same options as the ``orbit`` CLI and the Rust
worker, each read from its variable when not given (an empty value means "none")::

    Worker("frontend.example:7233",
           tls_ca="ca.pem",                  # ORBIT_TLS_CA: dial TLS, verify the server
           tls_client_cert="worker.pem",     # ORBIT_TLS_CLIENT_CERT: mutual TLS ...
           tls_client_key="worker-key.pem",  # ORBIT_TLS_CLIENT_KEY: ... with this key
           bearer_token="5c0e...")           # ORBIT_TOKEN: ``authorization: Bearer ...``

With a CA, an address without a scheme is dialled with TLS (``https://``); ``https://``
without a CA, TLS options with an explicit ``http://`` address, or a client certificate
without its key are refused at construction (``ValueError``), as by the Rust client. The
files are read at construction (a missing file fails at once) and again at every
reconnect, so a renewed certificate is picked up without a restart. The token is sent as
``authorization: Bearer <token>`` metadata on the ``Session`` stream (the only call the
worker makes).
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import inspect
import json
import logging
import math
import os
import platform
import random
import signal
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

_GEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen")
if _GEN not in sys.path:
    sys.path.insert(0, _GEN)

import grpc  # noqa: E402

import orbit_tracing  # noqa: E402
from google.protobuf import struct_pb2  # noqa: E402

try:
    from orbit.v1 import common_pb2, worker_pb2, worker_pb2_grpc  # noqa: E402
except ImportError as e:  # pragma: no cover - a setup error
    raise ImportError(
        f"the generated Orbit client is missing ({e}); run examples/python/gen.sh first"
    ) from e

__all__ = [
    "Worker",
    "TaskContext",
    "TaskFailure",
    "WorkerRejected",
    "DrainTimeout",
    "to_proto_value",
    "from_proto_value",
    "Credits",
    "Outbox",
    "ConnectionOptions",
    "connection_options",
    "UNHANDLED_EXCEPTION",
    "CANCELLED",
]

SDK_VERSION = "0.1.0"
SDK = f"orbit-python/{SDK_VERSION}"
RUNTIME = f"python {platform.python_version()}"

UNHANDLED_EXCEPTION = "UNHANDLED_EXCEPTION"
CANCELLED = "CANCELLED"
TASK_NOT_REGISTERED = "TASK_NOT_REGISTERED"
WORKER_OVER_CAPACITY = "WORKER_OVER_CAPACITY"

_FATAL_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED,
}
_MAX_SAFE_INTEGER = 2**53

# Payload limits, the server's (orbit_payload in the Rust tree; docs/events.md, "Payload
# limits"): a result nested deeper than MAX_DEPTH, or larger than MAX_PAYLOAD_BYTES as JSON
# or as protobuf, is refused by the server (or does not even decode there), so it is
# reported as a Fail with the payload code instead and the execution goes on.
MAX_DEPTH = 24
MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
PAYLOAD_TOO_DEEP = "PAYLOAD_TOO_DEEP"
_CLOSE_GRACE = 5.0

log = logging.getLogger("orbit_worker")

Json = Any
Handler = Callable[["TaskContext"], Union[Json, Awaitable[Json]]]


# --------------------------------------------------------------------------------------
# google.protobuf.Value <-> Python JSON values


def to_proto_value(obj: Json) -> struct_pb2.Value:
    """A JSON-like Python value (None, bool, int, float, str, list/tuple, dict) as a
    ``google.protobuf.Value``. Numbers become doubles."""
    v = struct_pb2.Value()
    if obj is None:
        v.null_value = struct_pb2.NULL_VALUE
    elif isinstance(obj, bool):  # before int: bool is an int subclass
        v.bool_value = obj
    elif isinstance(obj, (int, float)):
        v.number_value = float(obj)
    elif isinstance(obj, str):
        v.string_value = obj
    elif isinstance(obj, Mapping):
        v.struct_value.SetInParent()
        for key, item in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"object keys must be strings, got {key!r}")
            v.struct_value.fields[key].CopyFrom(to_proto_value(item))
    elif isinstance(obj, (list, tuple)):
        v.list_value.SetInParent()
        for item in obj:
            v.list_value.values.add().CopyFrom(to_proto_value(item))
    else:
        raise TypeError(f"not a JSON value: {type(obj).__name__}")
    return v


def from_proto_value(v: Optional[struct_pb2.Value]) -> Json:
    """A ``google.protobuf.Value`` as a Python JSON value. Unset reads as None; a whole
    number within +-2^53 becomes an int; NaN and infinities become None."""
    if v is None:
        return None
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "bool_value":
        return v.bool_value
    if kind == "number_value":
        n = v.number_value
        if not math.isfinite(n):
            return None
        if n.is_integer() and abs(n) <= _MAX_SAFE_INTEGER:
            return int(n)
        return n
    if kind == "string_value":
        return v.string_value
    if kind == "struct_value":
        return {k: from_proto_value(item) for k, item in v.struct_value.fields.items()}
    if kind == "list_value":
        return [from_proto_value(item) for item in v.list_value.values]
    raise ValueError(f"unknown google.protobuf.Value kind {kind!r}")


def payload_depth(obj: Json) -> int:
    """Nesting depth of lists and dicts (a scalar is 0), walked without recursion."""
    depth = 0
    stack = [(obj, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, Mapping):
            children = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        depth = max(depth, level + 1)
        if depth > MAX_DEPTH:
            return depth  # deep enough to refuse; no need to walk a hostile value further
        stack.extend((child, level + 1) for child in children)
    return depth


def payload_violation(obj: Json, what: str) -> Optional[Tuple[str, str]]:
    """``(code, message)`` when ``obj`` is over the payload limits, else None."""
    depth = payload_depth(obj)
    if depth > MAX_DEPTH:
        return PAYLOAD_TOO_DEEP, f"{what} is nested more than {MAX_DEPTH} levels deep"
    size = to_proto_value(obj).ByteSize()
    try:
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        size = max(size, len(text.encode("utf-8")))
    except (TypeError, ValueError):
        pass  # not JSON text (NaN, odd keys): the protobuf size still applies
    if size > MAX_PAYLOAD_BYTES:
        return PAYLOAD_TOO_LARGE, f"{what} is {size} bytes (max_payload_bytes {MAX_PAYLOAD_BYTES})"
    return None


def _optional_field(message: Any, field: str) -> Optional[Any]:
    return getattr(message, field) if message.HasField(field) else None


def _proto_value_or_none(obj: Json) -> Optional[struct_pb2.Value]:
    return None if obj is None else to_proto_value(obj)


# --------------------------------------------------------------------------------------
# Pure bookkeeping (unit-tested)


class Credits:
    """Flow control: the tasks running here plus the credits the server has not used yet
    never exceed ``max``. Credits are per stream; running tasks keep their slots."""

    def __init__(self, max_concurrency: int) -> None:
        self.max = max_concurrency
        self.running = 0
        self.outstanding = 0

    def grant(self) -> int:
        """How many credits to grant now; records them as granted."""
        n = max(0, self.max - self.running - self.outstanding)
        self.outstanding += n
        return n

    def take(self) -> bool:
        """A task was delivered; False when it came without a credit."""
        if self.outstanding == 0:
            return False
        self.outstanding -= 1
        return True

    def start(self) -> None:
        self.running += 1

    def finish(self) -> None:
        self.running = max(0, self.running - 1)

    def stream_reset(self) -> None:
        self.outstanding = 0


class Outbox:
    """Results waiting for their ``Ack``, oldest first, keyed by token."""

    def __init__(self, capacity: int = 256) -> None:
        self._entries: "collections.OrderedDict[str, Any]" = collections.OrderedDict()
        self.capacity = max(1, capacity)

    def push(self, token: str, message: Any) -> None:
        self._entries[token] = message

    def ack(self, token: str) -> bool:
        return self._entries.pop(token, None) is not None

    def get(self, token: str) -> Optional[Any]:
        return self._entries.get(token)

    def pending(self) -> Iterator[Any]:
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)

    def is_full(self) -> bool:
        return len(self._entries) >= self.capacity


class Backoff:
    """Capped exponential backoff, each delay jittered into [base/2, base]."""

    def __init__(self, initial: float = 0.1, maximum: float = 10.0) -> None:
        self.initial = initial
        self.maximum = max(initial, maximum)
        self._base = initial

    def next_delay(self) -> float:
        base = self._base
        self._base = min(self._base * 2, self.maximum)
        return random.uniform(base / 2, base)

    def reset(self) -> None:
        self._base = self.initial


# --------------------------------------------------------------------------------------
# Where and how to connect (unit-tested)

#: Exit code of the example workers when the server refuses them (the CLI's "server" code).
EXIT_REFUSED = 4
#: Exit code of the example workers for unusable options (the CLI's "usage" code).
EXIT_USAGE = 2


class ConnectionOptions:
    """The resolved connection settings: the gRPC ``target`` (``host:port``), whether TLS
    is on, the PEM file paths, and the call metadata (the bearer token, if any)."""

    def __init__(
        self,
        target: str,
        tls: bool,
        ca: Optional[str],
        cert: Optional[str],
        key: Optional[str],
        metadata: Tuple[Tuple[str, str], ...],
    ) -> None:
        self.target = target
        self.tls = tls
        self.ca = ca
        self.cert = cert
        self.key = key
        self.metadata = metadata

    def credentials(self) -> "grpc.ChannelCredentials":
        """The channel credentials, reading the PEM files now (``OSError`` if unreadable)."""

        def read(path: Optional[str]) -> Optional[bytes]:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca),
            private_key=read(self.key),
            certificate_chain=read(self.cert),
        )

    def channel(self, options: List[Tuple[str, Any]]) -> "grpc.aio.Channel":
        """A new channel: ``secure_channel`` with TLS, else ``insecure_channel``."""
        if self.tls:
            return grpc.aio.secure_channel(self.target, self.credentials(), options=options)
        return grpc.aio.insecure_channel(self.target, options=options)


def _from_env(value: Optional[str], variable: str, environ: Mapping[str, str]) -> Optional[str]:
    """``value`` if given, else the variable; empty (either way) means none."""
    if value is None:
        value = environ.get(variable)
    return value or None


def connection_options(
    address: str,
    tls_ca: Optional[str] = None,
    tls_client_cert: Optional[str] = None,
    tls_client_key: Optional[str] = None,
    bearer_token: Optional[str] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> ConnectionOptions:
    """Resolves the options the way the Rust clients do (``orbit_api::tls::ClientTls``):
    each option not given (None) comes from ``ORBIT_TLS_CA``, ``ORBIT_TLS_CLIENT_CERT``,
    ``ORBIT_TLS_CLIENT_KEY`` or ``ORBIT_TOKEN``; TLS is on with a CA or an ``https://``
    address. Raises ``ValueError`` for inconsistent options."""
    env = os.environ if environ is None else environ
    ca = _from_env(tls_ca, "ORBIT_TLS_CA", env)
    cert = _from_env(tls_client_cert, "ORBIT_TLS_CLIENT_CERT", env)
    key = _from_env(tls_client_key, "ORBIT_TLS_CLIENT_KEY", env)
    token = _from_env(bearer_token, "ORBIT_TOKEN", env)

    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = ("https" if ca else "http"), address
    if scheme not in ("http", "https"):
        raise ValueError(f"address `{address}`: the scheme must be http:// or https://")
    target = rest.rstrip("/")
    if not target or "/" in target:
        raise ValueError(f"address `{address}` is not host:port")
    tls = scheme == "https"
    if not tls and (ca or cert or key):
        raise ValueError(f"TLS options given but the address `{address}` is http://")
    if tls and not ca:
        raise ValueError(f"an https address needs a TLS CA (--tls-ca or ORBIT_TLS_CA): `{address}`")
    if (cert is None) != (key is None):
        raise ValueError("a TLS client certificate needs its key, and the reverse")

    metadata: Tuple[Tuple[str, str], ...] = ()
    if token is not None:
        # gRPC metadata values are printable ASCII; a pasted token with a newline or a
        # space would otherwise fail at the first call with an obscure error.
        if not all(0x21 <= ord(ch) <= 0x7E for ch in token):
            raise ValueError("the bearer token must be printable ASCII without spaces")
        metadata = (("authorization", f"Bearer {token}"),)
    return ConnectionOptions(target, tls, ca, cert, key, metadata)


def refusal_line(error: BaseException) -> str:
    """The one line an example worker prints when the server refuses it."""
    return f"orbit worker: refused by the server: {error}"


# --------------------------------------------------------------------------------------
# What handlers see and raise


class TaskFailure(Exception):
    """Raise from a handler to report ``Fail{error}`` with your own code."""

    def __init__(
        self, code: str, message: str = "", retryable: bool = False, details: Json = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.details = details


class WorkerRejected(Exception):
    """The server refused the session for a reason a reconnect cannot fix."""


class DrainTimeout(Exception):
    """Shutdown did not finish within the drain timeout."""


class _ProtocolError(Exception):
    pass


class TaskContext:
    """One task attempt, as seen by its handler."""

    def __init__(self, task: Any, worker: "Worker") -> None:
        self.token: str = task.token
        self.execution_id: str = task.execution_id
        self.workflow: str = task.workflow
        self.step: str = task.step
        self.task: str = task.task
        self.version: str = task.version
        self.input: Json = from_proto_value(_optional_field(task, "input"))
        self.idempotency_key: str = task.idempotency_key
        self.attempt: int = task.attempt
        self.redelivery: bool = task.redelivery
        self.deadline: Optional[datetime.datetime] = (
            task.deadline.ToDatetime(tzinfo=datetime.timezone.utc)
            if task.HasField("deadline")
            else None
        )
        self.heartbeat_timeout: Optional[float] = (
            task.heartbeat_timeout.ToTimedelta().total_seconds()
            if task.HasField("heartbeat_timeout")
            else None
        )
        self.traceparent: str = task.trace_context.traceparent
        self.tracestate: str = task.trace_context.tracestate
        self.cancel_reason: Optional[str] = None
        self._cancelled = threading.Event()
        self._worker = worker

    @property
    def cancelled(self) -> bool:
        """True once the server sent ``Cancel`` for this task."""
        return self._cancelled.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleeps up to ``seconds`` (thread handlers); returns True early when cancelled."""
        return self._cancelled.wait(seconds)

    def heartbeat(self, details: Json = None) -> None:
        """Sends ``Heartbeat{tokens: [this task], details}`` (None records nothing but keeps
        the attempt alive). Thread-safe; dropped while disconnected."""
        self._worker._heartbeat_threadsafe(self.token, details)

    def _cancel(self, reason: str) -> None:
        self.cancel_reason = reason or "cancelled by the server"
        self._cancelled.set()


class _Running:
    def __init__(self, ctx: TaskContext, task: "asyncio.Task[None]", is_async: bool) -> None:
        self.ctx = ctx
        self.task = task
        self.is_async = is_async


def _fail_message(token: str, code: str, message: str, retryable: bool, details: Json = None):
    code = code or UNHANDLED_EXCEPTION
    violation = None if details is None else payload_violation(details, "details")
    if violation is not None:
        # The details cannot be sent: report the attempt failed with the payload code.
        return _fail_message(token, violation[0], f"{violation[1]} (the task failed with {code})", False)
    error = common_pb2.TaskError(code=code, message=message, retryable=retryable)
    if details is not None:
        error.details.CopyFrom(to_proto_value(details))
    return worker_pb2.WorkerMessage(fail=worker_pb2.WorkerMessage.Fail(token=token, error=error))


def _complete_message(token: str, output: Json):
    violation = None if output is None else payload_violation(output, "output")
    if violation is not None:
        return _fail_message(token, violation[0], violation[1], False)
    complete = worker_pb2.WorkerMessage.Complete(token=token)
    if output is not None:
        complete.output.CopyFrom(to_proto_value(output))
    return worker_pb2.WorkerMessage(complete=complete)


def _default_worker_id() -> str:
    return f"{socket.gethostname() or 'python-worker'}-{os.getpid()}"


# --------------------------------------------------------------------------------------
# The worker


class Worker:
    """An Orbit worker: one ``Session`` stream at a time, reconnecting as needed.

    ``bearer_token``, ``tls_ca``, ``tls_client_cert`` and ``tls_client_key`` default to
    ``ORBIT_TOKEN``, ``ORBIT_TLS_CA``, ``ORBIT_TLS_CLIENT_CERT`` and
    ``ORBIT_TLS_CLIENT_KEY`` (pass ``""`` to ignore a variable); see
    :func:`connection_options` for the rules and the module doc for the refusals."""

    def __init__(
        self,
        address: str = "127.0.0.1:7233",
        *,
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
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.address = address
        self.worker_id = worker_id or _default_worker_id()
        if not 1 <= len(self.worker_id.encode()) <= 256:
            raise ValueError("worker_id must be 1 to 256 bytes")
        self.max_concurrency = max_concurrency
        self.labels = dict(labels or {})
        self.drain_timeout = drain_timeout
        self.handshake_timeout = handshake_timeout
        self.default_heartbeat_interval = default_heartbeat_interval
        self.on_task_done = on_task_done
        self._connection = connection_options(
            address, tls_ca, tls_client_cert, tls_client_key, bearer_token
        )
        if self._connection.tls:
            self._connection.credentials()  # a missing or unreadable file fails now, not later
        self._metadata = self._connection.metadata
        self._backoff = Backoff(backoff_initial, backoff_max)
        self._handlers: Dict[Tuple[str, str], Handler] = {}
        self._credits = Credits(max_concurrency)
        self._outbox = Outbox(outbox_capacity or max(256, 4 * max_concurrency))
        self._running: Dict[str, _Running] = {}
        self._draining = False
        self._drain_deadline: Optional[float] = None
        self._out: Optional["asyncio.Queue[Any]"] = None
        self._wake: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._executor: Optional[ThreadPoolExecutor] = None

    # -- registration -------------------------------------------------------------------

    def register(self, name: str, version: str, handler: Handler) -> None:
        """Registers ``handler`` for task ``name`` at contract ``version``. A coroutine
        function runs on the event loop; a plain function on a thread pool."""
        if not name:
            raise ValueError("task name must not be empty")
        self._handlers[(name, version)] = handler

    def task(self, name: str, version: str = "1") -> Callable[[Handler], Handler]:
        """Decorator form of :meth:`register`."""

        def decorate(handler: Handler) -> Handler:
            self.register(name, version, handler)
            return handler

        return decorate

    def hello(self):
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
                        raise WorkerRejected(f"{e.code().name}: {e.details()}") from e
                    log.warning("worker session lost (%s: %s); reconnecting", e.code().name, e.details())
                except (asyncio.TimeoutError, _ProtocolError, OSError) as e:
                    log.warning("worker session lost (%r); reconnecting", e)
                await self._sleep_offline(self._backoff.next_delay())
        finally:
            watcher.cancel()
            for running in list(self._running.values()):
                running.ctx._cancel("worker stopped")
                running.task.cancel()
            self._running.clear()
            self._executor.shutdown(wait=False, cancel_futures=True)

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
        channel = self._connection.channel(options)
        call = None
        reader = heartbeats = None
        try:
            stub = worker_pb2_grpc.WorkerServiceStub(channel)
            call = stub.Session(requests(), metadata=self._metadata)
            first = await asyncio.wait_for(call.read(), self.handshake_timeout)
            if first is grpc.aio.EOF:
                raise _ProtocolError("the stream ended before welcome")
            if first.WhichOneof("kind") != "welcome":
                raise _ProtocolError(f"expected welcome first, got {first.WhichOneof('kind')}")
            welcome = first.welcome
            self._backoff.reset()
            for warning in welcome.warnings:
                log.warning("server warning: %s", warning)
            interval = self.default_heartbeat_interval
            if welcome.HasField("heartbeat_interval"):
                interval = welcome.heartbeat_interval.ToTimedelta().total_seconds() or interval
            interval = max(interval, 0.05)
            log.info("session %s established (heartbeat every %.1fs)", welcome.session_id, interval)

            self._out = out
            if self._draining:
                self._send(worker_pb2.WorkerMessage(drain=worker_pb2.WorkerMessage.Drain()))
            for message in self._outbox.pending():
                self._send(message)
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

    async def _heartbeat_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            heartbeat = worker_pb2.WorkerMessage.Heartbeat(tokens=list(self._running))
            self._send(worker_pb2.WorkerMessage(heartbeat=heartbeat))

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
                running.task.cancel()
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
                _fail_message(token, WORKER_OVER_CAPACITY, "task delivered without a free credit", True),
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
                _fail_message(
                    token,
                    TASK_NOT_REGISTERED,
                    f"this worker has no handler for {task.task}@{task.version}",
                    True,
                ),
            )
            self._grant()
            return
        ctx = TaskContext(task, self)
        is_async = inspect.iscoroutinefunction(handler)
        self._credits.start()
        future = asyncio.ensure_future(self._execute(handler, ctx, is_async))
        self._running[token] = _Running(ctx, future, is_async)

    async def _execute(self, handler: Handler, ctx: TaskContext, is_async: bool) -> None:
        span = orbit_tracing.start_task_span(ctx, self.worker_id)
        try:
            if is_async:
                output = await orbit_tracing.run_in_span(span, handler(ctx))
            else:
                output = await self._loop.run_in_executor(self._executor, handler, ctx)
            if ctx.cancelled:
                message = _fail_message(ctx.token, CANCELLED, ctx.cancel_reason or "cancelled", False)
            else:
                message = _complete_message(ctx.token, output)
        except asyncio.CancelledError:
            if not ctx.cancelled:
                raise  # the worker is stopping, not a server cancel
            message = _fail_message(ctx.token, CANCELLED, ctx.cancel_reason or "cancelled", False)
        except TaskFailure as f:
            message = _fail_message(ctx.token, f.code, f.message, f.retryable, f.details)
        except Exception as e:  # noqa: BLE001 - reported as UNHANDLED_EXCEPTION
            message = _fail_message(
                ctx.token,
                UNHANDLED_EXCEPTION,
                f"{type(e).__name__}: {e}",
                True,
                {"traceback": traceback.format_exc()},
            )
        if span is not None:
            failed = message.WhichOneof("kind") == "fail"
            orbit_tracing.end_task_span(span, message.fail.error.code if failed else None)
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


def parse_common_args(description: str, argv: Optional[List[str]] = None):
    """``--address``, ``--max-tasks``, ``--max-concurrency``, ``--worker-id``, ``--token``,
    ``--tls-ca``, ``--tls-client-cert``, ``--tls-client-key`` and ``--log-level`` for the
    example workers. The token and TLS flags default to their ``ORBIT_*`` variables (read
    by :class:`Worker` when a flag is not given)."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--address",
        default="127.0.0.1:7233",
        help="frontend host:port (TLS with --tls-ca), or http:// / https:// URL",
    )
    parser.add_argument(
        "--max-tasks", type=int, default=0, help="exit after this many tasks (0: run until a signal)"
    )
    parser.add_argument("--max-concurrency", type=int, default=10)
    parser.add_argument("--worker-id", default=None)
    parser.add_argument(
        "--token", default=None, help="bearer token sent on the session (default: $ORBIT_TOKEN)"
    )
    parser.add_argument(
        "--tls-ca",
        default=None,
        metavar="PEM",
        help="CA that signed the frontend's certificate: connect with TLS (default: $ORBIT_TLS_CA)",
    )
    parser.add_argument(
        "--tls-client-cert",
        default=None,
        metavar="PEM",
        help="client certificate for mutual TLS; needs --tls-client-key (default: $ORBIT_TLS_CLIENT_CERT)",
    )
    parser.add_argument(
        "--tls-client-key",
        default=None,
        metavar="PEM",
        help="key of --tls-client-cert (default: $ORBIT_TLS_CLIENT_KEY)",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return args


def run_example(worker_factory: Callable[..., Worker], args: Any) -> None:
    """Runs an example worker until a signal, or until ``args.max_tasks`` tasks finished
    (then drains, so their results are acknowledged before exiting). Unusable options exit
    with :data:`EXIT_USAGE`, a refusal by the server (``WorkerRejected``) with
    :data:`EXIT_REFUSED`, each after one line on stderr."""
    shutdown_holder: Dict[str, asyncio.Event] = {}
    done = [0]

    def on_task_done(ctx: TaskContext, ok: bool) -> None:
        done[0] += 1
        log.info("%s %s (%s) %s", ctx.task, ctx.step, ctx.execution_id, "completed" if ok else "failed")
        if args.max_tasks and done[0] >= args.max_tasks:
            shutdown_holder["event"].set()

    try:
        worker = worker_factory(
            address=args.address,
            worker_id=args.worker_id,
            max_concurrency=args.max_concurrency,
            bearer_token=args.token,
            tls_ca=args.tls_ca,
            tls_client_cert=args.tls_client_cert,
            tls_client_key=args.tls_client_key,
            on_task_done=on_task_done,
        )
    except (ValueError, OSError) as e:
        print(f"orbit worker: {e}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None

    tracer_provider = orbit_tracing.setup_from_env("orbit-python-worker")

    async def main() -> None:
        shutdown_holder["event"] = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, shutdown_holder["event"].set)
            except (NotImplementedError, RuntimeError):  # pragma: no cover
                pass
        await worker.run(shutdown_holder["event"])

    try:
        asyncio.run(main())
    except WorkerRejected as e:
        # Not retried (see the module doc): say why once and stop.
        print(refusal_line(e), file=sys.stderr)
        raise SystemExit(EXIT_REFUSED) from None
    finally:
        orbit_tracing.shutdown(tracer_provider)  # exports the last task spans
