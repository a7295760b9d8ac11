// The conformance runner (clients/conformance/README.md): every scenario of
// clients/conformance/scenarios.json against a cluster of its own, each
// step performed with this client. A step it does not know fails the
// scenario; nothing is skipped.

import { test } from "node:test";
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, closeSync } from "node:fs";
import { createServer } from "node:net";
import * as http from "node:http";
import * as https from "node:https";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  Client,
  LeaseholdError,
  Lock,
  LockSet,
  Leadership,
  Session,
  SessionLock,
  type AcquireOptions,
  type LockInfo,
} from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
// dist/test -> clients/typescript -> the repository's root.
const typescriptDir = resolve(here, "..", "..");
const root = resolve(typescriptDir, "..", "..");
const scenariosFile = resolve(typescriptDir, "..", "conformance", "scenarios.json");

function leaseholdBin(): string {
  if (process.env.LEASEHOLD_BIN) return process.env.LEASEHOLD_BIN;
  for (const p of [join(root, "target", "debug", "leasehold"), join(root, "target", "release", "leasehold")]) {
    if (existsSync(p)) return p;
  }
  return join(root, "target", "debug", "leasehold");
}

type Step = { do: string; [key: string]: unknown };
interface Scenario {
  id: string;
  covers?: string;
  cluster?: { nodes?: number; tls?: boolean; acl?: string };
  env?: Record<string, string>;
  steps: Step[];
}

const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of live) {
    try {
      p.kill("SIGTERM"); // up stops its nodes
    } catch {
      /* gone */
    }
  }
});

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, Math.max(0, ms)));
}

class StepFailure extends Error {}

/** A local cluster of `leasehold up`, as the README's "The cluster of a scenario" says. */
class Cluster {
  dir: string;
  up: ChildProcess | undefined;
  nodes = new Map<number, string>();
  tls: boolean;
  exited: Promise<void> | undefined;

  constructor(readonly bin: string, readonly spec: Scenario["cluster"] = {}) {
    this.dir = mkdtempSync(join(tmpdir(), "leasehold-conformance-"));
    this.tls = spec?.tls === true;
  }

  get upDir(): string {
    return join(this.dir, "up");
  }
  get ca(): string {
    return join(this.dir, "tls", "ca.pem");
  }

  async start(): Promise<void> {
    const serve: string[] = [];
    if (this.tls) {
      await run("bash", [join(root, "scripts", "make-certs"), join(this.dir, "tls"), "node"], {});
      serve.push(
        "--tls-cert",
        join(this.dir, "tls", "node.pem"),
        "--tls-key",
        join(this.dir, "tls", "node-key.pem"),
        "--tls-ca",
        this.ca,
      );
    }
    if (this.spec?.acl !== undefined) {
      writeFileSync(join(this.dir, "acl.toml"), this.spec.acl);
      serve.unshift("--acl", join(this.dir, "acl.toml"));
    }
    const args = ["up", "--nodes", String(this.spec?.nodes ?? 3), "--base-port", "0", "--data-dir", this.upDir];
    if (serve.length > 0) args.push("--", ...serve);
    const log = openSync(join(this.dir, "up.log"), "a");
    const up = spawn(this.bin, args, { stdio: ["ignore", log, log] });
    closeSync(log);
    this.up = up;
    live.add(up);
    this.exited = new Promise((r) => up.once("exit", () => r()));
    let exitCode: number | null = null;
    up.once("exit", (code) => {
      exitCode = code ?? -1;
      live.delete(up);
    });
    const deadline = performance.now() + 30_000;
    const upJson = join(this.upDir, "up.json");
    for (;;) {
      if (exitCode !== null) throw new Error(`leasehold up exited ${exitCode}: ${this.log()}`);
      if (performance.now() > deadline) throw new Error(`no ${upJson} within 30 s: ${this.log()}`);
      if (existsSync(upJson)) {
        try {
          const j = JSON.parse(readFileSync(upJson, "utf8")) as { nodes: Record<string, { addr: string }> };
          const ids = Object.keys(j.nodes ?? {});
          if (ids.length > 0 && ids.every((id) => !/:0$/.test(j.nodes[id]!.addr))) {
            for (const id of ids) this.nodes.set(Number(id), j.nodes[id]!.addr);
            break;
          }
        } catch {
          /* being written */
        }
      }
      await sleep(100);
    }
    for (;;) {
      if (exitCode !== null) throw new Error(`leasehold up exited ${exitCode}: ${this.log()}`);
      const ready = await Promise.all([...this.nodes.values()].map((addr) => this.readyz(addr)));
      if (ready.every(Boolean)) return;
      if (performance.now() > deadline) throw new Error(`not every node ready within 30 s: ${this.log()}`);
      await sleep(200);
    }
  }

  private log(): string {
    try {
      return readFileSync(join(this.dir, "up.log"), "utf8").slice(-2000);
    } catch {
      return "(no log)";
    }
  }

  private readyz(addr: string): Promise<boolean> {
    return new Promise((done) => {
      const options = { timeout: 1000, ...(this.tls ? { ca: readFileSync(this.ca) } : {}) };
      const get = this.tls ? https.get : http.get;
      const req = get(`${this.tls ? "https" : "http"}://${addr}/readyz`, options, (res) => {
        res.resume();
        done(res.statusCode === 200);
      });
      req.on("timeout", () => req.destroy());
      req.on("error", () => done(false));
    });
  }

  async chaos(args: string[]): Promise<void> {
    await run(this.bin, ["chaos", ...args], { ...process.env, LEASEHOLD_UP: this.upDir });
  }

  async stop(): Promise<void> {
    const up = this.up;
    if (up && up.exitCode === null && up.signalCode === null) {
      up.kill("SIGTERM");
      const stopped = await Promise.race([this.exited!.then(() => true), sleep(10_000).then(() => false)]);
      if (!stopped) {
        up.kill("SIGKILL");
        await this.exited;
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((done, fail) => {
    execFile(cmd, args, { env: Object.keys(env).length ? env : process.env, timeout: 30_000 }, (err, stdout, stderr) => {
      if (err) fail(new StepFailure(`${cmd} ${args.join(" ")} failed: ${err.message} ${stderr}`));
      else done(stdout);
    });
  });
}

/** A port on 127.0.0.1 nothing listens on: bound, noted, closed. */
function deadPort(): Promise<string> {
  return new Promise((done, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => done(`127.0.0.1:${port}`));
    });
  });
}

type Held = Lock | LockSet | Leadership | SessionLock;

interface Bound {
  held?: Held;
  session?: Session;
  /** A background call under way. */
  pending?: Promise<Held>;
  /** When the loss signal came. */
  lostAt?: number;
  /** The session a session's lock is in. */
  in?: Session;
}

function lockInfo(h: Held): LockInfo {
  if (h instanceof LockSet) return h.locks[0]!;
  return h.lock;
}

function heldSignal(h: Held): AbortSignal {
  return h.signal;
}

function heldLoss(h: Held): string | undefined {
  if (h instanceof SessionLock) return h.isLost() ? "Refused" : undefined;
  return h.loss;
}

function isLost(h: Held): boolean {
  return h.isLost();
}

/** The outcome of a call: "ok" or the kind of the error it failed with. */
async function outcome<T>(p: Promise<T>, maxMs?: number): Promise<{ kind: string; value?: T; error?: unknown; ms: number }> {
  const began = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const limit =
    maxMs === undefined
      ? new Promise<never>(() => undefined)
      : new Promise<never>((_r, fail) => {
          timer = setTimeout(() => fail(new StepFailure(`the call did not return within max_ms ${maxMs}`)), maxMs + 50);
        });
  try {
    const value = await Promise.race([p, limit]);
    return { kind: "ok", value, ms: performance.now() - began };
  } catch (e) {
    if (e instanceof StepFailure) throw e;
    if (e instanceof LeaseholdError) return { kind: e.kind, error: e, ms: performance.now() - began };
    throw new StepFailure(`the call failed with an error of no kind: ${String(e)}`);
  } finally {
    clearTimeout(timer);
  }
}

class Runner {
  clients = new Map<string, Client>();
  bound = new Map<string, Bound>();
  marks = new Map<string, number>();
  vars = new Map<string, unknown>();
  observers = new Map<string, { values: (string | null)[]; stop: () => void }>();

  constructor(readonly cluster: Cluster) {}

  private client(name: unknown): Client {
    const c = this.clients.get(String(name));
    if (!c) throw new StepFailure(`no client ${String(name)}`);
    return c;
  }

  private bind(name: string): Bound {
    const b = this.bound.get(name);
    if (!b) throw new StepFailure(`nothing bound to ${name}`);
    return b;
  }

  private held(name: unknown): Held {
    const b = this.bind(String(name));
    if (!b.held) throw new StepFailure(`${String(name)} is not a held lock`);
    return b.held;
  }

  private keep(name: string, h: Held, extra: Partial<Bound> = {}): void {
    const b: Bound = { held: h, ...extra };
    this.bound.set(name, b);
    const signal = heldSignal(h);
    const note = () => {
      b.lostAt ??= performance.now();
    };
    if (signal.aborted) note();
    else signal.addEventListener("abort", note, { once: true });
  }

  async resolve(v: unknown): Promise<unknown> {
    if (Array.isArray(v)) return Promise.all(v.map((x) => this.resolve(x)));
    if (typeof v !== "string") return v;
    let m: RegExpExecArray | null;
    if ((m = /^\{node:(.+)\}$/.exec(v))) return lockInfo(this.held(m[1])).node;
    if ((m = /^\{var:(.+)\}$/.exec(v))) {
      if (!this.vars.has(m[1]!)) throw new StepFailure(`no var ${m[1]}`);
      return this.vars.get(m[1]!);
    }
    if (v === "{nodes}") return [...this.cluster.nodes.keys()].sort((a, b) => a - b);
    if (v === "{speaker}") return this.speaker();
    if (v === "{followers}") {
      const speaker = await this.speaker();
      return [...this.cluster.nodes.keys()].sort((a, b) => a - b).filter((n) => n !== speaker);
    }
    return v;
  }

  private async speaker(): Promise<number> {
    const c = new Client([this.cluster.nodes.get(1)!], this.cluster.tls ? { tlsCaFile: this.cluster.ca } : {});
    const deadline = performance.now() + 10_000;
    for (;;) {
      try {
        const leader = (await c.cluster()).leader;
        if (typeof leader === "number") return leader;
      } catch {
        /* asked again */
      }
      if (performance.now() > deadline) throw new StepFailure("no speaker named within 10 s");
      await sleep(200);
    }
  }

  private expectOutcome(step: Step, got: { kind: string; error?: unknown }): boolean {
    const want = (step.expect as string | undefined) ?? "ok";
    if (got.kind !== want) {
      const why = got.error instanceof Error ? `: ${got.error.message}` : "";
      throw new StepFailure(`expected ${want}, saw ${got.kind}${why}`);
    }
    return want === "ok";
  }

  /** A get's checks of one answer: what the name is held under. */
  private checkGet(step: Step, lock: LockInfo | null): void {
    if (step.free === true && lock !== null) throw new StepFailure(`${String(step.name)} is held (by ${lock.id}), not free`);
    if (step.free === false && lock === null) throw new StepFailure(`${String(step.name)} is free`);
    if (step.holder_lock !== undefined) {
      const want = lockInfo(this.held(step.holder_lock)).id;
      if (lock === null) throw new StepFailure(`${String(step.name)} is free, not held by ${String(step.holder_lock)}`);
      const ids = [lock.id, ...(lock.others ?? []).map((o) => o.id)];
      if (!ids.includes(want)) throw new StepFailure(`${String(step.name)} is held by ${ids.join(", ")}, not ${want}`);
    }
    if (step.holders !== undefined) {
      const n = lock === null ? 0 : 1 + (lock.others?.length ?? 0);
      if (n !== step.holders) throw new StepFailure(`${String(step.name)} has ${n} holders, not ${String(step.holders)}`);
    }
    if (step.ttl_at_least_ms !== undefined) {
      if (lock === null) throw new StepFailure(`${String(step.name)} is free`);
      if (lock.ttlMs < (step.ttl_at_least_ms as number)) {
        throw new StepFailure(`${String(step.name)} has ${lock.ttlMs} ms left, less than ${String(step.ttl_at_least_ms)}`);
      }
    }
  }

  private acquireOptions(step: Step): AcquireOptions {
    const o: AcquireOptions = {};
    if (step.lease_ms !== undefined) o.leaseMs = step.lease_ms as number;
    if (step.wait_ms !== undefined) o.waitMs = step.wait_ms as number;
    if (step.renew_every_ms !== undefined) o.renewEveryMs = step.renew_every_ms as number;
    if (step.lapse_margin_ms !== undefined) o.lapseMarginMs = step.lapse_margin_ms as number;
    if (step.lock_delay_ms !== undefined) o.lockDelayMs = step.lock_delay_ms as number;
    if (step.holder !== undefined) o.holder = step.holder as string;
    if (step.data !== undefined) o.data = step.data as string;
    if (step.shared !== undefined) o.shared = step.shared as boolean;
    if (step.permits !== undefined) o.permits = step.permits as number;
    return o;
  }

  private async chaos(args: unknown[]): Promise<void> {
    const resolved = (await this.resolve(args)) as unknown[];
    const list = resolved.findIndex((a) => Array.isArray(a));
    if (list < 0) return this.cluster.chaos(resolved.map(String));
    for (const each of resolved[list] as unknown[]) {
      const one = [...resolved];
      one[list] = each;
      await this.cluster.chaos(one.map(String));
    }
  }

  async step(step: Step, began: number): Promise<void> {
    if (typeof step.as === "string" && step.do !== "remember") this.marks.set(step.as, began);
    switch (step.do) {
      case "client": {
        const spec = step.endpoints;
        let endpoints: string[];
        if (spec === "all") endpoints = [...this.cluster.nodes.entries()].sort((a, b) => a[0] - b[0]).map((e) => e[1]);
        else if (Array.isArray(spec)) {
          endpoints = [];
          for (const e of spec as string[]) {
            if (e === "dead") endpoints.push(await deadPort());
            else if (/^node:\d+$/.test(e)) {
              const addr = this.cluster.nodes.get(Number(e.slice(5)));
              if (!addr) throw new StepFailure(`no ${e}`);
              endpoints.push(addr);
            } else throw new StepFailure(`an endpoint this runner does not know: ${e}`);
          }
        } else throw new StepFailure(`endpoints: ${JSON.stringify(spec)}`);
        const options: ConstructorParameters<typeof Client>[1] = {};
        if (typeof step.token_env === "string") options.tokenEnv = step.token_env;
        if (step.tls === true) options.tlsCaFile = this.cluster.ca;
        if (typeof step.retry_for_ms === "number") options.retryForMs = step.retry_for_ms;
        this.clients.set(String(step.as), new Client(endpoints, options));
        return;
      }
      case "acquire": {
        const client = this.client(step.client);
        const options = this.acquireOptions(step);
        let call: Promise<Held>;
        let session: Session | undefined;
        if (step.session !== undefined) {
          session = this.bind(String(step.session)).session;
          if (!session) throw new StepFailure(`${String(step.session)} is not a session`);
          const so: Parameters<Session["acquire"]>[1] = {};
          if (options.waitMs !== undefined) so.waitMs = options.waitMs;
          if (options.holder !== undefined) so.holder = options.holder;
          if (options.data !== undefined) so.data = options.data;
          if (options.shared !== undefined) so.shared = options.shared;
          if (options.permits !== undefined) so.permits = options.permits;
          call = session.acquire(String(step.name), so);
        } else if (Array.isArray(step.names)) {
          call = client.acquireAll(step.names as string[], options);
        } else {
          call = client.acquire(String(step.name), options);
        }
        if (step.background === true) {
          call.catch(() => undefined);
          this.bound.set(String(step.as), { pending: call });
          return;
        }
        const got = await outcome(call, step.max_ms as number | undefined);
        if (this.expectOutcome(step, got) && typeof step.as === "string") {
          this.keep(step.as, got.value as Held, session ? { in: session } : {});
        } else if (got.kind === "ok") {
          // Not bound: let it go.
          void (got.value as Lock | LockSet).release?.().catch(() => undefined);
        }
        return;
      }
      case "campaign": {
        const client = this.client(step.client);
        const options: Parameters<Client["campaign"]>[2] = {};
        if (step.lease_ms !== undefined) options.leaseMs = step.lease_ms as number;
        if (step.give_up_after_ms !== undefined) options.giveUpAfterMs = step.give_up_after_ms as number;
        const call: Promise<Held> = client.campaign(String(step.name), String(step.value), options);
        if (step.background === true) {
          call.catch(() => undefined);
          this.bound.set(String(step.as), { pending: call });
          return;
        }
        const got = await outcome(call, step.max_ms as number | undefined);
        if (this.expectOutcome(step, got)) this.keep(String(step.as), got.value as Held);
        return;
      }
      case "await": {
        const b = this.bind(String(step.as));
        if (!b.pending) throw new StepFailure(`${String(step.as)} is not a background call`);
        const within = (step.within_ms as number | undefined) ?? 60_000;
        const got = await outcome(b.pending, within);
        if (this.expectOutcome(step, got)) this.keep(String(step.as), got.value as Held);
        return;
      }
      case "release": {
        const b = this.bind(String(step.lock));
        const h = b.held;
        if (!h) throw new StepFailure(`${String(step.lock)} is not held`);
        let call: Promise<unknown>;
        if (h instanceof SessionLock) call = b.in!.release(h);
        else if (h instanceof Leadership) call = h.resign();
        else call = h.release();
        this.expectOutcome(step, await outcome(call));
        return;
      }
      case "release_by_id": {
        const info = lockInfo(this.held(step.lock));
        this.expectOutcome(step, await outcome(this.client(step.client).release(info.name, info.id)));
        return;
      }
      case "held": {
        const h = this.held(step.lock);
        const deadline = performance.now() + ((step.within_ms as number | undefined) ?? 0);
        while (isLost(h)) {
          if (performance.now() >= deadline) throw new StepFailure(`${String(step.lock)} is lost (${heldLoss(h)})`);
          await sleep(20);
        }
        return;
      }
      case "lost": {
        const b = this.bind(String(step.lock));
        const h = b.held;
        if (!h) throw new StepFailure(`${String(step.lock)} is not held`);
        const within = step.within_ms as number;
        if (b.lostAt === undefined) {
          const signal = heldSignal(h);
          await new Promise<void>((done) => {
            const t = setTimeout(done, within);
            if (signal.aborted) return done();
            signal.addEventListener(
              "abort",
              () => {
                clearTimeout(t);
                done();
              },
              { once: true },
            );
          });
        }
        if (b.lostAt === undefined) throw new StepFailure(`no loss signal within ${within} ms`);
        const loss = heldLoss(h);
        if (loss === undefined) throw new StepFailure(`${String(step.lock)} was released, not lost`);
        if (step.loss !== undefined && loss !== step.loss) throw new StepFailure(`the loss is ${loss}, not ${String(step.loss)}`);
        if (step.since !== undefined) {
          const from = this.marks.get(String(step.since));
          if (from === undefined) throw new StepFailure(`no step or mark ${String(step.since)}`);
          const after = b.lostAt - from;
          const least = (step.at_least_ms as number | undefined) ?? 0;
          const most = (step.at_most_ms as number | undefined) ?? Infinity;
          if (after < least || after > most) {
            throw new StepFailure(`the loss came ${Math.round(after)} ms after ${String(step.since)}, not within [${least}, ${most}]`);
          }
        }
        return;
      }
      case "mark":
        this.marks.set(String(step.as), performance.now());
        return;
      case "remember":
        this.vars.set(String(step.as), await this.resolve(step.value));
        return;
      case "get": {
        // With for_ms, the get and its checks are repeated every 100 ms
        // for that long.
        const until = began + ((step.for_ms as number | undefined) ?? 0);
        for (;;) {
          const got = await outcome(this.client(step.client).get(String(step.name)));
          if (!this.expectOutcome(step, got)) return;
          this.checkGet(step, got.value as LockInfo | null);
          if (performance.now() >= until) return;
          await sleep(100);
        }
      }
      case "same_fence": {
        const a = lockInfo(this.held(step.a)).fence;
        const b = lockInfo(this.held(step.b)).fence;
        if (a !== b) throw new StepFailure(`fences ${a} and ${b} differ`);
        return;
      }
      case "fence_above": {
        const a = lockInfo(this.held(step.a)).fence;
        const b = lockInfo(this.held(step.b)).fence;
        if (!(a > b)) throw new StepFailure(`fence ${a} is not above ${b}`);
        return;
      }
      case "node_is_not": {
        const node = Number(await this.resolve(step.node));
        const at = lockInfo(this.held(step.lock)).node;
        if (at === node) throw new StepFailure(`${String(step.lock)} is still at node ${node}`);
        return;
      }
      case "sleep":
        await sleep(step.ms as number);
        return;
      case "list": {
        // Asked again every 100 ms until the listing shows the step's locks
        // and awaited names, for at most within_ms.
        const until = began + ((step.within_ms as number | undefined) ?? 0);
        const want = JSON.stringify({ locks: step.locks, awaited: step.awaited });
        for (;;) {
          const listing = await this.client(step.client).listing({ prefix: String(step.prefix), limit: 1000 });
          const shown = JSON.stringify({
            locks: listing.locks.map((l) => l.name),
            awaited: listing.awaited.map((a) => ({ name: a.name, waiters: a.waiters, first: a.queue[0]?.holder ?? null })),
          });
          if (shown === want) return;
          if (performance.now() >= until) throw new StepFailure(`the listing shows ${shown}, not ${want}`);
          await sleep(100);
        }
      }
      case "with_lock": {
        const client = this.client(step.client);
        const options = this.acquireOptions(step);
        const work = step.work;
        let cancelled: boolean | undefined;
        let workDone: Promise<void> = Promise.resolve();
        const fn = async (lock: Lock, signal: AbortSignal): Promise<void> => {
          if (work === "return") return;
          if (work === null || typeof work !== "object") throw new StepFailure(`work: ${JSON.stringify(work)}`);
          const w = work as { chaos?: unknown[]; release_elsewhere?: boolean; wait_cancel_ms?: number };
          const known = new Set(["chaos", "release_elsewhere", "wait_cancel_ms"]);
          for (const k of Object.keys(w)) if (!known.has(k)) throw new StepFailure(`work field this runner does not know: ${k}`);
          if (w.chaos !== undefined) await this.chaos(w.chaos);
          if (w.release_elsewhere === true) await client.release(lock.name, lock.id);
          let finish!: () => void;
          workDone = new Promise((r) => (finish = r));
          await new Promise<void>((done) => {
            const t = setTimeout(done, w.wait_cancel_ms ?? 0);
            if (signal.aborted) {
              clearTimeout(t);
              return done();
            }
            signal.addEventListener(
              "abort",
              () => {
                clearTimeout(t);
                done();
              },
              { once: true },
            );
          });
          cancelled = signal.aborted;
          finish();
        };
        const got = await outcome(client.withLock(String(step.name), fn, options));
        this.expectOutcome(step, got);
        if (work !== "return") {
          await workDone;
          if (cancelled !== true) throw new StepFailure("the work's cancellation signal never came");
        }
        return;
      }
      case "open_session": {
        const o: Parameters<Client["openSession"]>[0] = {};
        if (step.ttl_ms !== undefined) o.ttlMs = step.ttl_ms as number;
        const got = await outcome(this.client(step.client).openSession(o));
        if (this.expectOutcome(step, got)) this.bound.set(String(step.as), { session: got.value as Session });
        return;
      }
      case "close_session": {
        const s = this.bind(String(step.session)).session;
        if (!s) throw new StepFailure(`${String(step.session)} is not a session`);
        this.expectOutcome(step, await outcome(s.close()));
        return;
      }
      case "resign": {
        const h = this.held(step.lock);
        if (!(h instanceof Leadership)) throw new StepFailure(`${String(step.lock)} is not a leadership`);
        this.expectOutcome(step, await outcome(h.resign()));
        return;
      }
      case "leader": {
        const got = await outcome(this.client(step.client).leader(String(step.name)));
        if (!this.expectOutcome(step, got)) return;
        const lock = got.value as LockInfo | null;
        if ("value" in step) {
          const value = lock === null ? null : (lock.data ?? null);
          if (value !== step.value) throw new StepFailure(`the leader is ${JSON.stringify(value)}, not ${JSON.stringify(step.value)}`);
        }
        return;
      }
      case "observe": {
        const values: (string | null)[] = [];
        const it = this.client(step.client).observe(String(step.name));
        let stopped = false;
        void (async () => {
          for await (const item of it) {
            if (stopped) break;
            if (item.error === undefined) values.push(item.leader === null ? null : (item.leader.data ?? null));
          }
        })().catch(() => undefined);
        this.observers.set(String(step.as), {
          values,
          stop: () => {
            stopped = true;
            void it.return?.(undefined);
          },
        });
        return;
      }
      case "observed": {
        const o = this.observers.get(String(step.as));
        if (!o) throw new StepFailure(`no observer ${String(step.as)}`);
        const want = step.values as (string | null)[];
        const deadline = performance.now() + (step.within_ms as number);
        for (;;) {
          // Nulls left out (no leader may show between two leaders) unless
          // the values asked for have one; repeats in a row taken as one.
          const noted = want.includes(null) ? o.values : o.values.filter((v) => v !== null);
          const seen = noted.filter((v, i) => i === 0 || v !== noted[i - 1]);
          const tail = seen.slice(-want.length);
          if (tail.length === want.length && tail.every((v, i) => v === want[i])) return;
          if (performance.now() >= deadline) {
            throw new StepFailure(`the observer saw ${JSON.stringify(seen)}, not ending with ${JSON.stringify(want)}`);
          }
          await sleep(25);
        }
      }
      case "chaos":
        await this.chaos(step.args as unknown[]);
        return;
      default:
        throw new StepFailure(`a step this runner does not implement: ${step.do}`);
    }
  }

  async cleanUp(): Promise<void> {
    for (const o of this.observers.values()) o.stop();
    for (const c of this.clients.values()) await c.close();
  }
}

function loadScenarios(): Scenario[] {
  if (!existsSync(scenariosFile)) return [];
  const all = (JSON.parse(readFileSync(scenariosFile, "utf8")) as { scenarios: Scenario[] }).scenarios;
  const only = process.env.CONFORMANCE_ONLY;
  return only ? all.filter((s) => s.id.includes(only)) : all;
}

test("CONFORMANCE_ONLY names a scenario", () => {
  // One that names none runs no scenario: a failure, not a pass.
  if (existsSync(scenariosFile) && loadScenarios().length === 0) {
    throw new Error(`no scenario's id contains CONFORMANCE_ONLY=${JSON.stringify(process.env.CONFORMANCE_ONLY)}`);
  }
});

if (!existsSync(scenariosFile)) {
  test("conformance suite", () => {
    throw new Error(`${scenariosFile} is missing`);
  });
}

for (const scenario of loadScenarios()) {
  test(scenario.id, { timeout: 240_000 }, async () => {
    const bin = leaseholdBin();
    if (!existsSync(bin)) throw new Error(`no leasehold binary at ${bin} (set LEASEHOLD_BIN)`);
    const saved = new Map<string, string | undefined>();
    for (const [k, v] of Object.entries(scenario.env ?? {})) {
      saved.set(k, process.env[k]);
      process.env[k] = v;
    }
    const cluster = new Cluster(bin, scenario.cluster ?? {});
    const runner = new Runner(cluster);
    try {
      await cluster.start();
      for (const [i, step] of scenario.steps.entries()) {
        const began = performance.now();
        try {
          await runner.step(step, began);
        } catch (e) {
          const what = e instanceof Error ? e.message : String(e);
          throw new Error(`scenario ${scenario.id}, step ${i} (${step.do}): ${what}`);
        }
      }
    } finally {
      await runner.cleanUp().catch(() => undefined);
      await cluster.stop();
      for (const [k, v] of saved) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });
}
