"""OpenTelemetry task spans for the Python Orbit worker (optional).

When the server traces (``orbit dev --otlp-endpoint ...``) every ``Task`` carries a W3C
``traceparent`` naming the step attempt's span of the execution's trace. The worker then
runs each handler inside a span ``task <name>`` that is a child of it, so the worker's work
shows in the same trace as the server's.

Export is configured like the server's, from the standard variables:
``OTEL_EXPORTER_OTLP_ENDPOINT`` (OTLP/gRPC, e.g. ``http://localhost:4317``; no export when
unset) and ``OTEL_SERVICE_NAME``. :func:`setup_from_env` installs the SDK's tracer provider
(``run_example`` calls it); an application with its own OpenTelemetry setup skips it and
the task spans go to its provider. Without the ``opentelemetry-api`` package, or without a
``traceparent``, nothing is built.
"""

from __future__ import annotations

import os
from typing import Any, Optional

try:  # the API package is optional: no tracing without it
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - tracing is optional
    trace = None  # type: ignore[assignment]

_PROPAGATOR = TraceContextTextMapPropagator() if trace is not None else None


def setup_from_env(default_service: str) -> Optional[Any]:
    """Installs an OTLP/gRPC-exporting tracer provider when ``OTEL_EXPORTER_OTLP_ENDPOINT``
    is set; returns it (for :func:`shutdown`) or ``None``."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if not endpoint or trace is None:
        return None
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = os.environ.get("OTEL_SERVICE_NAME") or default_service
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    insecure = endpoint.startswith("http://")
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=insecure), schedule_delay_millis=500)
    )
    trace.set_tracer_provider(provider)
    return provider


def shutdown(provider: Optional[Any]) -> None:
    """Flushes and stops a provider from :func:`setup_from_env`."""
    if provider is not None:
        provider.shutdown()


def start_task_span(ctx: Any, worker_id: str) -> Optional[Any]:
    """Opens the task span of ``ctx`` under its ``traceparent``; ``None`` when untraced."""
    if trace is None or not getattr(ctx, "traceparent", ""):
        return None
    carrier = {"traceparent": ctx.traceparent}
    if ctx.tracestate:
        carrier["tracestate"] = ctx.tracestate
    parent = _PROPAGATOR.extract(carrier)
    if not trace.get_current_span(parent).get_span_context().is_valid:
        return None
    return trace.get_tracer("orbit-python-worker").start_span(
        f"task {ctx.task}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            "orbit.execution_id": ctx.execution_id,
            "orbit.workflow": ctx.workflow,
            "orbit.step": ctx.step,
            "orbit.attempt": ctx.attempt,
            "orbit.task": ctx.task,
            "orbit.worker": worker_id,
        },
    )


def end_task_span(span: Optional[Any], error: Optional[str]) -> None:
    """Ends a task span, failed when ``error`` is given."""
    if span is None:
        return
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


async def run_in_span(span: Optional[Any], awaitable: Any) -> Any:
    """Awaits a coroutine handler with its task span current (so its own spans nest)."""
    if span is None:
        return await awaitable
    with trace.use_span(span, end_on_exit=False):
        return await awaitable
