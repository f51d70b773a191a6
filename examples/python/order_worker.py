#!/usr/bin/env python3
"""Worker for examples/definitions/order-saga.yaml.

    pip install sdks/python          # the orbit-worker package, from the repository root
    python3 order_worker.py --address 127.0.0.1:7233            # until Ctrl-C
    python3 order_worker.py --max-tasks 4                        # exit after 4 tasks
    python3 order_worker.py --tls-ca ca.pem --token "$WORKER_TOKEN"  # TLS + identities

Tasks (all version "1"):
  payments.charge    {"order_id", "amount"} -> {"charge_id": "ch-" + order_id}
  payments.refund    {"charge_id"}          -> {}
  inventory.reserve  {"sku", "order"}       -> {"reservation": "r-" + sku}
  inventory.release  {"sku", "order"}       -> {}
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from orbit_worker import TaskContext, TaskFailure, Worker, parse_common_args, run_example

log = logging.getLogger("order_worker")


def _require(ctx: TaskContext, field: str) -> Any:
    data = ctx.input if isinstance(ctx.input, dict) else {}
    if field not in data:
        raise TaskFailure("INVALID_INPUT", f"{ctx.task}: missing field {field!r}", retryable=False)
    return data[field]


def charge(ctx: TaskContext) -> Dict[str, Any]:
    order_id = _require(ctx, "order_id")
    log.info("charging %s for order %s (key %s)", ctx.input.get("amount"), order_id, ctx.idempotency_key)
    return {"charge_id": f"ch-{order_id}"}


def refund(ctx: TaskContext) -> Dict[str, Any]:
    log.info("refunding %s", (ctx.input or {}).get("charge_id"))
    return {}


def reserve(ctx: TaskContext) -> Dict[str, Any]:
    sku = _require(ctx, "sku")
    return {"reservation": f"r-{sku}"}


def release(ctx: TaskContext) -> Dict[str, Any]:
    log.info("releasing %s", (ctx.input or {}).get("sku"))
    return {}


def make_worker(**kwargs: Any) -> Worker:
    worker = Worker(**kwargs)
    worker.register("payments.charge", "1", charge)
    worker.register("payments.refund", "1", refund)
    worker.register("inventory.reserve", "1", reserve)
    worker.register("inventory.release", "1", release)
    return worker


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_common_args("Orbit worker for the order-saga example.", argv)
    run_example(make_worker, args)


if __name__ == "__main__":
    main()
