/**
 * W3C trace context. Every task carries the `traceparent` (and `tracestate`) of its step;
 * the worker exposes them on the context and, when `@opentelemetry/api` is installed (an
 * optional peer dependency), runs the handler inside a span that joins the execution's
 * trace. Without it, tracing costs nothing.
 */

/** The parts of a W3C `traceparent` header (`00-<trace-id>-<span-id>-<flags>`). */
export interface TraceParent {
  traceId: string;
  spanId: string;
  traceFlags: number;
}

/** Parses a `traceparent`; undefined when it is empty or malformed. */
export function parseTraceparent(header: string | undefined): TraceParent | undefined {
  if (!header) return undefined;
  const m = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(header.trim());
  if (!m || m[1] === "ff" || /^0+$/.test(m[2]) || /^0+$/.test(m[3])) return undefined;
  return { traceId: m[2], spanId: m[3], traceFlags: parseInt(m[4], 16) };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type OtelApi = any;
let otel: OtelApi | null | undefined;

/** Loads `@opentelemetry/api` once; null when it is not installed. */
export async function loadOpenTelemetry(): Promise<OtelApi | null> {
  if (otel !== undefined) return otel;
  const name = "@opentelemetry/api"; // a variable: the SDK builds without the package
  try {
    otel = await import(name);
  } catch {
    otel = null;
  }
  return otel;
}

/** What a task span records. */
export interface SpanInfo {
  task: string;
  version: string;
  executionId: string;
  step: string;
  attempt: number;
  workerId: string;
  traceparent: string;
  tracestate: string;
}

/**
 * Runs `fn` in a consumer span `orbit.task <task>` whose parent is the task's
 * `traceparent`, when OpenTelemetry is loaded; runs it plainly otherwise.
 */
export async function runInSpan<T>(api: OtelApi | null, info: SpanInfo, fn: () => Promise<T>): Promise<T> {
  if (!api) return fn();
  let parent = api.context.active();
  const tp = parseTraceparent(info.traceparent);
  if (tp) {
    parent = api.trace.setSpanContext(parent, {
      traceId: tp.traceId,
      spanId: tp.spanId,
      traceFlags: tp.traceFlags,
      isRemote: true,
      traceState: info.tracestate && api.createTraceState ? api.createTraceState(info.tracestate) : undefined,
    });
  }
  const tracer = api.trace.getTracer("orbit-typescript");
  const attributes = {
    "orbit.task": info.task,
    "orbit.task.version": info.version,
    "orbit.execution_id": info.executionId,
    "orbit.step": info.step,
    "orbit.attempt": info.attempt,
    "orbit.worker_id": info.workerId,
  };
  return tracer.startActiveSpan(
    `orbit.task ${info.task}`,
    { kind: api.SpanKind?.CONSUMER ?? 4, attributes },
    parent,
    async (span: OtelApi) => {
      try {
        return await fn();
      } catch (e) {
        span.setStatus({ code: api.SpanStatusCode?.ERROR ?? 2, message: String((e as Error)?.message ?? e) });
        throw e;
      } finally {
        span.end();
      }
    },
  );
}
