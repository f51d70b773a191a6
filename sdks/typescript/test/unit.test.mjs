// Unit tests of the pure parts: credits, outbox, backoff, connection options, payload
// limits, trace context, result mapping, the Hello identity and the client's argument checks.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  Backoff,
  CANCELLED,
  Credits,
  MAX_DEPTH,
  OrbitClient,
  Outbox,
  RUNTIME,
  SDK,
  TaskContext,
  TaskFailure,
  UNHANDLED_EXCEPTION,
  VERSION,
  Worker,
  checkPayload,
  callMetadata,
  parseTraceparent,
  resolveConnection,
  resultMessage,
} from "../dist/index.js";

test("credits never exceed the slots and reset per stream", () => {
  const c = new Credits(3);
  assert.equal(c.grant(), 3);
  assert.equal(c.grant(), 0);
  assert.ok(c.take());
  c.start();
  assert.equal(c.grant(), 0, "running + outstanding = max");
  c.finish();
  assert.equal(c.grant(), 1);
  c.streamReset();
  assert.equal(c.outstanding, 0);
  assert.equal(c.grant(), 3);
  c.streamReset();
  assert.equal(c.take(), false, "a task without a credit is refused");
});

test("outbox keeps results until acked, oldest first", () => {
  const o = new Outbox(2);
  o.push("a", 1);
  o.push("b", 2);
  assert.ok(o.isFull());
  assert.deepEqual(o.pending(), [1, 2]);
  assert.equal(o.ack("a"), true);
  assert.equal(o.ack("a"), false);
  assert.deepEqual(o.pending(), [2]);
  assert.equal(o.get("b"), 2);
  assert.equal(o.size, 1);
});

test("backoff doubles up to the cap, jittered into [base/2, base], and resets", () => {
  const lo = new Backoff(100, 400, () => 0);
  assert.deepEqual([lo.nextDelay(), lo.nextDelay(), lo.nextDelay(), lo.nextDelay()], [50, 100, 200, 200]);
  lo.reset();
  assert.equal(lo.nextDelay(), 50);
  const hi = new Backoff(100, 400, () => 1);
  assert.deepEqual([hi.nextDelay(), hi.nextDelay(), hi.nextDelay(), hi.nextDelay()], [100, 200, 400, 400]);
});

test("connection options: addresses, TLS rules and the token", () => {
  const env = {};
  assert.deepEqual(resolveConnection({ env }).targets, ["127.0.0.1:7233"]);
  const multi = resolveConnection({ env: { ORBIT_ADDRESSES: "a:1, http://b:2/" } });
  assert.deepEqual(multi.targets, ["a:1", "b:2"]);
  assert.equal(multi.tls, false);
  assert.deepEqual(resolveConnection({ address: ["x:1", "y:2"], env }).targets, ["x:1", "y:2"]);
  const tls = resolveConnection({ address: "h:1", env: { ORBIT_TLS_CA: "ca.pem" } });
  assert.equal(tls.tls, true, "a CA turns TLS on for a bare host:port");
  assert.throws(() => resolveConnection({ address: "https://h:1", env }), /needs a TLS CA/);
  assert.throws(() => resolveConnection({ address: "http://h:1", tlsCa: "ca.pem", env }), /is http:\/\//);
  assert.throws(() => resolveConnection({ address: "h:1", tlsCa: "ca", tlsClientCert: "c", env }), /needs its key/);
  assert.throws(() => resolveConnection({ address: "ftp://h:1", env }), /scheme/);
  assert.throws(() => resolveConnection({ address: "h:1/x", env }), /not host:port/);
  assert.throws(() => resolveConnection({ token: "a b", env }), /printable ASCII/);
  const md = callMetadata(resolveConnection({ env: { ORBIT_TOKEN: "s3cret" } }));
  assert.deepEqual(md.get("authorization"), ["Bearer s3cret"]);
  assert.deepEqual(callMetadata(resolveConnection({ token: "", env: { ORBIT_TOKEN: "x" } })).get("authorization"), []);
});

test("payloads are normalised to JSON and checked against the limits", () => {
  assert.deepEqual(checkPayload({ a: undefined, d: new Date(0) }, "output"), {
    ok: true,
    value: { d: "1970-01-01T00:00:00.000Z" },
  });
  assert.deepEqual(checkPayload(undefined, "output"), { ok: true, value: undefined });
  let deep = 1;
  for (let i = 0; i < MAX_DEPTH + 1; i++) deep = [deep];
  assert.equal(checkPayload(deep, "output").code, "PAYLOAD_TOO_DEEP");
  assert.equal(checkPayload("x".repeat(2 * 1024 * 1024 + 1), "output").code, "PAYLOAD_TOO_LARGE");
});

test("traceparent parsing", () => {
  const tp = parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  assert.deepEqual(tp, { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", traceFlags: 1 });
  assert.equal(parseTraceparent(""), undefined);
  assert.equal(parseTraceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), undefined);
  assert.equal(parseTraceparent("garbage"), undefined);
});

function context(sink = { heartbeat() {} }) {
  return new TaskContext(
    {
      token: "t1",
      executionId: "e1",
      workflow: "wf",
      step: "s",
      task: "t",
      version: "1",
      input: { x: 1 },
      idempotencyKey: "k",
      attempt: 2,
      redelivery: true,
      deadline: undefined,
      traceContext: { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracestate: "" },
      heartbeatTimeout: { seconds: 3, nanos: 500_000_000 },
    },
    "w1",
    sink,
  );
}

test("the context exposes the attempt and delivers cancellation through its signal", async () => {
  const beats = [];
  const ctx = context({ heartbeat: (token, details) => beats.push([token, details]) });
  assert.equal(ctx.attempt, 2);
  assert.equal(ctx.idempotencyKey, "k");
  assert.equal(ctx.redelivery, true);
  assert.equal(ctx.heartbeatTimeoutMs, 3500);
  assert.equal(ctx.trace.spanId, "00f067aa0ba902b7");
  ctx.heartbeat({ n: 1 });
  assert.deepEqual(beats, [["t1", { n: 1 }]]);
  const sleeping = ctx.sleep(60_000);
  ctx.cancel("execution cancelled");
  assert.equal(await sleeping, true, "sleep ends early on cancel");
  assert.ok(ctx.signal.aborted);
  assert.equal(ctx.cancelReason, "execution cancelled");
  assert.throws(() => ctx.throwIfCancelled(), (e) => e instanceof TaskFailure && e.code === CANCELLED);
});

test("handler outcomes map to Complete and Fail", () => {
  const ok = resultMessage(context(), { ok: true, value: { y: 2 } });
  assert.deepEqual(ok.kind, { $case: "complete", complete: { token: "t1", output: { y: 2 } } });
  const failed = resultMessage(context(), { ok: false, error: new TaskFailure("FLAKY", "attempt 1", { retryable: true }) });
  assert.deepEqual(failed.kind.fail.error, { code: "FLAKY", message: "attempt 1", retryable: true, details: undefined });
  const boom = resultMessage(context(), { ok: false, error: new TypeError("boom") });
  assert.equal(boom.kind.fail.error.code, UNHANDLED_EXCEPTION);
  assert.equal(boom.kind.fail.error.retryable, true);
  assert.match(boom.kind.fail.error.details.stack, /TypeError: boom/);
  const c = context();
  c.cancel("stop");
  const cancelled = resultMessage(c, { ok: false, error: c.signal.reason ?? new Error("aborted") });
  assert.equal(cancelled.kind.fail.error.code, CANCELLED);
  const c2 = context();
  c2.cancel("stop");
  const returned = resultMessage(c2, { ok: true, value: 1 });
  assert.deepEqual([returned.kind.fail.error.code, returned.kind.fail.error.retryable], [CANCELLED, false]);
});

test("Hello carries the SDK and runtime strings and the registered tasks", () => {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url)));
  assert.equal(VERSION, pkg.version);
  assert.equal(SDK, `orbit-typescript ${pkg.version}`);
  assert.equal(RUNTIME, `node ${process.versions.node}`);
  const w = new Worker({ workerId: "w-1", maxConcurrency: 4, labels: { zone: "z" }, env: {} });
  w.register("greet", "1", () => ({})).register("bench.step", "", (c) => c.input);
  const hello = w.hello().kind.hello;
  assert.equal(hello.workerId, "w-1");
  assert.equal(hello.sdk, SDK);
  assert.equal(hello.maxConcurrency, 4);
  assert.deepEqual(hello.tasks, [
    { name: "greet", version: "1" },
    { name: "bench.step", version: "" },
  ]);
  assert.deepEqual(hello.labels, { zone: "z" });
  assert.throws(() => new Worker({ maxConcurrency: 0, env: {} }), /at least 1/);
});

test("with OpenTelemetry, the handler runs in a span whose parent is the task's traceparent", async () => {
  const { runInSpan } = await import("../dist/tracing.js");
  const spans = [];
  // The parts of @opentelemetry/api the SDK uses, recording what it is asked to do.
  const api = {
    context: { active: () => ({ root: true }) },
    trace: {
      setSpanContext: (ctx, spanContext) => ({ ...ctx, spanContext }),
      getTracer: (name) => ({
        startActiveSpan(spanName, options, parent, fn) {
          const span = { name: spanName, tracer: name, options, parent, ended: false, status: undefined };
          span.end = () => (span.ended = true);
          span.setStatus = (s) => (span.status = s);
          spans.push(span);
          return fn(span);
        },
      }),
    },
    SpanKind: { CONSUMER: 4 },
    SpanStatusCode: { ERROR: 2 },
  };
  const info = {
    task: "greet",
    version: "1",
    executionId: "e1",
    step: "s",
    attempt: 1,
    workerId: "w",
    traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    tracestate: "",
  };
  assert.equal(await runInSpan(api, info, async () => 42), 42);
  await assert.rejects(runInSpan(api, { ...info, traceparent: "" }, async () => { throw new Error("no"); }));
  assert.equal(spans.length, 2);
  assert.equal(spans[0].name, "orbit.task greet");
  assert.equal(spans[0].options.kind, 4);
  assert.equal(spans[0].options.attributes["orbit.execution_id"], "e1");
  assert.deepEqual(spans[0].parent.spanContext, {
    traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
    spanId: "00f067aa0ba902b7",
    traceFlags: 1,
    isRemote: true,
    traceState: undefined,
  });
  assert.ok(spans[0].ended && spans[1].ended);
  assert.equal(spans[1].parent.spanContext, undefined, "no traceparent: the active context");
  assert.equal(spans[1].status.code, 2);
  // Without the API the handler simply runs.
  assert.equal(await runInSpan(null, info, async () => "plain"), "plain");
});

test("a reset names exactly one point before anything is sent", async () => {
  // Nothing listens on the address: the refusal comes before a call would fail.
  const client = new OrbitClient({ address: "127.0.0.1:1" });
  try {
    for (const bad of [{}, { step: "a", seq: 3 }, { seq: "3" }]) {
      await assert.rejects(client.reset("e", bad), /exactly one of \{ step \} or \{ seq \}/);
    }
  } finally {
    client.close();
  }
});

/** A stand-in for a generated grpc-js client: records each request, answers `answer`. */
function recorder(answer) {
  const requests = [];
  const stub = new Proxy({ answer }, {
    get: (target, method) => {
      if (method === "answer") return target.answer;
      if (method === "close") return () => {};
      return (req, _md, cb) => { requests.push([method, req]); cb(null, target.answer); };
    },
  });
  return { stub, requests };
}

test("a start sends its priority and refuses one out of range before anything is sent", async () => {
  const client = new OrbitClient({ address: "127.0.0.1:1" });
  const real = client.workflows;
  const { stub, requests } = recorder({ executionId: "e-1", run: 1, created: true });
  client.workflows = stub;
  try {
    const started = await client.start("orders", { n: 1 }, { executionId: "e-1", priority: 1 });
    // `created`: false when the id existed or the workflow's `dedupe:` collapsed the start.
    assert.deepEqual([started.executionId, started.created], ["e-1", true]);
    await client.start("orders", null);
    assert.deepEqual(requests.map(([m, r]) => [m, r.workflow, r.priority]), [["startExecution", "orders", 1], ["startExecution", "orders", 0]]);
    for (const bad of [0, 6, 2.5, "1", Number.NaN]) {
      await assert.rejects(client.start("orders", null, { priority: bad }), /1 \(dispatched first\) to 5 \(last\)/);
    }
    assert.equal(requests.length, 2);
  } finally {
    client.workflows = real;
    client.close();
  }
});

test("rate limits are set, listed and deleted through the admin service", async () => {
  const client = new OrbitClient({ address: "127.0.0.1:1" });
  const real = client.admin;
  const stored = { name: "payments-api", limit: 10, period: { seconds: 1, nanos: 0 }, updatedAt: new Date(0) };
  const { stub, requests } = recorder({ rateLimit: stored });
  client.admin = stub;
  try {
    assert.deepEqual(await client.setRateLimit("payments-api", 10, 1000), stored);
    await client.setRateLimit("export", 500, 60_500);
    assert.deepEqual(requests.map(([m, r]) => [m, r.rateLimit.name, r.rateLimit.limit, r.rateLimit.period]), [
      ["setRateLimit", "payments-api", 10, { seconds: 1, nanos: 0 }],
      ["setRateLimit", "export", 500, { seconds: 60, nanos: 500_000_000 }],
    ]);
    for (const [limit, periodMs, says] of [[0, 1000, /limit/], [1.5, 1000, /limit/], [5, 0, /periodMs/], [5, 367 * 86_400_000, /periodMs/], [5, Number.NaN, /periodMs/]]) {
      await assert.rejects(client.setRateLimit("x", limit, periodMs), says);
    }
    assert.equal(requests.length, 2);
    stub.answer = { rateLimits: [stored] };
    assert.deepEqual(await client.listRateLimits(), [stored]);
    stub.answer = {};
    assert.equal(await client.deleteRateLimit("payments-api"), undefined);
    assert.deepEqual(requests.slice(2), [["listRateLimits", { pageSize: 1000, pageToken: "" }], ["deleteRateLimit", { name: "payments-api" }]]);
  } finally {
    client.admin = real;
    client.close();
  }
});
