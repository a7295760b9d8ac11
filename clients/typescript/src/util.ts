// Time, pauses and the renewal schedule's rules (crates/client/src/guard.rs
// and release.rs).

import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { BadRequestError, LeaseholdError, LostError, NoAnswerError, UnavailableError, HeldError, ReservedError, NotHeldError, KindMismatchError, UnauthorizedError, ForbiddenError, ServerError, UnknownRouteError, MembershipError } from "./errors.js";
import { CallFailure, type Failure } from "./transport.js";
import { toLockInfo } from "./types.js";

/** The monotonic clock every lease is counted on, in milliseconds. */
export function now(): number {
  return performance.now();
}

/**
 * A pause of `ms`. `ref: false` for a background task's pause, which must
 * not keep the process alive by itself; a call the caller awaits keeps it.
 */
export function sleep(ms: number, ref = true, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, Math.max(0, ms));
    if (!ref) t.unref();
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** A short pause before trying again: 50 ms doubling to 500 ms. */
export function backoff(attempt: number, signal?: AbortSignal): Promise<void> {
  return sleep(Math.min(50 * 2 ** Math.min(attempt, 4), 500), true, signal);
}

/** The longest margin before a lease's end at which an unrenewed lock counts as lost. */
export const MAX_LAPSE_MARGIN_MS = 2_000;
/** The shortest renewal period a schedule may ask for. */
export const MIN_RENEW_EVERY_MS = 10;
/** The lease assumed before the cluster says which it granted. */
export const ASSUMED_DEFAULT_LEASE_MS = 30_000;
/** How long a one-shot call keeps retrying through other nodes while none can serve. */
export const RETRY_FOR_MS = 10_000;
/** The time allowed one request beyond any wait it asks for. */
export const REQUEST_TIMEOUT_MS = 5_000;
/** The longest one renewal or release attempt may take before another node is tried. */
export const ATTEMPT_TIMEOUT_MS = 2_000;
/** The shortest time one attempt is given, however many endpoints share what is left. */
const SHORTEST_ATTEMPT_MS = 100;
/** The longest wait of one watch (the node's limit). */
export const MAX_WATCH_MS = 60_000;

/**
 * How long one attempt may take with `left` before the deadline: a share of
 * it for each endpoint not tried yet in this round, so a node that hangs
 * leaves time to try the others (at least 100 ms, or what is left, at most 2 s).
 */
export function attemptTimeout(left: number, triesLeft: number): number {
  const share = left / Math.max(1, triesLeft);
  return Math.min(Math.max(share, SHORTEST_ATTEMPT_MS), left, ATTEMPT_TIMEOUT_MS);
}

/** When a guard renews, and how long before the lease's end an unrenewed lock counts as lost. */
export interface Schedule {
  everyMs: number;
  marginMs: number;
}

/** What a schedule is made of. */
export interface ScheduleOptions {
  renewEveryMs?: number | undefined;
  lapseMarginMs?: number | undefined;
}

function asked(lease: number, o: ScheduleOptions): Schedule {
  return {
    everyMs: o.renewEveryMs ?? lease / 3,
    marginMs: o.lapseMarginMs ?? Math.min(lease / 10, MAX_LAPSE_MARGIN_MS),
  };
}

/**
 * The schedule `o` asks for under `lease`, or `BadRequestError` if it cannot
 * keep the lock: a renewal at least twice a lease and at most every 10 ms, a
 * margin under half of it, and room for a whole period and a half before
 * the margin.
 */
export function checkedSchedule(lease: number, o: ScheduleOptions): Schedule {
  const s = asked(lease, o);
  const { everyMs: every, marginMs: margin } = s;
  if (every < MIN_RENEW_EVERY_MS || every > lease / 2) {
    throw new BadRequestError(
      `a renewal every ${every} ms does not fit a ${lease} ms lease: renew at least twice a lease, and at most every ${MIN_RENEW_EVERY_MS} ms`,
    );
  }
  if (margin >= lease / 2) {
    throw new BadRequestError(`a lapse margin of ${margin} ms is too long for a ${lease} ms lease: keep it under half`);
  }
  if (every + every / 2 + margin > lease) {
    throw new BadRequestError(
      `a renewal every ${every} ms with a lapse margin of ${margin} ms leaves too little of a ${lease} ms lease between renewals: shorten one of them`,
    );
  }
  return s;
}

/**
 * The schedule for a granted `lease`: as asked where it fits; where the
 * cluster granted less than assumed, the margin asked for is kept if under
 * half the lease (else a quarter of it), and the period shortened around it.
 */
export function fittedSchedule(lease: number, o: ScheduleOptions): Schedule {
  let s: Schedule;
  try {
    s = checkedSchedule(lease, o);
  } catch {
    const a = asked(lease, o);
    const margin = a.marginMs < lease / 2 ? a.marginMs : lease / 4;
    const room = (Math.max(0, lease - margin) * 2) / 3;
    s = { everyMs: Math.min(a.everyMs, lease / 2, room), marginMs: margin };
  }
  return { everyMs: Math.max(s.everyMs, 1), marginMs: s.marginMs };
}

/** A new name for one acquisition: 32 random hex digits. */
export function requestId(): string {
  return randomBytes(16).toString("hex");
}

/** A duration option: a non-negative number of milliseconds. */
export function checkMs(what: string, v: number | undefined): void {
  if (v !== undefined && (typeof v !== "number" || !Number.isFinite(v) || v < 0)) {
    throw new BadRequestError(`${what} must be a non-negative number of milliseconds`);
  }
}

/** `BadRequestError` for a name no lock can have (empty, or over 512 bytes). */
export function checkName(name: string): void {
  const bytes = Buffer.byteLength(name, "utf8");
  if (typeof name !== "string" || bytes === 0 || bytes > 512) {
    throw new BadRequestError(`name: a lock's name is 1 to 512 bytes, not ${bytes}`);
  }
}

/** The error a failed call is to the caller (the Rust client's `refused`). */
export function refused(f: Failure): LeaseholdError {
  switch (f.type) {
    case "noAnswer":
      return new NoAnswerError(`no answer from the cluster: ${f.message}`);
    case "notSent":
      return new UnavailableError(`the cluster is unavailable: ${f.message}`);
    case "api":
      break;
  }
  switch (f.code) {
    case "held":
      if (f.lock !== undefined) {
        try {
          return new HeldError(toLockInfo(f.lock));
        } catch {
          /* said below */
        }
      }
      if (f.lock === undefined) return new ReservedError(f.message);
      return new ServerError(`a held answer with an unreadable lock: ${f.message}`);
    case "not_held":
      return new NotHeldError();
    case "kind_mismatch":
      return new KindMismatchError(f.message);
    case "bad_request":
    case "too_large":
    case "in_session":
      return new BadRequestError(`bad request: ${f.message}`);
    case "unauthorized":
      return new UnauthorizedError(`unauthorized: ${f.message}`);
    case "forbidden":
      return new ForbiddenError(`forbidden: ${f.message}`);
    case "not_rebuilt":
    case "no_leader":
    case "not_caught_up":
    case "upgrading":
      return new UnavailableError(`the cluster is unavailable: ${f.message}`);
    case "unknown_route":
    case "method_not_allowed":
      return new UnknownRouteError(
        `the node serves no such call (is the endpoint a leasehold node's address?): ${f.message}`,
      );
    case "unknown_member":
    case "member_exists":
    case "change_in_progress":
    case "would_lose_quorum":
      return new MembershipError(f.code, f.message);
    default:
      return new ServerError(`the node failed: ${f.message}`);
  }
}

/** `e` as the caller sees it: a `CallFailure` becomes its `LeaseholdError`. */
export function asLeaseholdError(e: unknown): unknown {
  return e instanceof CallFailure ? refused(e.failure) : e;
}

export { LostError };
