"""Orbit workers and a small client in Python.

::

    from orbit_worker import Worker, NonRetryableError

    worker = Worker(["10.0.0.1:7233", "10.0.0.2:7233"], max_concurrency=8)

    @worker.task("greet", "1")
    def greet(ctx):                      # a plain function runs on a thread pool ...
        return {"greeting": f"Hello, {ctx.input['name']}!"}

    @worker.task("slow", "1")
    async def slow(ctx):                 # ... a coroutine function on the event loop
        ctx.heartbeat({"progress": 0.5})
        if await ctx.sleep(10):          # True when the server cancelled the attempt
            return None
        return {}

    worker.run_sync()                    # until SIGINT/SIGTERM, then drain

Modules: :mod:`~orbit_worker.worker` (the session protocol), :mod:`~orbit_worker.context`
(what a handler sees), :mod:`~orbit_worker.errors`, :mod:`~orbit_worker.connection` (TLS
and tokens), :mod:`~orbit_worker.client`, :mod:`~orbit_worker.tracing` (OpenTelemetry,
optional), :mod:`~orbit_worker.cli` (flags and exit codes for worker programs).
"""

from ._version import RUNTIME, SDK, __version__
from .cli import EXIT_REFUSED, EXIT_USAGE, parse_common_args, refusal_line, run_example
from .client import Client, Event, ExecutionResult
from .connection import ConnectionOptions, connection_options, split_addresses
from .context import TaskContext
from .errors import (
    CANCELLED,
    TASK_NOT_REGISTERED,
    UNHANDLED_EXCEPTION,
    WORKER_OVER_CAPACITY,
    DrainTimeout,
    NonRetryableError,
    RetryableError,
    TaskFailure,
    WorkerRejected,
)
from .flow import Backoff, Credits, Outbox
from .values import (
    MAX_DEPTH,
    MAX_PAYLOAD_BYTES,
    PAYLOAD_TOO_DEEP,
    PAYLOAD_TOO_LARGE,
    from_proto_value,
    payload_depth,
    payload_violation,
    to_proto_value,
)
from .worker import Handler, Registry, Worker

__all__ = [
    "__version__", "SDK", "RUNTIME",
    "Worker", "Registry", "Handler", "TaskContext",
    "TaskFailure", "RetryableError", "NonRetryableError", "WorkerRejected", "DrainTimeout",
    "Client", "ExecutionResult", "Event",
    "ConnectionOptions", "connection_options", "split_addresses",
    "Credits", "Outbox", "Backoff",
    "to_proto_value", "from_proto_value", "payload_depth", "payload_violation",
    "MAX_DEPTH", "MAX_PAYLOAD_BYTES", "PAYLOAD_TOO_DEEP", "PAYLOAD_TOO_LARGE",
    "UNHANDLED_EXCEPTION", "CANCELLED", "TASK_NOT_REGISTERED", "WORKER_OVER_CAPACITY",
    "EXIT_REFUSED", "EXIT_USAGE", "parse_common_args", "run_example", "refusal_line",
]
