// The API's shapes (docs/api.md, "A lock"), read from its JSON.

import type { Json } from "./json.js";

/** A request waiting for a lock, in the order it will be served. */
export interface Queued {
  holder: string;
  node: number;
  since?: string;
  waitedMs?: number;
  waitLeftMs?: number;
  leaseMs?: number;
  mode?: string;
  permits?: number;
  with?: string[];
}

/** A lock as the cluster shows it (docs/api.md, "A lock"). */
export interface LockInfo {
  name: string;
  /** The grant's id (a ULID); absent for a token that may read the name but not lock it. */
  id: string;
  /** The node the acquire, or the last renewal, came through. */
  node: number;
  holder: string;
  /** The fencing token, exact past 2^53. */
  fence: bigint;
  leaseMs: number;
  /** Time left, as the answering node counts it. */
  ttlMs: number;
  acquiredAt?: string;
  expiresAt?: string;
  data?: string;
  /** `"shared"`, `"permit"`, or absent for an exclusive lock. */
  mode?: string;
  permits?: number;
  others?: LockInfo[];
  lockDelayMs?: number;
  delayLeftMs?: number;
  waiters?: number;
  queue?: Queued[];
  /** The session the lock hangs off, if any. */
  session?: string;
}

/** A session as the cluster shows it. */
export interface SessionInfo {
  id: string;
  node: number;
  holder: string;
  leaseMs: number;
  ttlMs: number;
  expiresAt?: string;
  /** How many locks hang off it (renew and close). */
  locks?: number;
}

type Obj = { [key: string]: Json };

function obj(v: Json | undefined): Obj {
  if (v === null || v === undefined || typeof v !== "object" || Array.isArray(v)) {
    throw new TypeError("an answer without the object it must carry");
  }
  return v;
}

function num(v: Json | undefined): number | undefined {
  if (typeof v === "number") return v;
  if (typeof v === "bigint") return Number(v);
  return undefined;
}

function str(v: Json | undefined): string | undefined {
  return typeof v === "string" ? v : undefined;
}

function big(v: Json | undefined): bigint {
  if (typeof v === "bigint") return v;
  if (typeof v === "number" && Number.isInteger(v)) return BigInt(v);
  if (typeof v === "string" && /^\d+$/.test(v)) return BigInt(v);
  throw new TypeError("a lock without its fence");
}

function put<T extends object, K extends keyof T>(target: T, key: K, value: T[K] | undefined): void {
  if (value !== undefined) target[key] = value;
}

/** A lock from the API's JSON. */
export function toLockInfo(raw: Json | undefined): LockInfo {
  const o = obj(raw);
  const name = str(o.name);
  if (name === undefined) throw new TypeError("a lock without its name");
  const lock: LockInfo = {
    name,
    id: str(o.id) ?? "",
    node: num(o.node) ?? 0,
    holder: str(o.holder) ?? "",
    fence: big(o.fence),
    leaseMs: num(o.lease_ms) ?? 0,
    ttlMs: num(o.ttl_ms) ?? 0,
  };
  put(lock, "acquiredAt", str(o.acquired_at));
  put(lock, "expiresAt", str(o.expires_at));
  put(lock, "data", str(o.data));
  put(lock, "mode", str(o.mode));
  put(lock, "permits", num(o.permits));
  if (Array.isArray(o.others)) lock.others = o.others.map(toLockInfo);
  put(lock, "lockDelayMs", num(o.lock_delay_ms));
  put(lock, "delayLeftMs", num(o.delay_left_ms));
  put(lock, "waiters", num(o.waiters));
  if (Array.isArray(o.queue)) lock.queue = o.queue.map(toQueued);
  put(lock, "session", str(o.session));
  return lock;
}

function toQueued(raw: Json): Queued {
  const o = obj(raw);
  const q: Queued = { holder: str(o.holder) ?? "", node: num(o.node) ?? 0 };
  put(q, "since", str(o.since));
  put(q, "waitedMs", num(o.waited_ms));
  put(q, "waitLeftMs", num(o.wait_left_ms));
  put(q, "leaseMs", num(o.lease_ms));
  put(q, "mode", str(o.mode));
  put(q, "permits", num(o.permits));
  if (Array.isArray(o.with)) q.with = o.with.filter((n): n is string => typeof n === "string");
  return q;
}

/** A name nobody holds that requests wait for, kept free for them (a set waiting for all its names). */
export interface Awaited {
  name: string;
  waiters: number;
  queue: Queued[];
}

/** A listing: the locks held under the prefix, how many in all (absent for a token of `--acl`), and the free names under it that requests wait for. */
export interface Listing {
  locks: LockInfo[];
  total?: number;
  awaited: Awaited[];
}

/** A listing from the API's JSON. */
export function toListing(raw: Json | undefined): Listing {
  const o = obj(raw);
  const listing: Listing = {
    locks: Array.isArray(o.locks) ? o.locks.map(toLockInfo) : [],
    awaited: Array.isArray(o.awaited) ? o.awaited.map(toAwaited) : [],
  };
  put(listing, "total", num(o.total));
  return listing;
}

function toAwaited(raw: Json): Awaited {
  const o = obj(raw);
  const name = str(o.name);
  if (name === undefined) throw new TypeError("an awaited name without its name");
  return {
    name,
    waiters: num(o.waiters) ?? 0,
    queue: Array.isArray(o.queue) ? o.queue.map(toQueued) : [],
  };
}

/** A session from the API's JSON. */
export function toSessionInfo(raw: Json | undefined): SessionInfo {
  const o = obj(raw);
  const id = str(o.id);
  if (id === undefined) throw new TypeError("a session without its id");
  const s: SessionInfo = {
    id,
    node: num(o.node) ?? 0,
    holder: str(o.holder) ?? "",
    leaseMs: num(o.lease_ms) ?? 0,
    ttlMs: num(o.ttl_ms) ?? 0,
  };
  put(s, "expiresAt", str(o.expires_at));
  put(s, "locks", num(o.locks));
  return s;
}

/** A field of an object answer. */
export function field(raw: Json, key: string): Json | undefined {
  return obj(raw)[key];
}
