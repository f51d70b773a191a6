"""Pure bookkeeping of a worker session: flow-control credits, the outbox of results
waiting for their ``Ack``, and the reconnect backoff (no IO; unit-tested)."""

from __future__ import annotations

import collections
import random
from typing import Any, Iterator, Optional

class Credits:
    """Flow control: the tasks running here plus the credits the server has not used yet
    never exceed ``max``. Credits are per stream; running tasks keep their slots."""

    def __init__(self, max_concurrency: int) -> None:
        self.max = max_concurrency
        self.running = 0
        self.outstanding = 0

    def grant(self) -> int:
        """How many credits to grant now; records them as granted."""
        n = max(0, self.max - self.running - self.outstanding)
        self.outstanding += n
        return n

    def take(self) -> bool:
        """A task was delivered; False when it came without a credit."""
        if self.outstanding == 0:
            return False
        self.outstanding -= 1
        return True

    def start(self) -> None:
        self.running += 1

    def finish(self) -> None:
        self.running = max(0, self.running - 1)

    def stream_reset(self) -> None:
        self.outstanding = 0


class Outbox:
    """Results waiting for their ``Ack``, oldest first, keyed by token."""

    def __init__(self, capacity: int = 256) -> None:
        self._entries: "collections.OrderedDict[str, Any]" = collections.OrderedDict()
        self.capacity = max(1, capacity)

    def push(self, token: str, message: Any) -> None:
        self._entries[token] = message

    def ack(self, token: str) -> bool:
        return self._entries.pop(token, None) is not None

    def get(self, token: str) -> Optional[Any]:
        return self._entries.get(token)

    def pending(self) -> Iterator[Any]:
        return iter(list(self._entries.values()))

    def tokens(self) -> "list[str]":
        return list(self._entries.keys())

    def __len__(self) -> int:
        return len(self._entries)

    def is_full(self) -> bool:
        return len(self._entries) >= self.capacity


class Backoff:
    """Capped exponential backoff, each delay jittered into [base/2, base]."""

    def __init__(self, initial: float = 0.1, maximum: float = 10.0) -> None:
        self.initial = initial
        self.maximum = max(initial, maximum)
        self._base = initial

    def next_delay(self) -> float:
        base = self._base
        self._base = min(self._base * 2, self.maximum)
        return random.uniform(base / 2, base)

    def reset(self) -> None:
        self._base = self.initial

