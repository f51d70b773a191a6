#!/usr/bin/env node
// Per-SDK worker throughput, measured from the client side while the TypeScript
// conformance worker (one process, ORBIT_MAX_CONCURRENCY=64) serves `bench.step`: starts
// `EXECUTIONS` executions of `bench-<STEPS>` (the workflow `orbit bench` registers: STEPS
// sequential `bench.step` tasks) with 64 in flight and prints tasks per second.
//
//   orbit workflow register <(node bench/throughput.mjs --print-definition)
//   ORBIT_ADDRESSES=127.0.0.1:7233 node bench/throughput.mjs
import { OrbitClient, ExecutionStatus } from "../dist/index.js";

const steps = Number(process.env.STEPS || 3);
const executions = Number(process.env.EXECUTIONS || 1000);
const concurrency = Number(process.env.CONCURRENCY || 64);

if (process.argv.includes("--print-definition")) {
  // The same document as `orbit bench` (services/orbit/src/bench.rs, `workflow`).
  let doc = `name: bench-${steps}\nversion: "1"\ntasks:\n  bench.step: {}\nsteps:\n`;
  for (let i = 1; i <= steps; i++) {
    const input = i === 1 ? '"${{ input.n }}"' : `"\${{ steps.s${i - 1}.output }}"`;
    doc += `  - { id: s${i}, task: bench.step, input: ${input} }\n`;
  }
  doc += `output: "\${{ steps.s${steps}.output }}"\n`;
  process.stdout.write(doc);
  process.exit(0);
}

const client = new OrbitClient();
let next = 0;
let failed = 0;
async function lane() {
  while (next < executions) {
    const n = next++;
    const { executionId } = await client.start(`bench-${steps}`, { n });
    const result = await client.result(executionId);
    if (result.status !== ExecutionStatus.EXECUTION_STATUS_COMPLETED) failed++;
  }
}
const t0 = performance.now();
await Promise.all(Array.from({ length: concurrency }, lane));
const seconds = (performance.now() - t0) / 1000;
client.close();
console.log(
  JSON.stringify({ executions, steps, concurrency, failed, seconds: +seconds.toFixed(2), tasks_per_second: Math.round((executions * steps) / seconds), executions_per_second: Math.round(executions / seconds) }),
);
if (failed > 0) process.exit(1);
