/**
 * A small client for Orbit's public API: start (with a priority), signal, query, update,
 * migrate, reset, fork, cancel, describe, watch and wait for an execution's result, plus
 * `ListWorkers` and the server-wide named rate limits. Same connection options as the
 * worker (TLS / mTLS, bearer token); it talks to the first address.
 */
import type { ClientReadableStream, Metadata, ServiceError } from "@grpc/grpc-js";
import {
  WorkflowServiceClient,
  type StartExecutionResponse,
  type SignalExecutionResponse,
  type UpdateExecutionResponse,
  type CancelExecutionResponse,
  type MigrateExecutionResponse,
  type StartBatchRequest,
  type BatchAction,
  type StartBatchResponse,
  type DescribeBatchRequest,
  type DescribeBatchResponse,
  type ListBatchesRequest,
  type ListBatchesResponse,
  type ListBatchItemsRequest,
  type ListBatchItemsResponse,
  type CancelBatchRequest,
  type CancelBatchResponse,
  type Batch,
  type ResetExecutionRequest,
  type ResetExecutionResponse,
  type ForkExecutionRequest,
  type ForkExecutionResponse,
  type WatchExecutionResponse,
  type ExecutionResult,
  type QueryExecutionRequest,
  type StartExecutionRequest,
  type QueryExecutionResponse,
  type DescribeExecutionRequest,
  type DescribeExecutionResponse,
  type GetHistoryRequest,
  type GetHistoryResponse,
  type ListExecutionsRequest,
  type CountExecutionsRequest,
  type CountExecutionsResponse,
  type ListSearchAttributesRequest,
  type ListSearchAttributesResponse,
  type SearchAttribute,
  type ListExecutionsResponse,
} from "./gen/orbit/v1/workflow.js";
import {
  AdminServiceClient,
  type ListWorkersRequest,
  type ListWorkersResponse,
  type RateLimit,
  type SetRateLimitRequest,
  type SetRateLimitResponse,
  type ListRateLimitsRequest,
  type ListRateLimitsResponse,
  type DeleteRateLimitRequest,
  type DeleteRateLimitResponse,
} from "./gen/orbit/v1/admin.js";
import { ExecutionStatus, type ExecutionDescription, type HistoryEvent } from "./gen/orbit/v1/common.js";
import { CHANNEL_OPTIONS, callMetadata, channelCredentials, resolveConnection, type ConnectionConfig, type ResolvedConnection } from "./connection.js";

export { ExecutionStatus };
export type { RateLimit };
export type ClientOptions = ConnectionConfig;

/** The longest rate-limit window the server accepts: 366 days. */
const MAX_PERIOD_MS = 366 * 86_400_000;

/** How a run ended, as `result` and `watch` report it. */
export type ExecutionOutcome = ExecutionResult;

type Unary<Req, Res> = (req: Req, md: Metadata, cb: (err: ServiceError | null, res?: Res) => void) => unknown;

/** A client of `WorkflowService` (and `AdminService.ListWorkers` and the rate limits). Close it when done. */
export class OrbitClient {
  private readonly conn: ResolvedConnection;
  private readonly workflows: WorkflowServiceClient;
  private readonly admin: AdminServiceClient;

  constructor(options: ClientOptions = {}) {
    this.conn = resolveConnection(options);
    const target = this.conn.targets[0];
    const creds = channelCredentials(this.conn);
    this.workflows = new WorkflowServiceClient(target, creds, CHANNEL_OPTIONS);
    this.admin = new AdminServiceClient(target, creds, CHANNEL_OPTIONS);
  }

  private unary<Req, Res>(fn: Unary<Req, Res>, client: object, req: Req): Promise<Res> {
    return new Promise((resolve, reject) => {
      fn.call(client, req, callMetadata(this.conn), (err, res) => (err ? reject(err) : resolve(res as Res)));
    });
  }

  /**
   * Starts an execution of `workflow` (latest version unless `version`). With
   * `executionId`, starting again with the same id returns the existing execution.
   * `priority` (1 to 5) orders the execution's tasks among those queued for a worker: 1 is
   * dispatched first, 5 last; without it the workflow's `priority:` applies, else 3 (a step
   * that declares its own `priority:` keeps it). Another value is refused before anything
   * is sent. `memo` is a free JSON object shown by `searchAttributes` and never indexed.
   */
  start(
    workflow: string,
    input: unknown,
    opts: { version?: string; executionId?: string; priority?: number; memo?: Record<string, unknown> } = {},
  ): Promise<StartExecutionResponse> {
    const priority = opts.priority;
    if (priority !== undefined && !(Number.isInteger(priority) && priority >= 1 && priority <= 5)) {
      return Promise.reject(new RangeError(`start: priority must be 1 (dispatched first) to 5 (last), not ${String(priority)}`));
    }
    return this.unary<StartExecutionRequest, StartExecutionResponse>(this.workflows.startExecution, this.workflows, {
      workflow,
      version: opts.version ?? "",
      input: input === undefined ? undefined : input,
      executionId: opts.executionId ?? "",
      priority: priority ?? 0,
      memo: opts.memo,
    });
  }

  /** Sends signal `name` with `payload`; `requestId` makes a retry deliver it once. */
  signal(executionId: string, name: string, payload?: unknown, opts: { requestId?: string } = {}): Promise<SignalExecutionResponse> {
    return this.unary(this.workflows.signalExecution, this.workflows, { executionId, name, payload, requestId: opts.requestId ?? "" });
  }

  /**
   * Evaluates query `name` against the execution's state; returns its JSON result. With
   * `atSeq`, against the state right after that history seq of the run (events 1..=atSeq
   * folded, with the version the run had then); 0 means now. A seq past the run's last
   * event is refused with `INVALID_ARGUMENT`.
   */
  async query(executionId: string, name: string, opts: { run?: number; atSeq?: number } = {}): Promise<unknown> {
    const res = await this.unary<QueryExecutionRequest, QueryExecutionResponse>(this.workflows.queryExecution, this.workflows, { executionId, name, run: opts.run ?? 0, atSeq: opts.atSeq ?? 0 });
    return res.result ?? null;
  }

  /**
   * Sends update `name` with `args` and waits for its result. With `opts.start`, the
   * execution is started first when it does not exist (update-with-start: the start and the
   * update's acceptance are one commit).
   */
  update(executionId: string, name: string, args?: unknown, opts: { requestId?: string; start?: StartExecutionRequest } = {}): Promise<UpdateExecutionResponse> {
    return this.unary(this.workflows.updateExecution, this.workflows, { executionId, name, args, requestId: opts.requestId ?? "", start: opts.start });
  }

  /**
   * Moves a running execution to `toVersion` of its workflow if every difference of the two
   * step graphs is safe for its state (`dryRun`: only the diff, nothing written). An unsafe
   * migration is refused with code `MIGRATION_UNSAFE` and writes nothing.
   */
  migrate(
    executionId: string,
    toVersion: string,
    opts: { dryRun?: boolean; reason?: string; requestId?: string } = {},
  ): Promise<MigrateExecutionResponse> {
    return this.unary(this.workflows.migrateExecution, this.workflows, {
      executionId,
      toVersion,
      dryRun: opts.dryRun ?? false,
      reason: opts.reason ?? "",
      requestId: opts.requestId ?? "",
    });
  }

  /**
   * Resets the execution to an earlier point of its current run — just before a step first
   * started (`{ step }`) or right after a history seq (`{ seq }`) — and goes on in the next
   * run from the state at the point. Steps that succeeded or were skipped by then are kept
   * (`plan.kept`, not run again); work open at the point, steps the old run's compensation
   * undid and every step depending on those run again (`plan.forgotten`). Signals received
   * after the point are received again unless `dropSignals`. A closed (FAILED, ...)
   * execution is reopened. `toVersion` also migrates the new run; `dryRun` only answers
   * the plan. An impossible point is refused with code `RESET_POINT_INVALID`.
   */
  reset(
    executionId: string,
    to: { step: string } | { seq: number },
    opts: { dropSignals?: boolean; toVersion?: string; reason?: string; requestId?: string; dryRun?: boolean } = {},
  ): Promise<ResetExecutionResponse> {
    const point = to as { step?: unknown; seq?: unknown };
    const hasStep = typeof point?.step === "string";
    const hasSeq = typeof point?.seq === "number";
    if (hasStep === hasSeq) {
      return Promise.reject(new TypeError("reset: give exactly one of { step } or { seq }"));
    }
    const req: ResetExecutionRequest = {
      executionId,
      to: hasStep ? { $case: "step", step: point.step as string } : { $case: "seq", seq: point.seq as number },
      dropSignals: opts.dropSignals ?? false,
      toVersion: opts.toVersion ?? "",
      reason: opts.reason ?? "",
      requestId: opts.requestId ?? "",
      dryRun: opts.dryRun ?? false,
    };
    return this.unary<ResetExecutionRequest, ResetExecutionResponse>(this.workflows.resetExecution, this.workflows, req);
  }

  /**
   * Creates execution `newExecutionId` from `executionId`'s state right after history
   * `atSeq` of its run `opts.run` (0: the current one); the source is not touched. Kept and
   * run again as for `reset`; signals the source received later are not given to the fork.
   * `version` migrates the fork right away; `dryRun` only answers the plan. Forking to the
   * same new id again answers the existing fork (`created: false`).
   */
  fork(
    executionId: string,
    atSeq: number,
    newExecutionId: string,
    opts: { run?: number; version?: string; reason?: string; dryRun?: boolean } = {},
  ): Promise<ForkExecutionResponse> {
    const req: ForkExecutionRequest = {
      executionId,
      run: opts.run ?? 0,
      atSeq,
      newExecutionId,
      version: opts.version ?? "",
      reason: opts.reason ?? "",
      dryRun: opts.dryRun ?? false,
    };
    return this.unary<ForkExecutionRequest, ForkExecutionResponse>(this.workflows.forkExecution, this.workflows, req);
  }

  /**
   * Starts a batch job that migrates every execution of `workflow` (of `opts.version` when
   * given; in `opts.statuses`, RUNNING by default) to `migrateTo`, at most
   * `opts.ratePerSecond` a second (0: 50, at most 1000). With `dryRun` nothing starts and
   * the response lists what would happen to each execution. See docs/evolving.md, "Batches".
   *
   * `opts.query` selects by the list query language (docs/queries.md), ANDed with
   * `workflow` (may be "" then), `opts.version` and `opts.statuses` (without statuses the
   * query alone decides). Instead of migrating, `opts.cancel`, `opts.terminate`,
   * `opts.signal` (with `opts.payload`) or `opts.delete` apply that single-execution call
   * to each: `startBatch("", "", { query: "workflow = 'billing'", cancel: true })`.
   */
  startBatch(
    workflow: string,
    migrateTo: string,
    opts: {
      version?: string;
      statuses?: ExecutionStatus[];
      ratePerSecond?: number;
      reason?: string;
      requestId?: string;
      dryRun?: boolean;
      resetToStep?: string;
      dropSignals?: boolean;
      query?: string;
      cancel?: boolean;
      terminate?: boolean;
      signal?: string;
      payload?: unknown;
      delete?: boolean;
    } = {},
  ): Promise<StartBatchResponse> {
    // With `resetToStep` each execution is reset to just before that step (`reset`);
    // `migrateTo` (may be "") then migrates each new run.
    let action: BatchAction["action"];
    if (opts.cancel) action = { $case: "cancel", cancel: { reason: "" } };
    else if (opts.terminate) action = { $case: "terminate", terminate: { reason: "" } };
    else if (opts.signal) action = { $case: "signal", signal: { name: opts.signal, payload: opts.payload } };
    else if (opts.delete) action = { $case: "delete", delete: {} };
    else if (opts.resetToStep)
      action = { $case: "reset", reset: { step: opts.resetToStep, dropSignals: opts.dropSignals ?? false, toVersion: migrateTo } };
    else action = { $case: "migrate", migrate: { toVersion: migrateTo } };
    return this.unary<StartBatchRequest, StartBatchResponse>(this.workflows.startBatch, this.workflows, {
      selector: { workflow, version: opts.version ?? "", statuses: opts.statuses ?? [], query: opts.query ?? "" },
      action: { action },
      ratePerSecond: opts.ratePerSecond ?? 0,
      reason: opts.reason ?? "",
      requestId: opts.requestId ?? "",
      dryRun: opts.dryRun ?? false,
    });
  }

  /** A batch with its progress (`BATCH_NOT_FOUND` when there is none). */
  async describeBatch(batchId: string): Promise<Batch> {
    const res = await this.unary<DescribeBatchRequest, DescribeBatchResponse>(this.workflows.describeBatch, this.workflows, { batchId });
    if (res.batch === undefined) throw new Error(`no batch ${batchId}`);
    return res.batch;
  }

  /**
   * One page of executions (their latest run each) matching `query` in the list query
   * language (docs/queries.md), e.g. `workflow = 'billing' AND status = 'FAILED' ORDER BY
   * created ASC`; newest first unless the query orders. `pageToken`: the previous page's
   * `nextPageToken`. A query that does not parse or type-check is refused with
   * `INVALID_QUERY`, its `ErrorInfo` metadata holding `position`, `line` and `column`.
   */
  listExecutions(query = "", opts: { pageSize?: number; pageToken?: string } = {}): Promise<ListExecutionsResponse> {
    return this.unary<ListExecutionsRequest, ListExecutionsResponse>(this.workflows.listExecutions, this.workflows, {
      statuses: [],
      workflow: "",
      version: "",
      createdAfter: undefined,
      createdBefore: undefined,
      parentId: "",
      rootId: "",
      scheduleId: "",
      pageSize: opts.pageSize ?? 0,
      pageToken: opts.pageToken ?? "",
      query,
    });
  }

  /**
   * How many executions `query` (the list query language; empty counts all) matches, in
   * total and, with `groupBy` (at most 3 of `workflow`, `version`, `status`, `schedule`,
   * `parent`, `root`), per group, largest first; each group's `values` follow `groupBy`'s
   * order (an absent value is `""`). A restricted identity counts only the workflows it may
   * read. A bad query is refused with `INVALID_QUERY`, a bad `groupBy` with
   * `INVALID_ARGUMENT`.
   */
  countExecutions(query = "", groupBy: string[] = []): Promise<CountExecutionsResponse> {
    return this.unary<CountExecutionsRequest, CountExecutionsResponse>(this.workflows.countExecutions, this.workflows, {
      query,
      groupBy,
    });
  }

  /**
   * Every attribute a list query may name (all pages): the system attributes, then the
   * declared search attributes by name (those of workflows a restricted identity may read).
   */
  async searchAttributeCatalog(): Promise<SearchAttribute[]> {
    const all: SearchAttribute[] = [];
    let pageToken = "";
    do {
      const page = await this.unary<ListSearchAttributesRequest, ListSearchAttributesResponse>(
        this.workflows.listSearchAttributes,
        this.workflows,
        { pageSize: 1000, pageToken },
      );
      all.push(...page.attributes);
      pageToken = page.nextPageToken;
    } while (pageToken);
    return all;
  }

  /** One page of batches, newest first (`pageToken`: the previous page's `nextPageToken`). */
  listBatches(opts: { pageSize?: number; pageToken?: string } = {}): Promise<ListBatchesResponse> {
    return this.unary<ListBatchesRequest, ListBatchesResponse>(this.workflows.listBatches, this.workflows, { pageSize: opts.pageSize ?? 0, pageToken: opts.pageToken ?? "" });
  }

  /** One page of a batch's per-execution outcomes, by execution id. */
  listBatchItems(batchId: string, opts: { onlyFailed?: boolean; pageSize?: number; pageToken?: string } = {}): Promise<ListBatchItemsResponse> {
    return this.unary<ListBatchItemsRequest, ListBatchItemsResponse>(this.workflows.listBatchItems, this.workflows, {
      batchId,
      pageSize: opts.pageSize ?? 0,
      pageToken: opts.pageToken ?? "",
      onlyFailed: opts.onlyFailed ?? false,
    });
  }

  /** Cancels a running batch: no further execution is acted on. */
  cancelBatch(batchId: string, reason = ""): Promise<CancelBatchResponse> {
    return this.unary<CancelBatchRequest, CancelBatchResponse>(this.workflows.cancelBatch, this.workflows, { batchId, reason });
  }

  /** Requests cancellation (compensation runs first when the workflow has any). */
  cancel(executionId: string, reason = "", opts: { requestId?: string } = {}): Promise<CancelExecutionResponse> {
    return this.unary(this.workflows.cancelExecution, this.workflows, { executionId, reason, requestId: opts.requestId ?? "" });
  }

  /**
   * The execution's status, units and pending work. With `atSeq`, as the run stood right
   * after that history seq (events 1..=atSeq folded, with the version it had then); 0 means
   * now. A seq past the run's last event is refused with `INVALID_ARGUMENT`.
   */
  async describe(executionId: string, opts: { run?: number; atSeq?: number } = {}): Promise<ExecutionDescription> {
    const res = await this.unary<DescribeExecutionRequest, DescribeExecutionResponse>(this.workflows.describeExecution, this.workflows, { executionId, run: opts.run ?? 0, atSeq: opts.atSeq ?? 0 });
    if (res.execution === undefined) throw new Error(`no description for ${executionId}`);
    return res.execution;
  }

  /**
   * The execution's current search attributes (declared in its definition, set by
   * `search:`; datetimes as RFC 3339 strings) and the memo its start gave (issue 28).
   */
  async searchAttributes(executionId: string): Promise<{ searchAttributes: Record<string, unknown>; memo?: Record<string, unknown> }> {
    const res = await this.unary<DescribeExecutionRequest, DescribeExecutionResponse>(this.workflows.describeExecution, this.workflows, { executionId, run: 0, atSeq: 0 });
    return { searchAttributes: { ...res.searchAttributes }, memo: res.memo };
  }

  /** The full history of a run (all pages). */
  async history(executionId: string, opts: { run?: number } = {}): Promise<HistoryEvent[]> {
    const events: HistoryEvent[] = [];
    let pageToken = "";
    do {
      const res = await this.unary<GetHistoryRequest, GetHistoryResponse>(this.workflows.getHistory, this.workflows, { executionId, run: opts.run ?? 0, pageSize: 0, pageToken });
      events.push(...res.events);
      pageToken = res.nextPageToken;
    } while (pageToken !== "");
    return events;
  }

  /**
   * Streams the execution's history events after `afterSeq`, then its result; the
   * iteration ends after the result. Break out of the loop to stop watching.
   */
  async *watch(
    executionId: string,
    opts: { run?: number; afterSeq?: number; resultOnly?: boolean; followContinueAsNew?: boolean } = {},
  ): AsyncGenerator<WatchExecutionResponse> {
    const stream: ClientReadableStream<WatchExecutionResponse> = this.workflows.watchExecution(
      {
        executionId,
        run: opts.run ?? 0,
        afterSeq: opts.afterSeq ?? 0,
        resultOnly: opts.resultOnly ?? false,
        followContinueAsNew: opts.followContinueAsNew ?? false,
      },
      callMetadata(this.conn),
    );
    try {
      for await (const message of stream) yield message as WatchExecutionResponse;
    } finally {
      stream.cancel();
    }
  }

  /** Waits for the execution's result (the last run's, following continue-as-new). */
  async result(executionId: string): Promise<ExecutionOutcome> {
    let last: ExecutionResult | undefined;
    for await (const m of this.watch(executionId, { resultOnly: true, followContinueAsNew: true })) {
      if (m.kind?.$case === "result") last = m.kind.result;
    }
    if (last === undefined) throw new Error(`the watch of ${executionId} ended without a result`);
    return last;
  }

  /** The connected workers (`AdminService.ListWorkers`). */
  listWorkers(opts: { onlineOnly?: boolean; task?: string; pageSize?: number; pageToken?: string } = {}): Promise<ListWorkersResponse> {
    const req: ListWorkersRequest = {
      onlineOnly: opts.onlineOnly ?? false,
      task: opts.task ?? "",
      pageSize: opts.pageSize ?? 0,
      pageToken: opts.pageToken ?? "",
    };
    return this.unary<ListWorkersRequest, ListWorkersResponse>(this.admin.listWorkers, this.admin, req);
  }

  /**
   * Creates or replaces the server-wide named rate limit `name` (`AdminService.SetRateLimit`):
   * at most `limit` task starts per window of `periodMs` milliseconds (1 ms to 366 days),
   * per bucket (the name, or the name and a step's evaluated `key:`). Windows are aligned
   * to the Unix epoch. Steps take from it with `rate_limit: {name: ...}`; a change takes
   * effect at each frontend's next claim. Answers the limit as stored (with `updatedAt`).
   */
  async setRateLimit(name: string, limit: number, periodMs: number): Promise<RateLimit> {
    if (!Number.isInteger(limit) || limit < 1) {
      throw new RangeError(`setRateLimit: limit must be a whole number of at least 1, not ${String(limit)}`);
    }
    const ms = Math.round(periodMs);
    if (!Number.isFinite(periodMs) || ms < 1 || ms > MAX_PERIOD_MS) {
      throw new RangeError(`setRateLimit: periodMs must be from 1 ms to 366 days, not ${String(periodMs)}`);
    }
    const period = { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1_000_000 };
    const res = await this.unary<SetRateLimitRequest, SetRateLimitResponse>(this.admin.setRateLimit, this.admin, {
      rateLimit: { name, limit, period, updatedAt: undefined },
    });
    if (res.rateLimit === undefined) throw new Error(`no rate limit ${name} in the answer`);
    return res.rateLimit;
  }

  /** Every server-wide named rate limit, ordered by name (`AdminService.ListRateLimits`). */
  async listRateLimits(): Promise<RateLimit[]> {
    const all: RateLimit[] = [];
    let pageToken = "";
    for (;;) {
      const req: ListRateLimitsRequest = { pageSize: 1000, pageToken };
      const res = await this.unary<ListRateLimitsRequest, ListRateLimitsResponse>(this.admin.listRateLimits, this.admin, req);
      all.push(...res.rateLimits);
      if (!res.nextPageToken) return all;
      pageToken = res.nextPageToken;
    }
  }

  /**
   * Deletes the named rate limit `name` (`AdminService.DeleteRateLimit`): attempts of steps
   * that reference it stay queued until it is set again. An unknown name is refused with
   * `RATE_LIMIT_NOT_FOUND`.
   */
  async deleteRateLimit(name: string): Promise<void> {
    await this.unary<DeleteRateLimitRequest, DeleteRateLimitResponse>(this.admin.deleteRateLimit, this.admin, { name });
  }

  close(): void {
    this.workflows.close();
    this.admin.close();
  }
}
