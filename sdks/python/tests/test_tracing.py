"""orbit_worker.tracing: the task span is the child of the attempt span named by traceparent."""

from types import SimpleNamespace

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orbit_worker import tracing as orbit_tracing

EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def ctx(traceparent: str) -> SimpleNamespace:
    return SimpleNamespace(
        traceparent=traceparent,
        tracestate="",
        task="charge",
        execution_id="e-1",
        workflow="orders",
        step="charge",
        attempt=2,
    )


def test_task_span_is_child_of_the_attempt_span():
    EXPORTER.clear()
    span = orbit_tracing.start_task_span(ctx(f"00-{TRACE}-{PARENT}-01"), "w-1")
    orbit_tracing.end_task_span(span, None)
    (got,) = EXPORTER.get_finished_spans()
    assert got.name == "task charge"
    assert format(got.context.trace_id, "032x") == TRACE
    assert format(got.parent.span_id, "016x") == PARENT
    assert got.attributes["orbit.worker"] == "w-1"
    assert got.attributes["orbit.attempt"] == 2


def test_failed_task_marks_the_span_and_untraced_tasks_build_none():
    EXPORTER.clear()
    span = orbit_tracing.start_task_span(ctx(f"00-{TRACE}-{PARENT}-01"), "w-1")
    orbit_tracing.end_task_span(span, "CARD_DECLINED")
    (got,) = EXPORTER.get_finished_spans()
    assert got.status.status_code == trace.StatusCode.ERROR
    assert orbit_tracing.start_task_span(ctx(""), "w-1") is None
    assert orbit_tracing.start_task_span(ctx("garbage"), "w-1") is None
    # Not sampled upstream: the parent-based default sampler records nothing.
    EXPORTER.clear()
    span = orbit_tracing.start_task_span(ctx(f"00-{TRACE}-{PARENT}-00"), "w-1")
    orbit_tracing.end_task_span(span, None)
    assert EXPORTER.get_finished_spans() == ()
