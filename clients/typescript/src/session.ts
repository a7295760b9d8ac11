// A session: one lease that many locks hang off, renewed once for all of
// them, and lost with all of them (crates/client/src/session.rs).

import { LostError } from "./errors.js";
import { CallFailure, retryable, type HttpTransport } from "./transport.js";
import { toSessionInfo, type LockInfo, type SessionInfo } from "./types.js";
import { attemptTimeout, now, refused, sleep, REQUEST_TIMEOUT_MS } from "./util.js";

/** How a lock is asked for in a session. */
export interface SessionAcquireOptions {
  waitMs?: number;
  holder?: string;
  data?: string;
  shared?: boolean;
  permits?: number;
  /** The lock's lock-delay (protocol 8); by default the session's (`SessionOptions.lockDelayMs`). */
  lockDelayMs?: number;
}

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/** A ULID's 128 bits, or undefined for a string that is not one. */
export function ulidBits(id: string): bigint | undefined {
  if (id.length !== 26) return undefined;
  let v = 0n;
  for (const ch of id.toUpperCase()) {
    const d = CROCKFORD.indexOf(ch);
    if (d < 0) return undefined;
    v = (v << 5n) | BigInt(d);
  }
  return v < 1n << 128n ? v : undefined;
}

/** The digest of lock ids a session's renewal sends: their 128-bit ids XORed, as 32 hex digits. */
export function digest(ids: Iterable<string>): string {
  let d = 0n;
  for (const id of ids) {
    const bits = ulidBits(id);
    if (bits !== undefined) d ^= bits;
  }
  return d.toString(16).padStart(32, "0");
}

/** A lock of a session: no renewal of its own; lost with its session, or when a renewal finds it gone. */
export class SessionLock {
  /** @internal */
  readonly controller = new AbortController();
  /** @internal */
  constructor(
    /** The lock as granted. */
    readonly lock: LockInfo,
    /** @internal when its grant was answered */
    readonly grantedAt: number,
  ) {}
  get name(): string {
    return this.lock.name;
  }
  get id(): string {
    return this.lock.id;
  }
  get fence(): bigint {
    return this.lock.fence;
  }
  get node(): number {
    return this.lock.node;
  }
  /** Aborted once the lock is lost. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }
  isLost(): boolean {
    return this.controller.signal.aborted;
  }
  check(): void {
    if (this.isLost()) throw new LostError();
  }
}

/** How the session's internals are reached by the client. */
export interface SessionStart {
  transport: HttpTransport;
  info: SessionInfo;
  /** The send of the open, plus the time the node held it. */
  sentAt: number;
}

/**
 * A session this client holds: renewed in the background, once for all its
 * locks, until `close()`. `signal` is aborted the moment it is lost (a
 * renewal refused, or its lease about to lapse on this client's clock).
 */
export class Session {
  private infoNow: SessionInfo;
  private endsAt: number;
  private readonly marginMs: number;
  private readonly controller = new AbortController();
  /** @internal */
  readonly locks = new Map<string, SessionLock>();
  private closed = false;
  private readonly transport: HttpTransport;

  /** @internal */
  constructor(s: SessionStart) {
    this.transport = s.transport;
    this.infoNow = s.info;
    this.endsAt = s.sentAt + s.info.ttlMs;
    this.marginMs = Math.min(s.info.leaseMs / 10, 2_000);
    void this.renewing(Math.max(s.info.leaseMs / 3, 10));
    // Every lock of the session is lost with it.
    this.controller.signal.addEventListener("abort", () => {
      for (const l of this.locks.values()) l.controller.abort(this.controller.signal.reason);
    });
  }

  get id(): string {
    return this.infoNow.id;
  }
  /** The session as last opened or renewed. */
  get info(): SessionInfo {
    return this.infoNow;
  }
  /** When its lease ends on this client's count (`performance.now()` ms). */
  get leaseEnds(): number {
    return this.endsAt;
  }
  /** Aborted once the session is lost (or closed), with every lock of it. */
  get signal(): AbortSignal {
    this.isLost();
    return this.controller.signal;
  }
  /** Whether the session is lost, judged now. */
  isLost(): boolean {
    if (!this.controller.signal.aborted && now() + this.marginMs >= this.endsAt) {
      this.controller.abort(new LostError("the session was lost"));
    }
    return this.controller.signal.aborted;
  }
  check(): void {
    if (this.isLost()) throw new LostError();
  }

  /** @internal How a lock is granted in this session (set by the client). */
  grant: ((name: string, options: SessionAcquireOptions) => Promise<LockInfo>) | undefined;

  /**
   * Takes `name` in this session, waiting as `options` say: the lock has the
   * session's lease and no renewal of its own (a lease is not taken), and
   * its own lock-delay or the session's.
   */
  async acquire(name: string, options: SessionAcquireOptions = {}): Promise<SessionLock> {
    if (this.isLost()) throw new LostError();
    const granted = await this.grant!(name, options);
    return this.add(granted);
  }

  /** @internal Keeps a lock granted in the session. */
  add(lock: LockInfo): SessionLock {
    const held = new SessionLock(lock, now());
    this.locks.set(lock.id, held);
    if (this.controller.signal.aborted) held.controller.abort(this.controller.signal.reason);
    return held;
  }

  /** Releases one lock of the session before the session ends. */
  async release(lock: SessionLock): Promise<void> {
    this.locks.delete(lock.id);
    try {
      await this.transport.send("POST", "/v1/locks/release", { name: lock.name, id: lock.id }, REQUEST_TIMEOUT_MS);
    } catch (e) {
      if (e instanceof CallFailure) throw refused(e.failure);
      throw e;
    }
  }

  /** Closes the session: it and every lock of it are released. Answers how many locks went with it. */
  async close(): Promise<number> {
    this.closed = true;
    this.controller.abort(new LostError("the session was closed"));
    try {
      const answer = await this.transport.send("POST", "/v1/sessions/close", { id: this.id }, REQUEST_TIMEOUT_MS);
      const released = (answer as { released?: unknown }).released;
      return typeof released === "number" ? released : 0;
    } catch (e) {
      if (e instanceof CallFailure) throw refused(e.failure);
      throw e;
    }
  }

  private lapse(): number {
    return this.endsAt - this.marginMs;
  }

  /** Marks lost every lock not in `held`, as a renewal sent at `sent` found them; later grants are kept. */
  private keepOnly(held: readonly string[], sent: number): void {
    const keep = new Set(held);
    for (const [id, l] of this.locks) {
      if (!keep.has(id) && l.grantedAt < sent) {
        l.controller.abort(new LostError("the lock of the session was lost"));
        this.locks.delete(id);
      }
    }
  }

  /** Renews every `every` until lost or closed; a refusal loses it at once, no answer is tried again, node after node, until the lapse. */
  private async renewing(every: number): Promise<void> {
    const stop = this.controller.signal;
    try {
      for (;;) {
        await sleep(Math.min(every, this.lapse() - now()), false, stop);
        for (let attempt = 0; ; attempt++) {
          if (this.closed || this.isLost()) return;
          const body = { id: this.id, digest: digest(this.locks.keys()) };
          const sent = now();
          // A share of the time left for every endpoint not tried yet in the
          // round: a node that hangs leaves time for the others.
          const count = Math.max(1, this.transport.count);
          const timeout = attemptTimeout(this.lapse() - sent, count - (attempt % count));
          const atLapse = new AbortController();
          const timer = setTimeout(() => atLapse.abort(), this.lapse() - sent);
          timer.unref();
          const onStop = () => atLapse.abort();
          stop.addEventListener("abort", onStop, { once: true });
          try {
            const answer = await this.transport.send("POST", "/v1/sessions/renew", body, timeout, atLapse.signal);
            if (this.closed) return;
            const info = toSessionInfo((answer as { session?: never }).session);
            this.endsAt = sent + info.ttlMs;
            const held = (answer as { held?: unknown }).held;
            if (Array.isArray(held)) this.keepOnly(held.filter((x): x is string => typeof x === "string"), sent);
            this.infoNow = info;
            break;
          } catch (e) {
            if (this.closed) return;
            if (atLapse.signal.aborted) {
              this.controller.abort(new LostError("the session lapsed"));
              return;
            }
            if (e instanceof CallFailure && e.failure.type === "api" && !retryable(e.failure)) {
              this.controller.abort(new LostError("the session was refused a renewal"));
              return;
            }
            await sleep(100, false);
          } finally {
            clearTimeout(timer);
            stop.removeEventListener("abort", onStop);
          }
        }
      }
    } catch {
      this.controller.abort(new LostError("the session's renewal failed"));
    }
  }
}
