/**
 * Pure bookkeeping of a worker session, unit-tested without a server: flow-control
 * credits, the outbox of unacknowledged results and the reconnect backoff.
 */

/**
 * Flow control: the tasks running here plus the credits the server has not used yet never
 * exceed `max`. Credits belong to one stream; running tasks keep their slots across streams.
 */
export class Credits {
  running = 0;
  outstanding = 0;
  constructor(readonly max: number) {}

  /** How many credits to grant now; records them as granted. */
  grant(): number {
    const n = Math.max(0, this.max - this.running - this.outstanding);
    this.outstanding += n;
    return n;
  }

  /** A task was delivered; false when it came without a credit. */
  take(): boolean {
    if (this.outstanding === 0) return false;
    this.outstanding -= 1;
    return true;
  }

  start(): void {
    this.running += 1;
  }

  finish(): void {
    this.running = Math.max(0, this.running - 1);
  }

  /** A new stream starts with no credits granted on it. */
  streamReset(): void {
    this.outstanding = 0;
  }
}

/** Results waiting for their `Ack`, oldest first, keyed by task token. */
export class Outbox<M> {
  private readonly entries = new Map<string, M>();
  readonly capacity: number;
  constructor(capacity = 256) {
    this.capacity = Math.max(1, capacity);
  }

  push(token: string, message: M): void {
    // Re-inserting moves a token to the end: the newest result for it wins.
    this.entries.delete(token);
    this.entries.set(token, message);
  }

  /** Removes the result for `token`; true when there was one. */
  ack(token: string): boolean {
    return this.entries.delete(token);
  }

  get(token: string): M | undefined {
    return this.entries.get(token);
  }

  /** A snapshot of the pending results, oldest first. */
  pending(): M[] {
    return [...this.entries.values()];
  }

  /** The tokens of the pending results. */
  tokens(): string[] {
    return [...this.entries.keys()];
  }

  get size(): number {
    return this.entries.size;
  }

  isFull(): boolean {
    return this.entries.size >= this.capacity;
  }
}

/** Capped exponential backoff, each delay jittered into [base/2, base] (milliseconds). */
export class Backoff {
  private base: number;
  readonly maximum: number;
  constructor(
    readonly initial = 100,
    maximum = 5000,
    private readonly random: () => number = Math.random,
  ) {
    this.maximum = Math.max(initial, maximum);
    this.base = initial;
  }

  nextDelay(): number {
    const base = this.base;
    this.base = Math.min(this.base * 2, this.maximum);
    return base / 2 + this.random() * (base / 2);
  }

  reset(): void {
    this.base = this.initial;
  }
}
