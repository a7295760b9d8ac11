// A held lock: renewed in the background until released; its `signal` is
// aborted the moment it is lost (crates/client/src/guard.rs).

import { ArrivedLateError, LostError } from "./errors.js";
import { releaseOne, type Handed } from "./release.js";
import { CallFailure, type HttpTransport } from "./transport.js";
import { toLockInfo, type LockInfo } from "./types.js";
import { attemptTimeout, fittedSchedule, now, sleep, ATTEMPT_TIMEOUT_MS, type ScheduleOptions } from "./util.js";

/** Why a held lock was lost. */
export type Loss =
  /** The cluster refused a renewal (`404 not_held`, `409 held`): the lock is gone; another may hold it already. */
  | "Refused"
  /** No renewal got through before the lease was about to end on this client's clock. */
  | "Lapsed";

/** What the guard is told when it is made. */
export interface GuardStart {
  transport: HttpTransport;
  granted: LockInfo;
  /** Where the lease is counted from: the send of the call that won it, plus the time the node held it. */
  sentAt: number;
  /** The lease asked for, if any. */
  leaseMs?: number | undefined;
  schedule: ScheduleOptions;
}

/**
 * A lock this client holds, renewed in the background until `release()`.
 * `signal` is aborted the moment the lock is lost (`loss` says why), or
 * when it is released.
 */
export class Lock {
  private info: LockInfo;
  private infoSent: number;
  private endsAt: number;
  private readonly transport: HttpTransport;
  private readonly leaseMs: number;
  private readonly everyMs: number;
  /** How long before the lease's end an unrenewed lock counts as lost. */
  readonly lapseMarginMs: number;
  private readonly lostController = new AbortController();
  private lossReason: Loss | undefined;
  private lostResolve!: () => void;
  /** Resolves once the lock is lost (not on a release). */
  readonly lost: Promise<void>;
  private stopRequested: "release" | "hand" | undefined;
  private wake: AbortController = new AbortController();
  private stopped: Promise<void> | undefined;
  private released: Promise<void> | undefined;
  private done = false;

  /** @internal Starts guarding a grant; throws `ArrivedLateError` for one that came too late. */
  static start(s: GuardStart): Lock {
    const lock = new Lock(s);
    if (now() >= lock.lapse()) {
      // The grant came too late to be used: give it back.
      lock.done = true;
      void s.transport
        .send("POST", "/v1/locks/release", { name: s.granted.name, id: s.granted.id }, ATTEMPT_TIMEOUT_MS)
        .catch(() => undefined);
      throw new ArrivedLateError();
    }
    lock.stopped = lock.run().catch(() => {
      // Nothing the renewal does throws but a bug; the lock counts as lapsed.
      lock.lose("Lapsed");
      lock.done = true;
    });
    return lock;
  }

  private constructor(s: GuardStart) {
    this.transport = s.transport;
    this.info = s.granted;
    this.infoSent = s.sentAt;
    // Never counted past the lease asked for, whatever an answer says.
    const granted = Math.max(s.granted.leaseMs, 1);
    this.leaseMs = Math.max(s.leaseMs === undefined ? granted : Math.min(s.leaseMs, granted), 1);
    const { everyMs, marginMs } = fittedSchedule(this.leaseMs, s.schedule);
    this.everyMs = everyMs;
    this.lapseMarginMs = marginMs;
    this.endsAt = s.sentAt + Math.min(s.granted.ttlMs, this.leaseMs);
    this.lost = new Promise((resolve) => (this.lostResolve = resolve));
  }

  /** The lock as last granted or renewed. */
  get lock(): LockInfo {
    return this.info;
  }
  get name(): string {
    return this.info.name;
  }
  get id(): string {
    return this.info.id;
  }
  /** The fencing token: pass it to the resource the lock guards. The same across renewals. */
  get fence(): bigint {
    return this.info.fence;
  }
  /** The node the lock is recorded at: the node of the acquire or the last renewal. */
  get node(): number {
    return this.info.node;
  }
  /** When the lease ends on this client's clock (`performance.now()` milliseconds), as of the last renewal. */
  get leaseEnds(): number {
    return this.endsAt;
  }

  /** Aborted when the lock is lost or about to lapse (judged as it is handed out too), or released. */
  get signal(): AbortSignal {
    this.isLost();
    return this.lostController.signal;
  }

  /** Why the lock was lost, once it was: `undefined` while held and after a release. */
  get loss(): Loss | undefined {
    this.isLost();
    return this.lossReason;
  }

  /** Whether the lock is lost or about to lapse, judged now on this client's clock. */
  isLost(): boolean {
    if (!this.lostController.signal.aborted && now() >= this.lapse()) this.lose("Lapsed");
    return this.lostController.signal.aborted;
  }

  /** Throws `LostError` once the lock may be lost, judged now: call it before every unit of work. */
  check(): void {
    if (this.isLost()) throw new LostError();
  }

  /** Stops renewing and releases; rejects with `LostError` if the lock had been lost. */
  release(): Promise<void> {
    if (this.released) return this.released;
    if (this.done || this.lossReason !== undefined) {
      this.released = Promise.reject(new LostError());
    } else {
      this.stopRequested = "release";
      this.wake.abort();
      this.released = (this.stopped ?? Promise.resolve()).then(
        () => this.releaseResult ?? Promise.reject(new LostError()),
      );
    }
    return this.released;
  }

  /** @internal Stops renewing and hands the lock over, to be released with others in one call. */
  async handOver(): Promise<Handed> {
    if (this.done || this.lossReason !== undefined || this.stopRequested !== undefined) throw new LostError();
    this.stopRequested = "hand";
    this.wake.abort();
    await this.stopped;
    if (this.lossReason !== undefined) throw new LostError();
    return { name: this.info.name, id: this.info.id, ends: () => this.endsAt };
  }

  /** @internal Resolves once the lease has ended on this client's clock. */
  leaseEnded(): Promise<void> {
    return sleep(this.endsAt - now());
  }

  private releaseResult: Promise<void> | undefined;

  private lapse(): number {
    return this.endsAt - this.lapseMarginMs;
  }

  private lose(loss: Loss): void {
    if (this.lostController.signal.aborted) return;
    this.lossReason = loss;
    this.lostController.abort(new LostError(`the lock was lost (${loss})`));
    this.lostResolve();
  }

  /** When to renew next: a period from now, but early enough that a whole period is left before the lapse. */
  private nextRenewal(): number {
    const t = now();
    const early = Math.max(this.lapse() - this.everyMs, t);
    return Math.min(t + this.everyMs, early);
  }

  private async run(): Promise<void> {
    let next = this.nextRenewal();
    for (;;) {
      if (this.stopRequested === undefined) {
        await sleep(Math.min(next, this.lapse()) - now(), false, this.wake.signal);
      }
      if (this.stopRequested !== undefined) {
        this.done = true;
        if (this.stopRequested === "release") {
          const result = releaseOne(this.transport, { name: this.info.name, id: this.info.id, ends: () => this.endsAt });
          this.releaseResult = result;
          await result.catch(() => undefined);
        }
        this.lostController.abort(new LostError("the lock was released"));
        return;
      }
      if (now() >= this.lapse() || this.lostController.signal.aborted) {
        this.lose("Lapsed");
        this.done = true;
        return;
      }
      next = Math.min(next, this.nextRenewal());
      if (now() < next) continue;
      const outcome = await this.renew();
      if (outcome === "ok") {
        next = this.nextRenewal();
        continue;
      }
      this.lose(outcome);
      this.done = true;
      return;
    }
  }

  /** Renews, node after node, until it gets through or the lapse. */
  private async renew(): Promise<"ok" | Loss> {
    let attempt = 0;
    for (;;) {
      const lapse = this.lapse();
      const sent = now();
      if (sent >= lapse || this.lostController.signal.aborted) return "Lapsed";
      const body = { name: this.info.name, id: this.info.id, lease_ms: Math.floor(this.leaseMs) };
      const endpoints = Math.max(1, this.transport.count);
      const triesLeft = endpoints - (attempt % endpoints);
      const timeout = attemptTimeout(lapse - sent, triesLeft);
      // Raced against the lapse: a node that hangs must not hold the loss back.
      const atLapse = new AbortController();
      const timer = setTimeout(() => atLapse.abort(), lapse - sent);
      timer.unref();
      let answer;
      try {
        answer = await this.transport.send("POST", "/v1/locks/renew", body, timeout, atLapse.signal);
      } catch (e) {
        if (atLapse.signal.aborted) return "Lapsed";
        if (!(e instanceof CallFailure)) throw e;
        const f = e.failure;
        if (f.type === "api" && (f.code === "not_held" || f.code === "held")) return "Refused";
        // Unknown outcome, no speaker, or a node that failed: not lost until
        // the lease really runs out; try another node (the transport moved on).
        const pause = Math.min(25 * 2 ** Math.min(attempt, 3), 200);
        await sleep(Math.min(pause, this.lapse() - now()), false);
        if (now() >= this.lapse()) return "Lapsed";
        attempt++;
        continue;
      } finally {
        clearTimeout(timer);
      }
      // Declared lost meanwhile (`isLost` saw the lapse): lost it stays.
      if (this.lostController.signal.aborted) return "Lapsed";
      let view: LockInfo;
      try {
        view = toLockInfo((answer as { lock?: never }).lock);
      } catch {
        // An answer without its lock: a node that failed; try again.
        attempt++;
        continue;
      }
      const left = Math.min(view.ttlMs, this.leaseMs);
      this.endsAt = sent + left;
      if (sent >= this.infoSent) {
        this.infoSent = sent;
        this.info = view;
      }
      return "ok";
    }
  }
}
