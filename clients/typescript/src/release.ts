// Releasing: one lock, or a set's locks in one call, tried node after node
// while a lease runs (crates/client/src/release.rs).

import { LostError } from "./errors.js";
import { CallFailure, retryable, type HttpTransport } from "./transport.js";
import { attemptTimeout, now, refused, sleep } from "./util.js";

/** A lock to release, with when its lease ends on this client's clock. */
export interface Handed {
  name: string;
  id: string;
  ends: () => number;
}

class Tries {
  /** Whether an earlier attempt may have released unseen (its answer was lost). */
  constructor(public unknown: boolean) {}

  timeout(transport: HttpTransport, ends: number): number | undefined {
    const t = now();
    if (t >= ends) return undefined;
    return attemptTimeout(ends - t, transport.count);
  }

  /**
   * What an attempt's outcome (`true`: all released; `false`: some were not
   * held; a thrown failure) makes of the release: `"done"`, or `undefined`
   * to try again, on the next node after a pause. Throws the release's error.
   */
  async judge(outcome: boolean | CallFailure): Promise<"done" | undefined> {
    if (outcome === true) return "done";
    if (outcome === false) {
      if (this.unknown) return "done"; // an earlier attempt went through, its answer lost
      throw new LostError();
    }
    const f = outcome.failure;
    if (f.type === "api" && f.code === "not_held") {
      if (this.unknown) return "done";
      throw new LostError();
    }
    if (f.type === "api" && !retryable(f)) throw refused(f);
    if (f.type === "noAnswer") this.unknown = true;
    await sleep(50);
    return undefined;
  }
}

async function attempt<T>(p: Promise<T>): Promise<T | CallFailure> {
  try {
    return await p;
  } catch (e) {
    if (e instanceof CallFailure) return e;
    throw e;
  }
}

/**
 * Releases `lock`, trying node after node until its lease is over (then
 * there is nothing left to release); `LostError` when it was not held.
 * `unknown`: an earlier attempt may have released it unseen.
 */
export async function releaseOne(transport: HttpTransport, lock: Handed, unknown = false): Promise<void> {
  const body = { name: lock.name, id: lock.id };
  const tries = new Tries(unknown);
  for (;;) {
    const timeout = tries.timeout(transport, lock.ends());
    if (timeout === undefined) return;
    const outcome = await attempt(transport.send("POST", "/v1/locks/release", body, timeout).then(() => true));
    if ((await tries.judge(outcome)) === "done") return;
  }
}

/**
 * Releases every one of `held` in one call (`locks`), node after node while
 * any of their leases runs; a lock whose lease is over is left out.
 * `LostError` when any was not held. A node that does not read a set's
 * release (`400`) gets one release per lock, at once.
 */
export async function releaseTogether(transport: HttpTransport, held: readonly Handed[]): Promise<void> {
  const tries = new Tries(false);
  for (;;) {
    const t = now();
    const live = held.filter((h) => h.ends() > t);
    if (live.length === 0) return;
    const ends = Math.max(...live.map((h) => h.ends()));
    const timeout = tries.timeout(transport, ends);
    if (timeout === undefined) return;
    const body = { locks: live.map((h) => ({ name: h.name, id: h.id })) };
    const outcome = await attempt(
      transport.send("POST", "/v1/locks/release", body, timeout).then((answer) => {
        const notHeld = (answer as { not_held?: unknown }).not_held;
        return !Array.isArray(notHeld) || notHeld.length === 0;
      }),
    );
    if (outcome instanceof CallFailure && outcome.failure.type === "api" && outcome.failure.code === "bad_request") {
      const each = await Promise.allSettled(live.map((h) => releaseOne(transport, h, tries.unknown)));
      const failed = each.find((r): r is PromiseRejectedResult => r.status === "rejected");
      if (failed) throw failed.reason;
      return;
    }
    if ((await tries.judge(outcome)) === "done") return;
  }
}
