/** What a handler sees: one task attempt, its cancellation signal and its heartbeat. */
import type { ServerMessage_Task } from "./gen/orbit/v1/worker.js";
import type { Duration } from "./gen/google/protobuf/duration.js";
import { TaskFailure } from "./errors.js";
import { parseTraceparent, type TraceParent } from "./tracing.js";

/** The code reported when a handler ends after the server cancelled its task. */
export const CANCELLED = "CANCELLED";

/** The worker side a context talks to (implemented by {@link Worker}). */
export interface HeartbeatSink {
  heartbeat(token: string, details: unknown): void;
}

export function durationMs(d: Duration | undefined): number | undefined {
  return d === undefined ? undefined : d.seconds * 1000 + Math.floor(d.nanos / 1e6);
}

/** One task attempt, as seen by its handler. */
export class TaskContext {
  /** Identifies this delivery (opaque). */
  readonly token: string;
  readonly executionId: string;
  readonly workflow: string;
  /** The unit key, e.g. `charge`, `reserve[2]` or `compensate:charge`. */
  readonly step: string;
  readonly task: string;
  readonly version: string;
  /** The task input (plain JSON; null when unset). */
  readonly input: any;
  /** Stable across retries and redeliveries of this unit: pass it to downstream systems. */
  readonly idempotencyKey: string;
  /** The attempt number, starting at 1. */
  readonly attempt: number;
  /** True when this attempt was delivered before to a worker that was lost. */
  readonly redelivery: boolean;
  /** When the attempt times out, if the step has a timeout. */
  readonly deadline: Date | undefined;
  /** The step's heartbeat timeout in milliseconds, if it has one. */
  readonly heartbeatTimeoutMs: number | undefined;
  /** The W3C `traceparent` of the step (empty when none). */
  readonly traceparent: string;
  /** The W3C `tracestate` of the step (empty when none). */
  readonly tracestate: string;
  /** The id of the worker running the task. */
  readonly workerId: string;
  /** Aborted when the server cancels the task (or the worker stops): observe it. */
  readonly signal: AbortSignal;
  /** Why the task was cancelled, once it was. */
  cancelReason: string | undefined;

  private readonly controller = new AbortController();

  constructor(
    task: ServerMessage_Task,
    workerId: string,
    private readonly sink: HeartbeatSink,
  ) {
    this.token = task.token;
    this.executionId = task.executionId;
    this.workflow = task.workflow;
    this.step = task.step;
    this.task = task.task;
    this.version = task.version;
    this.input = task.input ?? null;
    this.idempotencyKey = task.idempotencyKey;
    this.attempt = task.attempt;
    this.redelivery = task.redelivery;
    this.deadline = task.deadline;
    this.heartbeatTimeoutMs = durationMs(task.heartbeatTimeout);
    this.traceparent = task.traceContext?.traceparent ?? "";
    this.tracestate = task.traceContext?.tracestate ?? "";
    this.workerId = workerId;
    this.signal = this.controller.signal;
  }

  /** True once the server sent `Cancel` for this task. */
  get cancelled(): boolean {
    return this.signal.aborted;
  }

  /** The parsed `traceparent`, if any. */
  get trace(): TraceParent | undefined {
    return parseTraceparent(this.traceparent);
  }

  /**
   * Sends `Heartbeat{tokens: [this task], details}` now; `details` (JSON) is recorded as a
   * `StepHeartbeat` event, undefined records nothing but keeps the attempt alive. Dropped
   * while disconnected (the automatic heartbeats resume after the reconnect).
   */
  heartbeat(details?: unknown): void {
    this.sink.heartbeat(this.token, details);
  }

  /** Sleeps `ms` milliseconds; resolves true early when the task is cancelled. */
  sleep(ms: number): Promise<boolean> {
    if (this.cancelled) return Promise.resolve(true);
    return new Promise((resolve) => {
      const onAbort = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.signal.removeEventListener("abort", onAbort);
        resolve(false);
      }, ms);
      this.signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Throws a non-retryable `CANCELLED` {@link TaskFailure} when the task was cancelled. */
  throwIfCancelled(): void {
    if (this.cancelled) throw new TaskFailure(CANCELLED, this.cancelReason ?? "cancelled");
  }

  /** @internal Called by the worker when the server cancels the task. */
  cancel(reason: string): void {
    if (this.cancelled) return;
    this.cancelReason = reason || "cancelled by the server";
    this.controller.abort(new TaskFailure(CANCELLED, this.cancelReason));
  }
}
