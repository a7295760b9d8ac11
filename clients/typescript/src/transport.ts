// How the client reaches the cluster: HTTP(S) to a list of endpoints, on
// Node's own fetch, starting at a random one and moving to the next when
// one does not serve (crates/client/src/transport.rs).

import { readFileSync } from "node:fs";
import { BadRequestError } from "./errors.js";
import { parseJson, stringifyJson, type Json } from "./json.js";

/** A call that failed, as the Rust client's `CallError`. */
export type Failure =
  /** A node answered with an error. */
  | { type: "api"; status: number; code: string; message: string; lock?: Json }
  /** No answer (timed out, or the connection broke after the request was sent): the outcome is unknown. */
  | { type: "noAnswer"; message: string }
  /** The request never reached a node (the connection could not be made): nothing was done. */
  | { type: "notSent"; message: string };

/** Thrown by the transport; the client turns it into a `LeaseholdError`. */
export class CallFailure extends Error {
  constructor(readonly failure: Failure) {
    super(failure.type === "api" ? `${failure.code}: ${failure.message}` : failure.message);
  }
}

/** The error codes the API names (docs/api.md, "Errors"). */
const KNOWN_CODES = new Set([
  "bad_request",
  "in_session",
  "held",
  "kind_mismatch",
  "not_held",
  "not_rebuilt",
  "no_leader",
  "unauthorized",
  "forbidden",
  "too_large",
  "wrong_member",
  "internal",
  "unknown_route",
  "method_not_allowed",
  "disabled",
  "unknown_member",
  "member_exists",
  "change_in_progress",
  "would_lose_quorum",
  "not_caught_up",
  "upgrading",
]);

/** Codes worth trying again elsewhere: no speaker, or not yet. */
export function retryableCode(code: string): boolean {
  return code === "not_rebuilt" || code === "no_leader" || code === "not_caught_up" || code === "upgrading";
}

/** Whether a one-shot call tries again after `f`. */
export function retryable(f: Failure): boolean {
  return f.type !== "api" || retryableCode(f.code);
}

/** How the transport talks to the nodes, beyond where. */
export interface TransportOptions {
  token?: string | undefined;
  /** The CA (PEM) the nodes' certificates are verified against, and the only one. */
  tlsCaPem?: string | undefined;
}

/** The longest one connection attempt may take (the Rust client's `connect_timeout`). */
const CONNECT_TIMEOUT_MS = 2_000;
/** How long an idle connection is kept (nodes close theirs after 30 s). */
const IDLE_KEPT_MS = 20_000;

// Node 20 bundles undici as its fetch but does not export its `Agent`, the
// only way to give fetch a CA of its own. The global dispatcher fetch puts
// in place (kept under `Symbol.for("undici.globalDispatcher.1")`) is such an Agent:
// its constructor makes ours. No package is needed.
type Dispatcher = { close?: () => Promise<void> };
type AgentClass = new (options: object) => Dispatcher;
let agentClass: Promise<AgentClass | undefined> | undefined;

function fetchAgentClass(): Promise<AgentClass | undefined> {
  agentClass ??= (async () => {
    const key = Symbol.for("undici.globalDispatcher.1");
    const g = globalThis as unknown as Record<symbol, unknown>;
    if (g[key] === undefined) {
      // fetch sets its global dispatcher up on its first call.
      await fetch("data:,").catch(() => undefined);
    }
    const dispatcher = g[key] as { constructor?: unknown } | undefined;
    const ctor = dispatcher?.constructor;
    if (typeof ctor === "function" && ctor.name === "Agent") return ctor as AgentClass;
    return undefined;
  })();
  return agentClass;
}

/** Endpoints as URLs: `host:port` gets `http://` (or `https://` with a CA). */
export function normalizeEndpoints(endpoints: readonly string[], tls: boolean): string[] {
  const scheme = tls ? "https://" : "http://";
  const out = endpoints
    .map((e) => e.trim().replace(/\/+$/, ""))
    .map((e) => (e.includes("://") ? e : `${scheme}${e}`))
    .filter((e) => (e.split("://")[1] ?? "") !== "");
  if (out.length === 0) throw new BadRequestError("no endpoints given");
  for (const e of out) {
    let url: URL;
    try {
      url = new URL(e);
    } catch (err) {
      throw new BadRequestError(`"${e}" is not an endpoint (host:port, or http(s)://host:port): ${String(err)}`);
    }
    if ((url.protocol !== "http:" && url.protocol !== "https:") || url.hostname === "") {
      throw new BadRequestError(`"${e}" is not an endpoint (host:port, or http(s)://host:port): no host, or not http(s)`);
    }
  }
  return out;
}

/** Reads a CA file: `BadRequestError` if it cannot be read or holds no PEM certificate. */
export function readCa(path: string): string {
  let pem: string;
  try {
    pem = readFileSync(path, "utf8");
  } catch (e) {
    throw new BadRequestError(`TLS CA ${path}: ${(e as Error).message}`);
  }
  if (!pem.includes("-----BEGIN CERTIFICATE-----")) {
    throw new BadRequestError(`TLS CA ${path}: the TLS CA holds no PEM certificate`);
  }
  return pem;
}

const TLS_CODES = /CERT|TLS|SSL|SELF_SIGNED|UNABLE_TO|HANDSHAKE/i;
const CONNECT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "UND_ERR_CONNECT_TIMEOUT",
]);

/** Names what went wrong with a request as an operator reads it first. */
function describe(err: unknown): { sent: boolean; message: string } {
  const chain: string[] = [];
  const codes: string[] = [];
  let e: unknown = err;
  for (let depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    const x = e as { message?: unknown; code?: unknown; cause?: unknown };
    if (typeof x.message === "string") chain.push(x.message);
    if (typeof x.code === "string") codes.push(x.code);
    e = x.cause;
  }
  const all = chain.join(": ");
  if (codes.includes("ECONNREFUSED")) return { sent: false, message: `connection refused (${all})` };
  if (codes.some((c) => TLS_CODES.test(c)) || /certificate|handshake/i.test(all)) {
    return { sent: false, message: `TLS handshake failed (${all})` };
  }
  if (codes.includes("ENOTFOUND") || codes.includes("EAI_AGAIN")) {
    return { sent: false, message: `the host name does not resolve (${all})` };
  }
  if (codes.some((c) => CONNECT_CODES.has(c))) return { sent: false, message: all };
  return { sent: true, message: all };
}

/** Percent-encodes a name as one path segment (`jobs/42` is `jobs%2F42`). */
export function segment(name: string): string {
  let out = "";
  for (const b of new TextEncoder().encode(name)) {
    const c = String.fromCharCode(b);
    if (/[A-Za-z0-9\-._~]/.test(c)) out += c;
    else out += `%${b.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** The API over HTTP, to whichever of several endpoints answers. */
export class HttpTransport {
  readonly endpoints: string[];
  /** The endpoint calls go to now: its place in the rotation. */
  private current: number;
  private readonly headers: Record<string, string>;
  private dispatcher: Promise<Dispatcher | undefined> | undefined;
  private readonly ca: string | undefined;

  constructor(endpoints: readonly string[], options: TransportOptions = {}) {
    this.ca = options.tlsCaPem;
    this.endpoints = normalizeEndpoints(endpoints, this.ca !== undefined);
    this.headers = { "content-type": "application/json", accept: "application/json" };
    if (options.token !== undefined) {
      // eslint-disable-next-line no-control-regex
      if (/[\u0000-\u001f\u007f]/.test(options.token)) {
        throw new BadRequestError("the token is not a valid header value");
      }
      this.headers.authorization = `Bearer ${options.token}`;
    }
    // Clients given the same list spread over the nodes.
    this.current = Math.floor(Math.random() * this.endpoints.length);
  }

  /** How many endpoints calls may go to. */
  get count(): number {
    return this.endpoints.length;
  }

  /** The endpoint calls go to now. */
  get at(): number {
    return this.current;
  }

  /**
   * Moves the rotation on from place `at`, unless another call that failed
   * there moved it already: calls failing at once move it once.
   */
  moveOnFrom(at: number): void {
    if (this.current === at) this.current = at + 1;
  }

  private agent(): Promise<Dispatcher | undefined> {
    this.dispatcher ??= (async () => {
      const Agent = await fetchAgentClass();
      if (Agent === undefined) {
        if (this.ca !== undefined) {
          throw new BadRequestError("this Node's fetch takes no TLS CA of its own (Node 20 or later is needed)");
        }
        return undefined;
      }
      const connect: Record<string, unknown> = { timeout: CONNECT_TIMEOUT_MS };
      if (this.ca !== undefined) connect.ca = this.ca;
      return new Agent({ connect, keepAliveTimeout: IDLE_KEPT_MS, keepAliveMaxTimeout: IDLE_KEPT_MS });
    })();
    return this.dispatcher;
  }

  /** Closes the idle connections. */
  async close(): Promise<void> {
    const d = await this.dispatcher?.catch(() => undefined);
    await d?.close?.().catch(() => undefined);
  }

  /**
   * Sends one request to the current endpoint, for at most `timeoutMs`
   * (or until `signal` aborts: then a `noAnswer`). Answers the body of a
   * `2xx`; throws `CallFailure` otherwise. A call the endpoint did not
   * serve (no answer, or an error worth trying elsewhere) moves the
   * rotation on from the place it went to.
   */
  async send(method: "GET" | "POST", path: string, body: unknown, timeoutMs: number, signal?: AbortSignal): Promise<Json> {
    const at = this.current;
    const base = this.endpoints[at % this.endpoints.length]!;
    try {
      return await this.exchange(method, base + path, body, timeoutMs, signal);
    } catch (e) {
      if (e instanceof CallFailure) {
        const f = e.failure;
        // A refusal about the call itself is an answer; no speaker, a failed
        // node, or one that does not know this client is not.
        const served =
          f.type === "api" &&
          (f.code === "held" || f.code === "not_held" || f.code === "bad_request" || f.code === "too_large");
        if (!served) this.moveOnFrom(at);
      }
      throw e;
    }
  }

  private async exchange(method: string, url: string, body: unknown, timeoutMs: number, signal?: AbortSignal): Promise<Json> {
    const dispatcher = await this.agent();
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), Math.max(1, timeoutMs));
    timer.unref();
    const signals = signal === undefined ? timeout.signal : AbortSignal.any([timeout.signal, signal]);
    const init: RequestInit = {
      method,
      headers: this.headers,
      signal: signals,
      redirect: "manual",
    };
    if (body !== undefined) init.body = stringifyJson(body);
    if (dispatcher !== undefined) (init as Record<string, unknown>).dispatcher = dispatcher;
    try {
      let response: Response;
      try {
        response = await fetch(url, init);
      } catch (err) {
        if (timeout.signal.aborted) throw new CallFailure({ type: "noAnswer", message: `timed out (after ${Math.round(timeoutMs)} ms)` });
        if (signal?.aborted) throw new CallFailure({ type: "noAnswer", message: "abandoned" });
        const d = describe(err);
        throw new CallFailure(d.sent ? { type: "noAnswer", message: d.message } : { type: "notSent", message: d.message });
      }
      let text: string;
      try {
        text = await response.text();
      } catch (err) {
        const why = timeout.signal.aborted ? "timed out" : describe(err).message;
        throw new CallFailure({ type: "noAnswer", message: why });
      }
      if (response.ok) {
        try {
          return parseJson(text);
        } catch (err) {
          throw new CallFailure({ type: "noAnswer", message: `unreadable answer: ${(err as Error).message}` });
        }
      }
      throw new CallFailure(readError(response.status, text));
    } finally {
      clearTimeout(timer);
    }
  }
}

/** An error answer, as the Rust client's `ErrorBody::read`. */
export function readError(status: number, text: string): Failure {
  let parsed: Json;
  try {
    parsed = parseJson(text);
  } catch (err) {
    return { type: "noAnswer", message: `unreadable error answer (${status}): ${(err as Error).message}` };
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed) || typeof parsed.error !== "string") {
    return { type: "noAnswer", message: `unreadable error answer (${status})` };
  }
  const code = parsed.error;
  const message = typeof parsed.message === "string" ? parsed.message : "";
  if (KNOWN_CODES.has(code)) {
    const f: Failure = { type: "api", status, code, message };
    if (parsed.lock !== undefined && parsed.lock !== null) f.lock = parsed.lock;
    return f;
  }
  // A code this client does not know: judged by its status.
  const loose = status === 503 ? "no_leader" : status >= 400 && status <= 499 ? "bad_request" : "internal";
  return { type: "api", status, code: loose, message: `${code}: ${message}` };
}
