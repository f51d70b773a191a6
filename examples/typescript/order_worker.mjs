#!/usr/bin/env node
// Worker for examples/definitions/order-saga.yaml, with the TypeScript SDK (sdks/typescript).
//
//   (cd sdks/typescript && npm ci && npm run build)
//   node examples/typescript/order_worker.mjs
//
// Tasks (all version "1"):
//   payments.charge    {"order_id", "amount"} -> {"charge_id": "ch-" + order_id}
//   payments.refund    {"charge_id"}          -> {}
//   inventory.reserve  {"sku", "order"}       -> {"reservation": "r-" + sku}
//   inventory.release  {"sku", "order"}       -> {}
import { TaskFailure, Worker } from "../../sdks/typescript/dist/index.js";

const worker = new Worker({ address: process.env.ORBIT_ADDRESSES || "127.0.0.1:7233" });

/** A missing field is the caller's mistake: fail without retrying. */
function required(ctx, field) {
  if (ctx.input == null || !(field in ctx.input)) {
    throw new TaskFailure("INVALID_INPUT", `${ctx.task}: missing field ${field}`, { retryable: false });
  }
  return ctx.input[field];
}

worker.register("payments.charge", "1", async (ctx) => {
  const orderId = required(ctx, "order_id");
  // The idempotency key is the same on every attempt of this step: pass it to the payment API.
  console.error(`charging ${ctx.input.amount} for order ${orderId} (key ${ctx.idempotencyKey})`);
  return { charge_id: `ch-${orderId}` };
});
worker.register("payments.refund", "1", async () => ({}));
worker.register("inventory.reserve", "1", async (ctx) => ({ reservation: `r-${required(ctx, "sku")}` }));
worker.register("inventory.release", "1", async () => ({}));

await worker.run();
