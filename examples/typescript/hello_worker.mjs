#!/usr/bin/env node
// Worker for examples/definitions/hello.yaml, with the TypeScript SDK (sdks/typescript).
//
//   (cd sdks/typescript && npm ci && npm run build)
//   node examples/typescript/hello_worker.mjs                      # ORBIT_ADDRESSES or 127.0.0.1:7233
//   ORBIT_TLS_CA=ca.pem ORBIT_TOKEN="$WORKER_TOKEN" node examples/typescript/hello_worker.mjs
//
// Task (version "1"): greet {"name"} -> {"greeting": "Hello, <name>!"}
import { Worker } from "../../sdks/typescript/dist/index.js";

const worker = new Worker({ address: process.env.ORBIT_ADDRESSES || "127.0.0.1:7233" });

worker.register("greet", "1", async (ctx) => ({ greeting: `Hello, ${ctx.input.name}!` }));

// Until SIGINT/SIGTERM; then in-flight tasks finish before the process exits.
await worker.run();
