// The client: one-shot calls retried through the endpoints, acquires that
// hand back a renewing guard, sets, sessions and election
// (crates/client/src/lib.rs, election.rs).

import { ArrivedLateError, HeldError, LeaseholdError, LostError, BadRequestError } from "./errors.js";
import type { Json } from "./json.js";
import { Lock, type Loss } from "./lock.js";
import { Session, SessionLock, type SessionAcquireOptions } from "./session.js";
import { LockSet } from "./set.js";
import { CallFailure, HttpTransport, readCa, retryable, retryableCode, segment } from "./transport.js";
import { toListing, toLockInfo, toSessionInfo, type Listing, type LockInfo } from "./types.js";
import {
  ASSUMED_DEFAULT_LEASE_MS,
  MAX_WATCH_MS,
  REQUEST_TIMEOUT_MS,
  RETRY_FOR_MS,
  backoff,
  checkMs,
  checkName,
  checkedSchedule,
  now,
  refused,
  requestId,
  sleep,
} from "./util.js";

/** How a client reaches the cluster. */
export interface ClientOptions {
  /**
   * Sent with every request as `Authorization: Bearer`, for a cluster run
   * with `--acl`. Default: the environment variable `tokenEnv` names
   * (`LEASEHOLD_TOKEN`, as the command line reads it), if set. `null`: none.
   */
  token?: string | null;
  /** The environment variable the token is read from when `token` is not given (default `LEASEHOLD_TOKEN`). */
  tokenEnv?: string;
  /**
   * The CA (a PEM file) the nodes' certificates are verified against, and
   * the only one trusted; bare `host:port` endpoints are then reached with
   * `https://`. Default: `LEASEHOLD_TLS_CA`, as the command line reads it.
   * `null`: none.
   */
  tlsCaFile?: string | null;
  /** The CA as PEM text, in place of a file. */
  tlsCaPem?: string;
  /** How long a one-shot call keeps trying while no node can serve (default 10 s). */
  retryForMs?: number;
}

/** How a lock is asked for. */
export interface AcquireOptions {
  /** The lease; none means the cluster's default. */
  leaseMs?: number;
  /** How long to wait while another holds it; 0 (the default) fails at once with `HeldError`. */
  waitMs?: number;
  /** Who holds it, for people reading a listing. */
  holder?: string;
  /** Data kept with the lock. */
  data?: string;
  /** How often to renew; none means a third of the lease. At most half the lease. */
  renewEveryMs?: number;
  /** How long before its lease ends an unrenewed lock counts as lost; none: a tenth of the lease, at most 2 s. */
  lapseMarginMs?: number;
  /** Hold the name shared, beside other readers. */
  shared?: boolean;
  /** Hold one of `permits` permits of the name (a semaphore). */
  permits?: number;
  /** Keep the name closed this long after the lease runs out unreleased (at most a minute). */
  lockDelayMs?: number;
}

/** How a candidate campaigns. */
export interface CampaignOptions {
  /** The leadership lease; none means the cluster's default. */
  leaseMs?: number;
  /** Give up after this long without winning (with `HeldError`); none means never. */
  giveUpAfterMs?: number;
}

/** How a session is opened. */
export interface SessionOptions {
  /** The session's lease (every lock of it has it); none means the cluster's default. */
  ttlMs?: number;
  holder?: string;
  /** The lock-delay of every lock taken in the session, unless the lock asks its own (protocol 8). */
  lockDelayMs?: number;
}

/** What an observer is told: the leader now (`null`: none), or a failed call (the observer goes on). */
export type Observed = { leader: LockInfo | null; error?: undefined } | { error: LeaseholdError; leader?: undefined };

/** The cluster as the answering node sees it (`GET /v1/cluster`), as the API has it. */
export type ClusterAnswer = { [key: string]: Json } & { node: number; leader: number | null; term: number | bigint };

/** The longest single wait of a campaign; it waits again after. */
const CAMPAIGN_WAIT_MS = 60_000;
/** How long an observer's watch waits before asking again. */
const OBSERVE_WAIT_MS = 30_000;

/** FNV-1a (64-bit) of the data's UTF-8 bytes, 0 for none: a watch's `after_data`. */
export function dataTag(data: string | undefined): bigint {
  if (data === undefined) return 0n;
  let h = 0xcbf29ce484222325n;
  for (const b of new TextEncoder().encode(data)) {
    h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h;
}

/** This leadership of an election: a held lock whose data is the leader's value. */
export class Leadership {
  /** @internal */
  constructor(readonly guard: Lock) {}
  get lock(): LockInfo {
    return this.guard.lock;
  }
  get fence(): bigint {
    return this.guard.fence;
  }
  get node(): number {
    return this.guard.node;
  }
  get leaseEnds(): number {
    return this.guard.leaseEnds;
  }
  get signal(): AbortSignal {
    return this.guard.signal;
  }
  get loss(): Loss | undefined {
    return this.guard.loss;
  }
  get lost(): Promise<void> {
    return this.guard.lost;
  }
  isLost(): boolean {
    return this.guard.isLost();
  }
  check(): void {
    this.guard.check();
  }
  /** Gives leadership up at once, so another candidate can take over. */
  resign(): Promise<void> {
    return this.guard.release();
  }
}

/** A client of a leasehold cluster. */
export class Client {
  /** @internal */
  readonly transport: HttpTransport;
  private readonly retryForMs: number;

  constructor(endpoints: readonly string[], options: ClientOptions = {}) {
    const env = process.env;
    let token: string | undefined;
    if (options.token === null) token = undefined;
    else if (options.token !== undefined) token = options.token;
    else {
      const fromEnv = env[options.tokenEnv ?? "LEASEHOLD_TOKEN"];
      token = fromEnv !== undefined && fromEnv !== "" ? fromEnv : undefined;
    }
    let ca: string | undefined = options.tlsCaPem;
    if (ca === undefined && options.tlsCaFile !== null) {
      const file = options.tlsCaFile ?? (env.LEASEHOLD_TLS_CA || undefined);
      if (file !== undefined) ca = readCa(file);
    }
    checkMs("retryForMs", options.retryForMs);
    this.retryForMs = options.retryForMs ?? RETRY_FOR_MS;
    this.transport = new HttpTransport(endpoints, { token, tlsCaPem: ca });
  }

  /** Closes idle connections (they close by themselves after 20 s, and never keep the process alive). */
  close(): Promise<void> {
    return this.transport.close();
  }

  /**
   * Runs `call` until it succeeds, is refused for good, or `until` passes;
   * the transport moves to another node after each failure. Throws `CallFailure`.
   */
  private async retrying<T>(until: number, call: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    let attempt = 0;
    // An attempt that got no answer may have gone through: if one did, the
    // outcome stays unknown whatever the later ones say.
    let unanswered: string | undefined;
    for (;;) {
      try {
        return await call();
      } catch (e) {
        if (!(e instanceof CallFailure)) throw e;
        const f = e.failure;
        // A call its caller gave up on (an observer stopped) is not tried again.
        if (signal?.aborted) throw e;
        if (retryable(f) && now() < until) {
          if (f.type === "noAnswer") unanswered = f.message;
          await backoff(attempt++, signal);
          continue;
        }
        if (f.type === "api" && retryableCode(f.code) && unanswered !== undefined) {
          throw new CallFailure({ type: "noAnswer", message: `${unanswered} (then: ${f.message})` });
        }
        throw e;
      }
    }
  }

  private async oneShot<T>(call: () => Promise<T>, extraMs = 0, signal?: AbortSignal): Promise<T> {
    try {
      return await this.retrying(now() + this.retryForMs + extraMs, call, signal);
    } catch (e) {
      if (e instanceof CallFailure) throw refused(e.failure);
      throw e;
    }
  }

  private acquireBody(name: string | undefined, names: string[] | undefined, o: AcquireOptions, session?: string) {
    const body: Record<string, unknown> = {};
    if (name !== undefined) body.name = name;
    if (names !== undefined) body.names = names;
    if (o.holder !== undefined) body.holder = o.holder;
    if (o.leaseMs !== undefined) body.lease_ms = Math.floor(o.leaseMs);
    if (o.data !== undefined) body.data = o.data;
    body.request_id = requestId();
    if (o.shared) body.shared = true;
    if (o.permits !== undefined) body.permits = o.permits;
    if (o.lockDelayMs !== undefined && o.lockDelayMs > 0) body.lock_delay_ms = Math.floor(o.lockDelayMs);
    if (session !== undefined) body.session = session;
    return body;
  }

  /**
   * Sends an acquire until a node grants it, refuses it for good, or the
   * wait and the retries run out. Answers the answer and where the lease is
   * counted from: the send of the call that won it, plus the time the node held it.
   */
  private async granted(body: Record<string, unknown>, o: AcquireOptions): Promise<{ answer: Json; sentAt: number }> {
    for (const k of ["leaseMs", "waitMs", "renewEveryMs", "lapseMarginMs", "lockDelayMs"] as const) checkMs(k, o[k]);
    checkedSchedule(o.leaseMs ?? ASSUMED_DEFAULT_LEASE_MS, o);
    const wait = o.waitMs ?? 0;
    const start = now();
    const until = start + wait + this.retryForMs;
    const waitUntil = start + wait;
    let sent = start;
    for (;;) {
      try {
        const answer = await this.retrying(until, () => {
          sent = now();
          const left = Math.max(0, waitUntil - sent);
          const b = { ...body };
          if (left > 0) b.wait_ms = Math.floor(left);
          return this.transport.send("POST", "/v1/locks/acquire", b, left + REQUEST_TIMEOUT_MS);
        });
        const served = (answer as { served_ms?: unknown }).served_ms;
        return { answer, sentAt: sent + (typeof served === "number" ? served : 0) };
      } catch (e) {
        if (!(e instanceof CallFailure)) throw e;
        // A node waits at most 10 min at a time: ask again while the wait lasts.
        if (e.failure.type === "api" && e.failure.code === "held" && now() < waitUntil) {
          await backoff(0);
          continue;
        }
        throw refused(e.failure);
      }
    }
  }

  private lockOf(answer: Json, key: "lock"): LockInfo {
    try {
      return toLockInfo((answer as Record<string, Json>)[key]);
    } catch (e) {
      throw refused({ type: "api", status: 500, code: "internal", message: `an answer without its lock: ${(e as Error).message}` });
    }
  }

  /**
   * Acquires `name`, waiting as `options` say; the `Lock` renews it until
   * released. With `session`, the lock is taken in that session
   * (`session.acquire`): a `SessionLock`, with the session's lease.
   */
  acquire(name: string, options: AcquireOptions & { session: Session }): Promise<SessionLock>;
  acquire(name: string, options?: AcquireOptions & { session?: undefined }): Promise<Lock>;
  async acquire(name: string, options: AcquireOptions & { session?: Session } = {}): Promise<Lock | SessionLock> {
    if (options.session !== undefined) {
      const { session, leaseMs: _lease, renewEveryMs: _every, lapseMarginMs: _margin, ...rest } = options;
      return session.acquire(name, rest);
    }
    const { answer, sentAt } = await this.granted(this.acquireBody(name, undefined, options), options);
    const granted = this.lockOf(answer, "lock");
    return Lock.start({ transport: this.transport, granted, sentAt, leaseMs: options.leaseMs, schedule: options });
  }

  /** Acquires `name` if it is free now; otherwise fails at once with `HeldError`. */
  tryAcquire(name: string, options: AcquireOptions = {}): Promise<Lock> {
    return this.acquire(name, { ...options, waitMs: 0, session: undefined });
  }

  /**
   * Acquires every one of `names` at once, or none: granted in one step,
   * each lock with its own fence. The `LockSet` is lost when any lock is.
   */
  async acquireAll(names: readonly string[], options: AcquireOptions = {}): Promise<LockSet> {
    const { answer, sentAt } = await this.granted(this.acquireBody(undefined, [...names], options), options);
    const raw = (answer as Record<string, Json>).locks;
    let locks: LockInfo[];
    try {
      locks = Array.isArray(raw) ? raw.map(toLockInfo) : [toLockInfo((answer as Record<string, Json>).lock)];
    } catch (e) {
      throw refused({ type: "api", status: 500, code: "internal", message: `an answer without its locks: ${(e as Error).message}` });
    }
    const guards: Lock[] = [];
    try {
      for (const granted of locks) {
        guards.push(Lock.start({ transport: this.transport, granted, sentAt, leaseMs: options.leaseMs, schedule: options }));
      }
    } catch (e) {
      for (const g of guards) void g.release().catch(() => undefined);
      throw e;
    }
    return new LockSet(this.transport, guards);
  }

  /**
   * Runs `work` while holding `name`, then releases it. `signal` is aborted
   * the moment the lock is lost or about to lapse; the call then rejects
   * with `LostError` (at once after a refused renewal; after a lapse, once
   * the work returns or the lease ends), even if the work returned a value.
   */
  async withLock<T>(
    name: string,
    work: (lock: Lock, signal: AbortSignal) => Promise<T> | T,
    options: AcquireOptions = {},
  ): Promise<T> {
    const lock = await this.acquire(name, options);
    return runUnder(lock, work);
  }

  /** As `withLock`, under every one of `names` at once (`acquireAll`). */
  async withLocks<T>(
    names: readonly string[],
    work: (set: LockSet, signal: AbortSignal) => Promise<T> | T,
    options: AcquireOptions = {},
  ): Promise<T> {
    const set = await this.acquireAll(names, options);
    const lost = set.lost.then(() => "lost" as const);
    const settled = Promise.resolve()
      .then(() => work(set, set.signal))
      .then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
    const first = await Promise.race([settled, lost]);
    if (first === "lost" || set.isLost()) {
      void set.release().catch(() => undefined);
      throw new LostError();
    }
    await set.release().catch(() => undefined);
    if ("error" in first) throw first.error;
    return first.value;
  }

  /** The lock `name` now, or `null` if it is free. */
  async get(name: string): Promise<LockInfo | null> {
    checkName(name);
    const answer = await this.oneShot(() => this.getLock(`/v1/locks/${segment(name)}`, REQUEST_TIMEOUT_MS));
    return answer;
  }

  private async getLock(path: string, timeoutMs: number, signal?: AbortSignal): Promise<LockInfo | null> {
    try {
      const answer = await this.transport.send("GET", path, undefined, timeoutMs, signal);
      return this.lockOf(answer, "lock");
    } catch (e) {
      if (e instanceof CallFailure && e.failure.type === "api" && e.failure.code === "not_held") return null;
      throw e;
    }
  }

  /**
   * The lock `name` once its fence differs from `afterFence` (0 for none)
   * or, given `afterData`, its data from that; or after `waitMs` (at most 60 s).
   */
  async watch(
    name: string,
    afterFence: bigint,
    waitMs: number,
    options: { afterData?: string | null; signal?: AbortSignal } = {},
  ): Promise<LockInfo | null> {
    checkName(name);
    const wait = Math.floor(Math.min(Math.max(0, waitMs), MAX_WATCH_MS));
    let path = `/v1/locks/${segment(name)}?wait_ms=${wait}&after_fence=${afterFence}`;
    if (options.afterData !== undefined) path += `&after_data=${dataTag(options.afterData ?? undefined)}`;
    return this.oneShot(() => this.getLock(path, wait + REQUEST_TIMEOUT_MS, options.signal), wait, options.signal);
  }

  /** The locks whose names start with `prefix`, at most `limit` (default 1000). */
  async list(options: { prefix?: string; limit?: number } = {}): Promise<LockInfo[]> {
    return (await this.listing(options)).locks;
  }

  /**
   * As `list`, with how many locks are held under `prefix` in all and the free names under it that
   * requests wait for (a set waiting for all its names keeps the free ones for itself).
   */
  async listing(options: { prefix?: string; limit?: number } = {}): Promise<Listing> {
    const path = `/v1/locks?prefix=${segment(options.prefix ?? "")}&limit=${options.limit ?? 1000}`;
    const answer = await this.oneShot(() => this.transport.send("GET", path, undefined, REQUEST_TIMEOUT_MS));
    return toListing(answer);
  }

  /** The cluster as the node reached sees it. */
  async cluster(): Promise<ClusterAnswer> {
    const answer = await this.oneShot(() => this.transport.send("GET", "/v1/cluster", undefined, REQUEST_TIMEOUT_MS));
    return answer as ClusterAnswer;
  }

  /** Releases a lock by name and id (one held without a guard); `NotHeldError` if not held under that id. */
  async release(name: string, id: string): Promise<LockInfo> {
    const answer = await this.oneShot(() =>
      this.transport.send("POST", "/v1/locks/release", { name, id }, REQUEST_TIMEOUT_MS),
    );
    return this.lockOf(answer, "lock");
  }

  /** Opens a session, renewed in the background once for all the locks taken in it. */
  async openSession(options: SessionOptions = {}): Promise<Session> {
    checkMs("ttlMs", options.ttlMs);
    checkMs("lockDelayMs", options.lockDelayMs);
    const lockDelayMs = options.lockDelayMs;
    const body: Record<string, unknown> = {};
    if (options.holder !== undefined) body.holder = options.holder;
    if (options.ttlMs !== undefined) body.ttl_ms = Math.floor(options.ttlMs);
    let sent = now();
    const answer = await this.oneShot(() => {
      sent = now();
      return this.transport.send("POST", "/v1/sessions/open", body, REQUEST_TIMEOUT_MS);
    });
    let info;
    try {
      info = toSessionInfo((answer as Record<string, Json>).session);
    } catch (e) {
      throw refused({ type: "api", status: 500, code: "internal", message: (e as Error).message });
    }
    const served = (answer as { served_ms?: unknown }).served_ms;
    const session = new Session({ transport: this.transport, info, sentAt: sent + (typeof served === "number" ? served : 0) });
    session.grant = async (name: string, o: SessionAcquireOptions) => {
      const options: AcquireOptions = { ...o, lockDelayMs: o.lockDelayMs ?? lockDelayMs };
      const { answer } = await this.granted(this.acquireBody(name, undefined, options, session.id), options);
      return this.lockOf(answer, "lock");
    };
    return session;
  }

  /**
   * Waits until this candidate leads election `name`, announcing `value`
   * (kept as the lock's holder and data), and returns its leadership.
   * Gives up with `HeldError` after `giveUpAfterMs`.
   */
  async campaign(name: string, value: string, options: CampaignOptions = {}): Promise<Leadership> {
    checkMs("giveUpAfterMs", options.giveUpAfterMs);
    const giveUp = options.giveUpAfterMs === undefined ? undefined : now() + options.giveUpAfterMs;
    for (;;) {
      const wait = giveUp === undefined ? CAMPAIGN_WAIT_MS : Math.min(Math.max(0, giveUp - now()), CAMPAIGN_WAIT_MS);
      const acquire: AcquireOptions = { waitMs: wait, holder: value, data: value };
      if (options.leaseMs !== undefined) acquire.leaseMs = options.leaseMs;
      try {
        return new Leadership(await this.acquire(name, acquire));
      } catch (e) {
        if ((e instanceof HeldError || e instanceof ArrivedLateError) && (giveUp === undefined || now() < giveUp)) continue;
        throw e;
      }
    }
  }

  /** Who leads election `name` now, if anyone: the leader's lock, whose `data` is its value. */
  leader(name: string): Promise<LockInfo | null> {
    return this.get(name);
  }

  /**
   * Who leads election `name`, as it changes: first the leader now (or
   * `null`), then each change (a new leader, or a leader's new value), by
   * long polls. A failed call is told (`{ error }`) and the observer goes
   * on, after a pause (50 ms doubling to 2 s). Ends when the loop breaks
   * out or `signal` aborts.
   */
  observe(name: string, options: { signal?: AbortSignal } = {}): AsyncGenerator<Observed, void, undefined> {
    const stop = new AbortController();
    if (options.signal) {
      if (options.signal.aborted) stop.abort();
      else options.signal.addEventListener("abort", () => stop.abort(), { once: true });
    }
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const client = this;
    async function* run(): AsyncGenerator<Observed, void, undefined> {
      let seen: { fence: bigint; data: string | undefined } | null | undefined;
      let failures = 0;
      try {
        while (!stop.signal.aborted) {
          if (failures > 0) {
            await sleep(Math.min(50 * 2 ** Math.min(failures - 1, 6), 2_000), true, stop.signal);
            if (stop.signal.aborted) return;
          }
          let current: LockInfo | null;
          try {
            if (seen === undefined) current = await client.get(name);
            else
              current = await client.watch(name, seen === null ? 0n : seen.fence, OBSERVE_WAIT_MS, {
                afterData: seen === null ? null : (seen.data ?? null),
                signal: stop.signal,
              });
          } catch (e) {
            if (stop.signal.aborted) return;
            failures++;
            yield { error: e instanceof LeaseholdError ? e : new BadRequestError(String(e)) };
            continue;
          }
          if (stop.signal.aborted) return;
          failures = 0;
          const now = current === null ? null : { fence: current.fence, data: current.data };
          const same =
            seen !== undefined &&
            ((seen === null && now === null) ||
              (seen !== null && now !== null && seen.fence === now.fence && seen.data === now.data));
          if (!same) {
            seen = now;
            yield { leader: current };
          }
        }
      } finally {
        stop.abort();
      }
    }
    const gen = run();
    const ret = gen.return.bind(gen);
    gen.return = (value?: unknown) => {
      stop.abort();
      return ret(value as undefined);
    };
    return gen;
  }
}

/** Runs `work` under `lock` as `withLock` does. */
async function runUnder<T>(lock: Lock, work: (lock: Lock, signal: AbortSignal) => Promise<T> | T): Promise<T> {
  const lost = lock.lost.then(() => "lost" as const);
  const settled = Promise.resolve()
    .then(() => work(lock, lock.signal))
    .then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
  const first = await Promise.race([settled, lost]);
  if (first === "lost") {
    // A refused renewal means another may hold it already: answer now. A
    // lapse leaves the work until the lease ends to see the signal and stop.
    if (lock.loss !== "Refused") await Promise.race([settled, lock.leaseEnded()]);
    throw new LostError();
  }
  // Work that returned because it saw the signal still ran on a lost lock.
  if (lock.isLost()) {
    void lock.release().catch(() => undefined);
    throw new LostError();
  }
  await lock.release().catch(() => undefined);
  if ("error" in first) throw first.error;
  return first.value;
}
