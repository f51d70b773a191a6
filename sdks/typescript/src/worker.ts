/**
 * The Orbit worker: one `WorkerService/Session` stream at a time, reconnecting across
 * several frontends. The protocol as implemented (the same as the Rust `orbit-worker`
 * crate and the Python SDK):
 *
 * 1. Open `Session`, send `Hello{worker_id, runtime: "node <v>", sdk: "orbit-typescript
 *    <v>", tasks, max_concurrency, labels}`; the first server message must be `Welcome`.
 * 2. At the start of every stream: `Drain{}` first when shutting down, then every result
 *    still in the outbox again, then `Credits{n}` for the free slots.
 * 3. Each `Task` uses one credit and runs its handler (by task name and version). A task
 *    without a credit fails with `WORKER_OVER_CAPACITY`, one without a handler with
 *    `TASK_NOT_REGISTERED` (both retryable).
 * 4. A returned value becomes `Complete`; a thrown {@link TaskFailure} `Fail` with its code;
 *    anything else `Fail{UNHANDLED_EXCEPTION, retryable}` with the stack in `details`. Each
 *    result goes into the outbox, is sent, and the freed slot is granted again.
 * 5. A result leaves the outbox on `Ack`; after a reconnect the outbox is sent again.
 * 6. Right after `welcome` and then every `heartbeat_interval`: `Heartbeat{tokens: <running
 *    and unacknowledged>, complete: true}` (after a restart under the same worker id, the
 *    server redelivers at once what the previous process left); `ctx.heartbeat(details)`
 *    sends one for its task at once.
 * 7. `Cancel` aborts the task's `AbortSignal`; when the handler ends, the worker reports
 *    `Fail{CANCELLED, retryable: false}` (unless it threw its own TaskFailure).
 * 8. Shutdown (SIGTERM/SIGINT or {@link Worker.shutdown}): `Drain{}`, no more credits,
 *    running tasks finish, their acks arrive, then the stream is half-closed.
 * 9. A broken stream reconnects after a capped, jittered exponential backoff, to the next
 *    frontend when the last one failed; `INVALID_ARGUMENT`, `PERMISSION_DENIED`,
 *    `UNAUTHENTICATED` and `UNIMPLEMENTED` end `run` with {@link WorkerRejected}.
 */
import { hostname } from "node:os";
import { status as GrpcStatus, type ServiceError, type ClientDuplexStream } from "@grpc/grpc-js";
import {
  WorkerServiceClient,
  type WorkerMessage,
  type ServerMessage,
  type ServerMessage_Task,
  type ServerMessage_Welcome,
} from "./gen/orbit/v1/worker.js";
import { Backoff, Credits, Outbox } from "./bookkeeping.js";
import { CHANNEL_OPTIONS, callMetadata, channelCredentials, resolveConnection, type ConnectionConfig, type ResolvedConnection } from "./connection.js";
import { CANCELLED, TaskContext, durationMs } from "./context.js";
import { DrainTimeout, TaskFailure, WorkerRejected } from "./errors.js";
import { checkPayload } from "./payload.js";
import { loadOpenTelemetry, runInSpan } from "./tracing.js";
import { RUNTIME, SDK } from "./version.js";

export const UNHANDLED_EXCEPTION = "UNHANDLED_EXCEPTION";
export const TASK_NOT_REGISTERED = "TASK_NOT_REGISTERED";
export const WORKER_OVER_CAPACITY = "WORKER_OVER_CAPACITY";

/** A task handler: returns the task's output (JSON) or throws. */
export type Handler = (ctx: TaskContext) => unknown;

/** Where the worker logs (default: stderr, `info` and above). */
export interface Logger {
  debug(msg: string): void;
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
}

export interface WorkerOptions extends ConnectionConfig {
  /** Stable id sent in `Hello` (default `<hostname>-<pid>`); 1 to 256 bytes. */
  workerId?: string;
  /** The most tasks run at once, mapped to stream credits (default 10). */
  maxConcurrency?: number;
  /** Labels shown in `ListWorkers`; a step's `on: {key: value}` runs only on workers holding every pair. */
  labels?: Record<string, string>;
  /** How long a drain may take before `run` fails with {@link DrainTimeout} (default 30 s). */
  drainTimeoutMs?: number;
  /** How long to wait for `Welcome` (default 10 s). */
  handshakeTimeoutMs?: number;
  /** Reconnect backoff bounds (default 100 ms to 5 s). */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Heartbeat interval when the server's `Welcome` has none (default 10 s). */
  defaultHeartbeatIntervalMs?: number;
  /** Most unacknowledged results kept before credits pause (default max(256, 4 × slots)). */
  outboxCapacity?: number;
  /** Run handlers in an OpenTelemetry span when `@opentelemetry/api` is installed (default true). */
  tracing?: boolean;
  logger?: Logger;
  /** Called after each `Welcome` (e.g. to print readiness). */
  onWelcome?: (welcome: ServerMessage_Welcome, target: string) => void;
  /** Called when a task's result is reported (`ok` for `Complete`). */
  onTaskDone?: (ctx: TaskContext, ok: boolean) => void;
}

export interface RunOptions {
  /** Drains when aborted. */
  signal?: AbortSignal;
  /** Drain on SIGTERM and SIGINT (default true). */
  handleSignals?: boolean;
}

const FATAL = new Set<number>([
  GrpcStatus.INVALID_ARGUMENT,
  GrpcStatus.PERMISSION_DENIED,
  GrpcStatus.UNAUTHENTICATED,
  GrpcStatus.UNIMPLEMENTED,
]);
const CLOSE_GRACE_MS = 5000;

export const stderrLogger = (level: "debug" | "info" | "warn" | "error" = "info"): Logger => {
  const order = { debug: 0, info: 1, warn: 2, error: 3 };
  const at = (l: keyof typeof order) => (msg: string) => {
    if (order[l] >= order[level]) process.stderr.write(`${new Date().toISOString()} ${l.toUpperCase()} orbit-worker: ${msg}\n`);
  };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
};

function failMessage(token: string, code: string, message: string, retryable: boolean, details?: unknown): WorkerMessage {
  code = code || UNHANDLED_EXCEPTION;
  let detailsValue: unknown = undefined;
  if (details !== undefined) {
    const checked = checkPayload(details, "details");
    if (!checked.ok) {
      // The details cannot be sent: report the attempt failed with the payload code.
      return failMessage(token, checked.code, `${checked.message} (the task failed with ${code})`, false);
    }
    detailsValue = checked.value;
  }
  return { kind: { $case: "fail", fail: { token, error: { code, message, retryable, details: detailsValue } } } };
}

function completeMessage(token: string, output: unknown): WorkerMessage {
  const checked = checkPayload(output, "output");
  if (!checked.ok) return failMessage(token, checked.code, checked.message, false);
  return { kind: { $case: "complete", complete: { token, output: checked.value } } };
}

/** The result message for a handler's outcome (exported for the unit tests). */
export function resultMessage(ctx: TaskContext, outcome: { ok: true; value: unknown } | { ok: false; error: unknown }): WorkerMessage {
  if (outcome.ok) {
    if (ctx.cancelled) return failMessage(ctx.token, CANCELLED, ctx.cancelReason ?? "cancelled", false);
    return completeMessage(ctx.token, outcome.value);
  }
  const e = outcome.error;
  if (e instanceof TaskFailure) return failMessage(ctx.token, e.code, e.failureMessage, e.retryable, e.details);
  if (ctx.cancelled) return failMessage(ctx.token, CANCELLED, ctx.cancelReason ?? "cancelled", false);
  const err = e instanceof Error ? e : new Error(String(e));
  return failMessage(ctx.token, UNHANDLED_EXCEPTION, `${err.name}: ${err.message}`, true, { stack: err.stack ?? "" });
}

class ProtocolError extends Error {}

/** An Orbit worker. Register handlers, then `await worker.run()`. */
export class Worker {
  readonly workerId: string;
  readonly maxConcurrency: number;
  private readonly opts: WorkerOptions;
  private readonly conn: ResolvedConnection;
  private readonly log: Logger;
  private readonly handlers = new Map<string, { name: string; version: string; handler: Handler }>();
  private readonly credits: Credits;
  private readonly outbox: Outbox<WorkerMessage>;
  private readonly backoff: Backoff;
  private readonly running = new Map<string, TaskContext>();
  private draining = false;
  private drainExpired = false;
  private drainTimer: NodeJS.Timeout | undefined;
  private call: ClientDuplexStream<WorkerMessage, ServerMessage> | null = null;
  private closeSession: ((error?: Error) => void) | null = null;
  private halfClose: (() => void) | null = null;
  private wakeOffline: (() => void) | null = null;
  private targetIndex = 0;
  private otel: unknown = null;

  constructor(options: WorkerOptions = {}) {
    this.opts = options;
    this.maxConcurrency = options.maxConcurrency ?? 10;
    if (!Number.isInteger(this.maxConcurrency) || this.maxConcurrency < 1) {
      throw new Error("maxConcurrency must be an integer of at least 1");
    }
    this.workerId = options.workerId || `${hostname() || "node-worker"}-${process.pid}`;
    const idBytes = Buffer.byteLength(this.workerId);
    if (idBytes < 1 || idBytes > 256) throw new Error("workerId must be 1 to 256 bytes");
    this.conn = resolveConnection(options);
    if (this.conn.tls) channelCredentials(this.conn); // a missing or unreadable file fails now
    this.log = options.logger ?? stderrLogger();
    this.credits = new Credits(this.maxConcurrency);
    this.outbox = new Outbox(options.outboxCapacity ?? Math.max(256, 4 * this.maxConcurrency));
    this.backoff = new Backoff(options.backoffInitialMs ?? 100, options.backoffMaxMs ?? 5000);
  }

  /** Registers `handler` for task `name` at contract `version` ("" serves any version). */
  register(name: string, version: string, handler: Handler): this {
    if (!name) throw new Error("task name must not be empty");
    this.handlers.set(`${name}\u0000${version}`, { name, version, handler });
    return this;
  }

  /** The `Hello` this worker sends. */
  hello(): WorkerMessage {
    return {
      kind: {
        $case: "hello",
        hello: {
          workerId: this.workerId,
          runtime: RUNTIME,
          sdk: SDK,
          tasks: [...this.handlers.values()].map(({ name, version }) => ({ name, version })),
          maxConcurrency: this.maxConcurrency,
          labels: { ...(this.opts.labels ?? {}) },
        },
      },
    };
  }

  /** Tasks running now. */
  get inFlight(): number {
    return this.running.size;
  }

  /** Starts a graceful drain: no new tasks, running ones finish and are acknowledged. */
  shutdown(): void {
    if (this.draining) return;
    this.log.info(`draining: ${this.running.size} running, ${this.outbox.size} unacknowledged`);
    this.draining = true;
    this.drainTimer = setTimeout(() => {
      this.drainExpired = true;
      this.closeSession?.(new DrainTimeout(`${this.running.size} task(s) still running, ${this.outbox.size} result(s) not acknowledged`));
      this.wakeOffline?.();
    }, this.opts.drainTimeoutMs ?? 30_000);
    this.send({ kind: { $case: "drain", drain: {} } });
    this.checkDone();
  }

  /**
   * Runs until shut down and drained. Rejects with {@link WorkerRejected} when the server
   * refuses the worker, {@link DrainTimeout} when the drain takes too long.
   */
  async run(options: RunOptions = {}): Promise<void> {
    if (this.handlers.size === 0) throw new Error("register at least one task");
    if (this.opts.tracing !== false) this.otel = await loadOpenTelemetry();
    const onSignal = () => this.shutdown();
    const handleSignals = options.handleSignals ?? true;
    if (handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    if (options.signal) {
      if (options.signal.aborted) this.shutdown();
      else options.signal.addEventListener("abort", onSignal, { once: true });
    }
    try {
      while (!this.isDone()) {
        if (this.drainExpired) throw this.drainTimeoutError();
        const target = this.conn.targets[this.targetIndex % this.conn.targets.length];
        try {
          if (await this.session(target)) return;
          this.log.info(`the server closed the session on ${target}; reconnecting`);
        } catch (e) {
          if (e instanceof DrainTimeout) throw e;
          const se = e as Partial<ServiceError>;
          if (typeof se.code === "number" && FATAL.has(se.code)) {
            throw new WorkerRejected(GrpcStatus[se.code] ?? String(se.code), se.details ?? se.message ?? "");
          }
          // Move to the next frontend: this one is unreachable or broke the stream.
          this.targetIndex = (this.targetIndex + 1) % this.conn.targets.length;
          const name = typeof se.code === "number" ? GrpcStatus[se.code] : "error";
          this.log.warn(`worker session on ${target} lost (${name}: ${se.details ?? (e as Error).message}); reconnecting`);
        }
        await this.sleepOffline(this.backoff.nextDelay());
      }
      if (this.drainExpired) throw this.drainTimeoutError();
    } finally {
      if (handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      options.signal?.removeEventListener("abort", onSignal);
      clearTimeout(this.drainTimer);
      for (const ctx of this.running.values()) ctx.cancel("worker stopped");
      this.running.clear();
    }
  }

  private drainTimeoutError(): DrainTimeout {
    return new DrainTimeout(`${this.running.size} task(s) still running, ${this.outbox.size} result(s) not acknowledged`);
  }

  private isDone(): boolean {
    return this.draining && this.running.size === 0 && this.outbox.size === 0;
  }

  private sleepOffline(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wakeOffline = () => {
        this.wakeOffline = null;
        done();
      };
    });
  }

  /** One stream. Resolves true when the drain completed, false when the server ended it. */
  private session(target: string): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      const client = new WorkerServiceClient(target, channelCredentials(this.conn), CHANNEL_OPTIONS);
      const call = client.session(callMetadata(this.conn));
      let welcomed = false;
      let settled = false;
      let closing = false;
      let heartbeats: NodeJS.Timeout | undefined;
      let grace: NodeJS.Timeout | undefined;
      const handshake = setTimeout(
        () => finish(new ProtocolError(`no welcome from ${target} within ${this.opts.handshakeTimeoutMs ?? 10_000} ms`)),
        this.opts.handshakeTimeoutMs ?? 10_000,
      );
      const finish = (error?: Error, drained = false) => {
        if (settled) return;
        settled = true;
        clearTimeout(handshake);
        clearInterval(heartbeats);
        clearTimeout(grace);
        if (this.call === call) {
          this.call = null;
          this.closeSession = null;
          this.halfClose = null;
        }
        this.credits.streamReset();
        call.cancel();
        client.close();
        if (error) reject(error);
        else resolve(drained);
      };
      call.on("data", (message: ServerMessage) => {
        if (settled) return;
        if (welcomed) return this.onServerMessage(message);
        if (message.kind?.$case !== "welcome") {
          return finish(new ProtocolError(`expected welcome first, got ${message.kind?.$case}`));
        }
        welcomed = true;
        clearTimeout(handshake);
        const welcome = message.kind.welcome;
        this.backoff.reset();
        for (const w of welcome.warnings) this.log.warn(`server warning: ${w}`);
        const interval = Math.max(durationMs(welcome.heartbeatInterval) || (this.opts.defaultHeartbeatIntervalMs ?? 10_000), 50);
        this.log.info(`session ${welcome.sessionId} established on ${target} (heartbeat every ${interval} ms)`);
        this.call = call;
        this.closeSession = (e) => finish(e);
        this.halfClose = () => {
          if (closing) return;
          closing = true;
          // Nothing is written after the half-close (a write after end errors the call).
          clearInterval(heartbeats);
          this.call = null;
          call.end();
          // The server ends its side after our half-close; do not wait forever for it.
          grace = setTimeout(() => finish(undefined, true), CLOSE_GRACE_MS);
        };
        if (this.draining) this.send({ kind: { $case: "drain", drain: {} } });
        for (const m of this.outbox.pending()) this.send(m);
        const heartbeatAll = () => {
          const tokens = [...this.running.keys(), ...this.outbox.tokens()];
          this.send({ kind: { $case: "heartbeat", heartbeat: { tokens, details: undefined, complete: true } } });
        };
        heartbeatAll();
        this.grant();
        heartbeats = setInterval(heartbeatAll, interval);
        try {
          this.opts.onWelcome?.(welcome, target);
        } catch (e) {
          this.log.error(`onWelcome failed: ${(e as Error).message}`);
        }
        this.checkDone();
      });
      call.on("error", (e: Error) => finish(e));
      call.on("end", () => finish(undefined, closing));
      call.write(this.hello());
    });
  }

  private send(message: WorkerMessage): void {
    this.call?.write(message);
  }

  private grant(): void {
    if (this.draining || this.outbox.isFull() || this.call === null) return;
    const n = this.credits.grant();
    if (n > 0) this.send({ kind: { $case: "credits", credits: { n } } });
  }

  private report(token: string, message: WorkerMessage): void {
    this.outbox.push(token, message);
    this.send(message);
  }

  private checkDone(): void {
    if (this.isDone()) {
      this.halfClose?.();
      this.wakeOffline?.();
    }
  }

  private onServerMessage(message: ServerMessage): void {
    const kind = message.kind;
    switch (kind?.$case) {
      case "task":
        return this.onTask(kind.task);
      case "ack": {
        const { token, accepted, reason } = kind.ack;
        if (this.outbox.ack(token) && !accepted) this.log.debug(`result for ${token} recorded but not applied: ${reason}`);
        this.grant();
        return this.checkDone();
      }
      case "cancel": {
        const ctx = this.running.get(kind.cancel.token);
        if (ctx === undefined) return this.log.debug(`cancel for a task not running here: ${kind.cancel.token}`);
        return ctx.cancel(kind.cancel.reason);
      }
      case "ping":
        return; // keepalive; not answered
      case "welcome":
        return this.log.warn("ignoring a second welcome on the same stream");
    }
  }

  private onTask(task: ServerMessage_Task): void {
    const token = task.token;
    if (!this.credits.take()) {
      this.log.warn(`the server sent task ${token} without a credit; refusing it`);
      return this.report(token, failMessage(token, WORKER_OVER_CAPACITY, "task delivered without a free credit", true));
    }
    if (this.running.has(token)) return this.grant();
    const previous = this.outbox.get(token);
    if (previous !== undefined) {
      this.send(previous);
      return this.grant();
    }
    // A handler registered with version "" serves every version of its task (the server
    // treats an empty version in Hello the same way).
    const entry = this.handlers.get(`${task.task}\u0000${task.version}`) ?? this.handlers.get(`${task.task}\u0000`);
    if (entry === undefined) {
      this.report(token, failMessage(token, TASK_NOT_REGISTERED, `this worker has no handler for ${task.task}@${task.version}`, true));
      return this.grant();
    }
    const ctx = new TaskContext(task, this.workerId, this);
    this.credits.start();
    this.running.set(token, ctx);
    void this.execute(entry.handler, ctx);
  }

  private async execute(handler: Handler, ctx: TaskContext): Promise<void> {
    let outcome: { ok: true; value: unknown } | { ok: false; error: unknown };
    try {
      const run = async () => handler(ctx);
      outcome = { ok: true, value: this.otel ? await runInSpan(this.otel, ctx, run) : await run() };
    } catch (error) {
      outcome = { ok: false, error };
    }
    if (this.running.get(ctx.token) !== ctx) return; // the worker stopped meanwhile
    this.running.delete(ctx.token);
    this.credits.finish();
    const message = resultMessage(ctx, outcome);
    this.report(ctx.token, message);
    this.grant();
    try {
      this.opts.onTaskDone?.(ctx, message.kind?.$case === "complete");
    } catch (e) {
      this.log.error(`onTaskDone failed: ${(e as Error).message}`);
    }
    this.checkDone();
  }

  /** @internal The heartbeat of one task (from {@link TaskContext.heartbeat}). */
  heartbeat(token: string, details: unknown): void {
    if (!this.running.has(token)) return;
    let value: unknown = undefined;
    if (details !== undefined) {
      const checked = checkPayload(details, "heartbeat details");
      // The server would fail the attempt: keep it alive without the details.
      if (!checked.ok) this.log.warn(`heartbeat details dropped: ${checked.message}`);
      else value = checked.value;
    }
    this.send({ kind: { $case: "heartbeat", heartbeat: { tokens: [token], details: value, complete: false } } });
  }
}
