/** `@orbit/worker`: an Orbit worker SDK and a small client for the public API. */
export { Worker, resultMessage, stderrLogger, UNHANDLED_EXCEPTION, TASK_NOT_REGISTERED, WORKER_OVER_CAPACITY } from "./worker.js";
export type { Handler, Logger, WorkerOptions, RunOptions } from "./worker.js";
export { TaskContext, CANCELLED } from "./context.js";
export { TaskFailure, WorkerRejected, DrainTimeout, retryable, nonRetryable } from "./errors.js";
export { Credits, Outbox, Backoff } from "./bookkeeping.js";
export { resolveConnection, channelCredentials, callMetadata } from "./connection.js";
export type { ConnectionConfig, ResolvedConnection } from "./connection.js";
export { checkPayload, payloadDepth, MAX_DEPTH, MAX_PAYLOAD_BYTES, PAYLOAD_TOO_DEEP, PAYLOAD_TOO_LARGE } from "./payload.js";
export type { Json } from "./payload.js";
export { parseTraceparent } from "./tracing.js";
export type { TraceParent } from "./tracing.js";
export { OrbitClient, ExecutionStatus } from "./client.js";
export type { ClientOptions, ExecutionOutcome, RateLimit } from "./client.js";
export { SDK, RUNTIME, VERSION } from "./version.js";
