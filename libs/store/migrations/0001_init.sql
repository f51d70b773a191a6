-- 0001: the base schema of ARCHITECTURE.md ("Data").
--
-- One text for PostgreSQL and SQLite. Portability rules:
--   * times are epoch milliseconds in BIGINT columns named *_at;
--   * JSON is stored as TEXT (PostgreSQL may move to JSONB in a later migration);
--   * `BIGSERIAL PRIMARY KEY` is the only dialect-specific token: the SQLite backend
--     rewrites it to `INTEGER PRIMARY KEY AUTOINCREMENT` (ids are never reused).

-- Immutable per (name, version); `id` gives the registration order ("latest").
CREATE TABLE workflow_definitions (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    document TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (name, version)
);

-- Projection of the history, written in the same transaction as the events.
CREATE TABLE executions (
    execution_id TEXT PRIMARY KEY,
    run BIGINT NOT NULL,
    root_id TEXT NOT NULL,
    parent_id TEXT,
    workflow TEXT NOT NULL,
    version TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    schedule_id TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    closed_at BIGINT,
    last_seq BIGINT NOT NULL
);
CREATE INDEX executions_by_created ON executions (created_at, execution_id);
CREATE INDEX executions_by_status ON executions (status, created_at);
CREATE INDEX executions_by_workflow ON executions (workflow, created_at);
CREATE INDEX executions_by_parent ON executions (parent_id);
CREATE INDEX executions_by_root ON executions (root_id);

-- The source of truth. `payload` is the serde JSON of the engine's `Event`.
CREATE TABLE history_events (
    execution_id TEXT NOT NULL,
    run BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    event_type TEXT NOT NULL,
    step TEXT,
    origin TEXT NOT NULL,
    payload TEXT NOT NULL,
    timestamp BIGINT NOT NULL,
    PRIMARY KEY (execution_id, run, seq)
);

-- Membership; the database clock decides liveness.
CREATE TABLE nodes (
    node_id TEXT PRIMARY KEY,
    service TEXT NOT NULL,
    incarnation TEXT NOT NULL,
    addr TEXT,
    heartbeat_at BIGINT NOT NULL,
    started_at BIGINT NOT NULL
);

-- One owner per running execution; every append is fenced by `epoch`.
CREATE TABLE owners (
    execution_id TEXT PRIMARY KEY,
    root_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    since BIGINT NOT NULL
);
CREATE INDEX owners_by_node ON owners (node_id);
CREATE INDEX owners_by_root ON owners (root_id);

-- One row per offer of a worker task: queued -> claimed -> done | cancelled.
CREATE TABLE task_queue (
    id BIGSERIAL PRIMARY KEY,
    execution_id TEXT NOT NULL,
    run BIGINT NOT NULL,
    unit_key TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    offer BIGINT NOT NULL,
    task TEXT NOT NULL,
    task_version TEXT NOT NULL,
    input TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    state TEXT NOT NULL,
    claimed_by TEXT,
    session TEXT,
    token TEXT,
    claim_count BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    claimed_at BIGINT,
    updated_at BIGINT NOT NULL,
    UNIQUE (execution_id, run, unit_key, attempt, offer)
);
CREATE INDEX task_queue_queued ON task_queue (task, id) WHERE state = 'queued';
CREATE INDEX task_queue_by_token ON task_queue (token);
CREATE INDEX task_queue_by_session ON task_queue (session);
CREATE INDEX task_queue_by_execution ON task_queue (execution_id, state);

-- Commands for an execution's owner, and the replies for callers that wait.
CREATE TABLE inbox (
    seq BIGSERIAL PRIMARY KEY,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    token TEXT,
    payload TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    done_at BIGINT,
    result TEXT
);
CREATE INDEX inbox_pending ON inbox (execution_id, seq) WHERE done_at IS NULL;

-- Durable timers, written and deleted with the events that create and consume them.
CREATE TABLE timers (
    execution_id TEXT NOT NULL,
    timer_key TEXT NOT NULL,
    run BIGINT NOT NULL,
    fire_at BIGINT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (execution_id, timer_key)
);
CREATE INDEX timers_by_fire_at ON timers (fire_at, execution_id, timer_key);

-- Live worker streams (one per session) and the worker registry.
CREATE TABLE worker_sessions (
    session_id TEXT PRIMARY KEY,
    worker_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    runtime TEXT NOT NULL,
    contracts TEXT NOT NULL,
    registered_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL
);
CREATE INDEX worker_sessions_by_worker ON worker_sessions (worker_id);

CREATE TABLE workers (
    worker_id TEXT PRIMARY KEY,
    runtime TEXT NOT NULL,
    sdk TEXT,
    contracts TEXT NOT NULL,
    registered_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL
);

-- Cron/interval schedules: spec, progress and the claim of the firing scheduler.
CREATE TABLE schedules (
    schedule_id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    paused BIGINT NOT NULL,
    next_fire_at BIGINT,
    due_at BIGINT,
    last_fire_at BIGINT,
    last_execution_id TEXT,
    fired_count BIGINT NOT NULL,
    skipped_count BIGINT NOT NULL,
    last_error TEXT,
    claimed_by TEXT,
    claimed_until BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX schedules_by_due ON schedules (due_at);
