#!/usr/bin/env node
// The TypeScript SDK's conformance worker: implements the contract in
// sdks/conformance/README.md with the built package (run `npm ci && npm run build` in
// sdks/typescript first). Configured by the environment only; prints READY on stdout after
// the first Welcome, exits 0 after a graceful drain on SIGTERM and non-zero with the
// server's status code on stderr when the server refuses the session.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { TaskFailure, Worker, WorkerRejected } from "../dist/index.js";

const env = process.env;
const workerId = env.ORBIT_WORKER_ID || `conformance-ts-${process.pid}`;
const dir = env.CONFORMANCE_DIR || ".";

const worker = new Worker({
  address: env.ORBIT_ADDRESSES || "127.0.0.1:7233",
  workerId,
  maxConcurrency: Number(env.ORBIT_MAX_CONCURRENCY || 8),
  drainTimeoutMs: 120_000,
  backoffMaxMs: 2_000,
  onWelcome: (() => {
    let ready = false;
    return () => {
      if (!ready) {
        ready = true;
        process.stdout.write("READY\n");
      }
    };
  })(),
});

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

worker.register("greet", "1", async (ctx) => ({ greeting: `Hello, ${ctx.input.name}!` }));

worker.register("payments.charge", "1", async (ctx) => {
  if (ctx.input.amount === 13) throw new TaskFailure("CARD_DECLINED", "card declined", { retryable: false });
  // The on-failure example's declined card.
  if (ctx.input.amount === 120) throw new TaskFailure("DECLINED", "card declined", { retryable: false });
  return { charge_id: `ch-${ctx.input.order_id}` };
});
worker.register("payments.refund", "1", async () => ({}));
worker.register("inventory.reserve", "1", async (ctx) => {
  // The on-failure example reserves by order.
  if (ctx.input.sku === undefined) return { reservation: `r-${ctx.input.order_id}` };
  if (ctx.input.sku === "none") throw new TaskFailure("OUT_OF_STOCK", `no stock for ${ctx.input.sku}`);
  return { reservation: `r-${ctx.input.sku}` };
});
worker.register("inventory.release", "1", async () => ({}));

// Synchronous handler (the SDK accepts both kinds): the contract asks for one of each.
worker.register("conformance.flaky", "1", (ctx) => {
  if (ctx.attempt <= ctx.input.fail_times) {
    throw new TaskFailure("FLAKY", `attempt ${ctx.attempt}`, { retryable: true });
  }
  return { attempt: ctx.attempt, idempotency_key: ctx.idempotencyKey };
});

worker.register("conformance.heartbeat", "1", async (ctx) => {
  let beats = 0;
  while (!ctx.cancelled) {
    beats += 1;
    ctx.heartbeat({ beats });
    await ctx.sleep(100);
  }
  throw new TaskFailure("CANCELLED", ctx.cancelReason ?? "cancelled", { retryable: false });
});

worker.register("conformance.slow", "1", async (ctx) => {
  const base = join(dir, `${ctx.idempotencyKey}.${ctx.attempt}`);
  writeFileSync(`${base}.started`, "");
  await sleep(ctx.input.ms);
  writeFileSync(`${base}.done`, "");
  return { attempt: ctx.attempt, idempotency_key: ctx.idempotencyKey, worker_id: workerId };
});

// The tasks of the language examples (groups, switch, continue-on-failure, on-failure, race,
// loops) the ones above do not cover, as the examples' headers describe their workers.
const prefixed = (key, prefix, field) => async (ctx) => ({ [key]: `${prefix}${ctx.input[field]}` });
worker.register("warehouse.pack", "1", prefixed("box", "box-", "sku"));
worker.register("warehouse.unpack", "1", async () => ({}));
worker.register("warehouse.label", "1", prefixed("label", "L-", "order_id"));
worker.register("carrier.send", "1", prefixed("tracking", "T-", "label"));
worker.register("warehouse.ship", "1", async (ctx) => {
  if (ctx.input.charge_id === "ch-o-fail") throw new TaskFailure("NO_CARRIER", "no carrier today", { retryable: true });
  return { tracking: `T-${ctx.input.charge_id}` };
});
worker.register("refunds.review", "1", async () => ({ reviewer: "ops" }));
// A notice with a reason (on-failure) is sent; otherwise the mail is down.
worker.register("notify.email", "1", async (ctx) => {
  if (ctx.input.reason === undefined) throw new TaskFailure("SMTP_DOWN", "mail is down", { retryable: true });
  return { sent: true };
});
worker.register("notify.sms", "1", async (ctx) => {
  if (ctx.input.phone === "+0") throw new TaskFailure("BAD_NUMBER", "no such number", { retryable: false });
  return { sent: ctx.input.phone };
});
worker.register("billing.invoice", "1", prefixed("invoice", "inv-", "order_id"));
worker.register("approvals.request", "1", prefixed("ticket", "t-", "request_id"));
worker.register("approvals.escalate", "1", async () => ({ to: "manager" }));
worker.register("jobs.status", "1", async (ctx) => ({ state: ctx.input.attempt >= 2 ? "done" : "running" }));

// bench.step is version "1": `orbit bench` declares it without a version (the default).
worker.register("bench.step", "1", async (ctx) => ctx.input);

try {
  await worker.run();
  process.exit(0);
} catch (e) {
  if (e instanceof WorkerRejected) {
    process.stderr.write(`orbit worker: refused by the server: ${e.message}\n`);
    process.exit(4);
  }
  process.stderr.write(`orbit worker: ${e?.stack ?? e}\n`);
  process.exit(1);
}
