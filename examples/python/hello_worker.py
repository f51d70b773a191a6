#!/usr/bin/env python3
"""Worker for examples/definitions/hello.yaml.

    pip install sdks/python          # the orbit-worker package, from the repository root
    python3 hello_worker.py --address 127.0.0.1:7233 [--max-tasks 1]
    # against a server with TLS and identities (docs/security.md; or the ORBIT_* variables):
    python3 hello_worker.py --address localhost:7233 --tls-ca ca.pem \
        [--tls-client-cert worker.pem --tls-client-key worker-key.pem] --token "$WORKER_TOKEN"

Task: greet@1 {"name"} -> {"greeting": "Hello, <name>!"}
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from orbit_worker import TaskContext, TaskFailure, Worker, parse_common_args, run_example


def greet(ctx: TaskContext) -> Dict[str, Any]:
    name = ctx.input.get("name") if isinstance(ctx.input, dict) else None
    if not isinstance(name, str):
        raise TaskFailure("INVALID_INPUT", "greet: `name` must be a string", retryable=False)
    return {"greeting": f"Hello, {name}!"}


def make_worker(**kwargs: Any) -> Worker:
    worker = Worker(**kwargs)
    worker.register("greet", "1", greet)
    return worker


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_common_args("Orbit worker for the hello example.", argv)
    run_example(make_worker, args)


if __name__ == "__main__":
    main()
