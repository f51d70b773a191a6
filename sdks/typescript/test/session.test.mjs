// The worker against a scripted WorkerService over real gRPC on loopback: the session
// protocol (Hello, Welcome, credits, results, Ack, outbox re-sent after a reconnect,
// heartbeats with details, Cancel, Drain), failover across frontends and refusal.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Server, ServerCredentials, status } from "@grpc/grpc-js";
import { WorkerServiceService } from "../dist/gen/orbit/v1/worker.js";
import { CANCELLED, SDK, TaskFailure, Worker, WorkerRejected } from "../dist/index.js";

const quiet = { debug() {}, info() {}, warn() {}, error() {} };

/** A message queue over a server-side duplex call. */
function inbox(call) {
  const queue = [];
  const waiters = [];
  let ended = false;
  call.on("data", (m) => (waiters.length ? waiters.shift()(m) : queue.push(m)));
  call.on("end", () => {
    ended = true;
    for (const w of waiters.splice(0)) w(null);
  });
  call.on("error", () => {});
  return {
    /** The next message (null once the client half-closed), skipping heartbeats unless asked. */
    async next({ heartbeats = false } = {}) {
      for (;;) {
        const m = queue.length ? queue.shift() : ended ? null : await new Promise((r) => waiters.push(r));
        if (m === null || heartbeats || m.kind?.$case !== "heartbeat") return m;
      }
    },
    send: (kind) => call.write({ kind }),
    get ended() {
      return ended;
    },
  };
}

/** Starts a WorkerService whose n-th session runs `scripts[n]`. */
async function scriptedServer(scripts) {
  const server = new Server();
  let n = 0;
  const done = [];
  server.addService(WorkerServiceService, {
    session(call) {
      const script = scripts[n++];
      done.push(
        Promise.resolve()
          .then(() => script(inbox(call), call))
          .catch((e) => {
            call.destroy(e);
            throw e;
          }),
      );
    },
    completeTask: (_c, cb) => cb({ code: status.UNIMPLEMENTED }),
    failTask: (_c, cb) => cb({ code: status.UNIMPLEMENTED }),
  });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  return { address: `127.0.0.1:${port}`, sessions: () => n, scripts: () => Promise.all(done), close: () => server.forceShutdown() };
}

const welcome = (ms = 100) => ({ $case: "welcome", welcome: { sessionId: "s1", heartbeatInterval: { seconds: 0, nanos: ms * 1e6 }, sessionTimeout: undefined, warnings: [] } });
const task = (token, name, input, extra = {}) => ({
  $case: "task",
  task: { token, executionId: "e", workflow: "wf", step: "s", task: name, version: "1", input, idempotencyKey: `k-${token}`, attempt: 1, redelivery: false, deadline: undefined, traceContext: undefined, heartbeatTimeout: undefined, ...extra },
});

test("a task runs, its result is re-sent after a reconnect until acked, on the next frontend", async () => {
  const seen = {};
  const srv = await scriptedServer([
    async (s, call) => {
      const hello = (await s.next()).kind.hello;
      seen.hello = hello;
      s.send(welcome());
      assert.deepEqual((await s.next()).kind, { $case: "credits", credits: { n: 2 } });
      s.send(task("t1", "greet", { name: "Ada" }));
      seen.first = (await s.next()).kind;
      call.end(); // no Ack: the stream ends with the result unacknowledged
    },
    async (s) => {
      await s.next(); // hello again
      s.send(welcome());
      seen.resent = (await s.next()).kind; // the outbox comes before the credits
      seen.credits = (await s.next()).kind;
      s.send({ $case: "ack", ack: { token: "t1", accepted: true, reason: "" } });
      assert.equal((await s.next()).kind.$case, "drain");
      assert.equal(await s.next(), null, "the worker half-closes once drained");
    },
  ]);
  // The first address refuses connections: the worker moves on to the second.
  const worker = new Worker({ address: ["127.0.0.1:1", srv.address], workerId: "w1", maxConcurrency: 2, logger: quiet, backoffInitialMs: 10, env: {} });
  worker.register("greet", "1", async (ctx) => ({ greeting: `Hello, ${ctx.input.name}!`, key: ctx.idempotencyKey }));
  const running = worker.run({ handleSignals: false });
  await new Promise((resolve) => {
    const poll = setInterval(() => {
      if (srv.sessions() === 2 && seen.credits) {
        clearInterval(poll);
        resolve();
      }
    }, 20);
  });
  await new Promise((r) => setTimeout(r, 100)); // let the Ack arrive
  worker.shutdown();
  await running;
  await srv.scripts();
  srv.close();
  assert.equal(seen.hello.workerId, "w1");
  assert.equal(seen.hello.sdk, SDK);
  assert.match(seen.hello.runtime, /^node \d+/);
  assert.deepEqual(seen.hello.tasks, [{ name: "greet", version: "1" }]);
  const complete = { $case: "complete", complete: { token: "t1", output: { greeting: "Hello, Ada!", key: "k-t1" } } };
  assert.deepEqual(seen.first, complete);
  assert.deepEqual(seen.resent, complete);
  assert.deepEqual(seen.credits, { $case: "credits", credits: { n: 2 } }, "the finished task's slot is free again");
});

test("heartbeats carry details, Cancel reaches the handler's signal, failures keep their codes, version \"\" serves any", async () => {
  const seen = { beats: [] };
  let stop;
  const stopped = new Promise((r) => (stop = r));
  const srv = await scriptedServer([
    async (s) => {
      await s.next();
      s.send(welcome(50));
      // Right after welcome: a complete heartbeat naming everything held (nothing yet).
      const first = await s.next({ heartbeats: true });
      seen.first = first.kind.heartbeat;
      await s.next(); // credits
      s.send(task("hb", "beat", {}));
      s.send(task("fl", "flaky", {}));
      s.send(task("any", "echo", { n: 7 }, { version: "3" }));
      s.send(task("nh", "unknown", {}));
      const results = {};
      for (;;) {
        const m = await s.next({ heartbeats: true });
        if (m.kind.$case === "heartbeat") {
          if (m.kind.heartbeat.details !== undefined) {
            seen.beats.push(m.kind.heartbeat);
            if (seen.beats.length === 2) s.send({ $case: "cancel", cancel: { token: "hb", reason: "execution cancelled" } });
          } else {
            seen.automatic = m.kind.heartbeat.tokens;
          }
          continue;
        }
        if (m.kind.$case === "fail" || m.kind.$case === "complete") {
          const r = m.kind.fail ?? m.kind.complete;
          results[r.token] = m.kind.fail ? r.error : r.output;
          s.send({ $case: "ack", ack: { token: r.token, accepted: true, reason: "" } });
        }
        if (results.hb && results.fl && results.any && results.nh) break;
      }
      seen.results = results;
      stop();
      let m;
      do m = await s.next();
      while (m.kind.$case === "credits"); // slots freed by the acks
      assert.equal(m.kind.$case, "drain");
      assert.equal(await s.next(), null, "drained: nothing running, everything acked");
    },
  ]);
  const worker = new Worker({ address: srv.address, workerId: "w2", logger: quiet, env: {} });
  worker.register("beat", "1", async (ctx) => {
    let beats = 0;
    while (!ctx.signal.aborted) {
      ctx.heartbeat({ beats: ++beats });
      await ctx.sleep(30);
    }
    seen.reason = ctx.cancelReason;
    return "ignored: the task was cancelled";
  });
  worker.register("echo", "", (ctx) => ctx.input); // "" serves every version
  worker.register("flaky", "1", () => {
    throw new TaskFailure("FLAKY", "attempt 1", { retryable: true });
  });
  const running = worker.run({ handleSignals: false });
  await stopped;
  worker.shutdown();
  await running;
  await srv.scripts();
  srv.close();
  assert.deepEqual(seen.beats[0], { tokens: ["hb"], details: { beats: 1 }, complete: false });
  assert.deepEqual(seen.beats[1], { tokens: ["hb"], details: { beats: 2 }, complete: false });
  // The automatic heartbeat names everything the process holds, so the server can hand back
  // what a restarted worker lost.
  assert.deepEqual(seen.first, { tokens: [], details: undefined, complete: true });
  assert.equal(seen.reason, "execution cancelled");
  assert.deepEqual(seen.results.hb, { code: CANCELLED, message: "execution cancelled", retryable: false, details: undefined });
  assert.deepEqual(seen.results.any, { n: 7 });
  assert.equal(seen.results.nh.code, "TASK_NOT_REGISTERED");
  assert.equal(seen.results.nh.retryable, true);
  assert.deepEqual(seen.results.fl, { code: "FLAKY", message: "attempt 1", retryable: true, details: undefined });
});

test("drain: no credits after Drain, the running task finishes and is acked before run ends", async () => {
  const seen = { after: [] };
  let release;
  const gate = new Promise((r) => (release = r));
  let started;
  const isStarted = new Promise((r) => (started = r));
  const srv = await scriptedServer([
    async (s) => {
      await s.next();
      s.send(welcome());
      await s.next(); // credits
      s.send(task("d1", "slow", {}));
      for (;;) {
        const m = await s.next();
        if (m === null) break;
        seen.after.push(m.kind.$case);
        if (m.kind.$case === "complete") s.send({ $case: "ack", ack: { token: "d1", accepted: true, reason: "" } });
      }
    },
  ]);
  const worker = new Worker({ address: srv.address, workerId: "w3", maxConcurrency: 1, logger: quiet, env: {} });
  worker.register("slow", "1", async () => {
    started();
    await gate;
    return { done: true };
  });
  let finished = false;
  const running = worker.run({ handleSignals: false }).then(() => (finished = true));
  await isStarted;
  worker.shutdown();
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(finished, false, "run waits for the running task");
  release();
  await running;
  await srv.scripts();
  srv.close();
  assert.deepEqual(seen.after, ["drain", "complete"], "no credits after the drain");
});

test("a refused session ends run with WorkerRejected, without reconnecting", async () => {
  const srv = await scriptedServer([
    async (s, call) => {
      await s.next();
      call.emit("error", { code: status.PERMISSION_DENIED, details: "identity may not serve greet" });
    },
  ]);
  const worker = new Worker({ address: srv.address, logger: quiet, env: {} });
  worker.register("greet", "1", () => ({}));
  await assert.rejects(worker.run({ handleSignals: false }), (e) => e instanceof WorkerRejected && e.status === "PERMISSION_DENIED");
  assert.equal(srv.sessions(), 1);
  srv.close();
});
