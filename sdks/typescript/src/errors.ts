/** The errors a handler throws and the worker raises. */

/**
 * Throw from a handler to report `Fail{error}` with your own code. `retryable` decides
 * whether the step may run again (per its retry policy); it defaults to false.
 */
export class TaskFailure extends Error {
  readonly code: string;
  readonly retryable: boolean;
  readonly details: unknown;
  /** The message sent to the server (without the code prefix). */
  readonly failureMessage: string;
  constructor(code: string, message = "", options: { retryable?: boolean; details?: unknown } = {}) {
    super(message ? `${code}: ${message}` : code);
    this.name = "TaskFailure";
    this.code = code;
    this.failureMessage = message;
    this.retryable = options.retryable ?? false;
    this.details = options.details;
  }
}

/** Shorthand for a retryable {@link TaskFailure}. */
export function retryable(code: string, message = "", details?: unknown): TaskFailure {
  return new TaskFailure(code, message, { retryable: true, details });
}

/** Shorthand for a non-retryable {@link TaskFailure}. */
export function nonRetryable(code: string, message = "", details?: unknown): TaskFailure {
  return new TaskFailure(code, message, { retryable: false, details });
}

/**
 * The server refused the session for a reason a reconnect cannot fix (`INVALID_ARGUMENT`,
 * `PERMISSION_DENIED`, `UNAUTHENTICATED`, `UNIMPLEMENTED`). `status` is the gRPC status name.
 */
export class WorkerRejected extends Error {
  constructor(
    readonly status: string,
    readonly details: string,
  ) {
    super(`${status}: ${details}`);
    this.name = "WorkerRejected";
  }
}

/** Shutdown did not finish within the drain timeout. */
export class DrainTimeout extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DrainTimeout";
  }
}
