// A set of locks granted together (`Client.acquireAll`), held and lost as
// one (crates/client/src/set.rs).

import { LostError } from "./errors.js";
import type { Lock, Loss } from "./lock.js";
import { releaseTogether, type Handed } from "./release.js";
import type { HttpTransport } from "./transport.js";
import type { LockInfo } from "./types.js";

/**
 * Locks granted together, one guard each, renewed side by side. The set
 * counts as lost the moment any of its locks is: `signal` is aborted then.
 */
export class LockSet {
  private readonly controller = new AbortController();
  private released: Promise<void> | undefined;
  /** Resolves once any lock of the set is lost. */
  readonly lost: Promise<void>;

  /** @internal */
  constructor(
    private readonly transport: HttpTransport,
    /** The guards of the locks, in the order asked. */
    readonly guards: readonly Lock[],
  ) {
    this.lost = Promise.race(guards.map((g) => g.lost)).then(() => {
      this.controller.abort(new LostError("a lock of the set was lost"));
    });
    for (const g of guards) {
      g.signal.addEventListener("abort", () => this.controller.abort(g.signal.reason), { once: true });
    }
  }

  /** The locks, in the order asked, as last granted or renewed. */
  get locks(): LockInfo[] {
    return this.guards.map((g) => g.lock);
  }
  /** The fence of each lock, in the order asked (consecutive). */
  get fences(): bigint[] {
    return this.guards.map((g) => g.fence);
  }
  /** Aborted the moment any lock of the set is lost (or the set released). */
  get signal(): AbortSignal {
    this.isLost();
    return this.controller.signal;
  }
  /** Why the set was lost: the first loss among its locks. */
  get loss(): Loss | undefined {
    for (const g of this.guards) {
      const l = g.loss;
      if (l !== undefined) return l;
    }
    return undefined;
  }
  /** Whether any lock of the set is lost, judged now. */
  isLost(): boolean {
    if (this.guards.some((g) => g.isLost())) this.controller.abort(new LostError("a lock of the set was lost"));
    return this.controller.signal.aborted;
  }
  /** Throws `LostError` if any lock of the set is lost, judged now. */
  check(): void {
    if (this.isLost()) throw new LostError();
  }

  /**
   * Stops renewing and releases every lock in one call, node after node
   * while a lease runs. `LostError` if any lock was lost; the others are
   * released all the same. Goes on if the caller stops waiting for it.
   */
  release(): Promise<void> {
    this.released ??= (async () => {
      const handed = await Promise.allSettled(this.guards.map((g) => g.handOver()));
      let lost: unknown;
      const held: Handed[] = [];
      for (const h of handed) {
        if (h.status === "fulfilled") held.push(h.value);
        else lost ??= h.reason;
      }
      if (held.length > 0) {
        try {
          await releaseTogether(this.transport, held);
        } catch (e) {
          lost ??= e;
        }
      }
      if (lost !== undefined) throw lost;
    })();
    return this.released;
  }
}
