// The errors callers branch on: one class per kind of the Rust client's
// `Error` (docs/client.md, "Errors"), each with `kind`, the bare name.

import type { LockInfo } from "./types.js";

/** The kinds of failure, as the Rust client names them. */
export type ErrorKind =
  | "Held"
  | "Reserved"
  | "NotHeld"
  | "KindMismatch"
  | "Lost"
  | "ArrivedLate"
  | "Unavailable"
  | "NoAnswer"
  | "Unauthorized"
  | "Forbidden"
  | "Server"
  | "BadRequest"
  | "Membership"
  | "UnknownRoute";

/** Every error this client raises for what the cluster or the call did. */
export abstract class LeaseholdError extends Error {
  abstract readonly kind: ErrorKind;
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Another holds the lock (at the end of the wait, if any); `lock` is the holder's. */
export class HeldError extends LeaseholdError {
  readonly kind = "Held" as const;
  constructor(readonly lock: LockInfo) {
    super(`${lock.name} is held by ${JSON.stringify(lock.holder)}`);
  }
}

/**
 * The name is free, but an earlier request waits for it (a set waiting for all its names keeps its
 * free ones from later requests): refused as `HeldError` is, with no holder to show (`409 held`
 * without a lock).
 */
export class ReservedError extends LeaseholdError {
  readonly kind = "Reserved" as const;
}

/** The name is held or awaited as another kind than asked (`409 kind_mismatch`). */
export class KindMismatchError extends LeaseholdError {
  readonly kind = "KindMismatch" as const;
}

/** The lock is not held under that id: released, expired, or lost. */
export class NotHeldError extends LeaseholdError {
  readonly kind = "NotHeld" as const;
  constructor(message = "the lock is not held") {
    super(message);
  }
}

/** The lock was lost: a renewal was refused, or the lease ran out on this client's clock. */
export class LostError extends LeaseholdError {
  readonly kind = "Lost" as const;
  constructor(message = "the lock was lost") {
    super(message);
  }
}

/** A grant arrived after this client's count of its lease had run out; it was released. */
export class ArrivedLateError extends LeaseholdError {
  readonly kind = "ArrivedLate" as const;
  constructor(message = "the grant arrived after its lease had run out; it was released") {
    super(message);
  }
}

/** No node could serve (`503`) or be reached within the call's window; nothing was done. */
export class UnavailableError extends LeaseholdError {
  readonly kind = "Unavailable" as const;
}

/** A request was sent and went unanswered: its outcome is unknown. */
export class NoAnswerError extends LeaseholdError {
  readonly kind = "NoAnswer" as const;
}

/** The cluster refused the credentials (`401`). */
export class UnauthorizedError extends LeaseholdError {
  readonly kind = "Unauthorized" as const;
}

/** The token may not do that to that name (`403`). */
export class ForbiddenError extends LeaseholdError {
  readonly kind = "Forbidden" as const;
}

/** A node failed (`500`), is not of the cluster (`409 wrong_member`), or answered without what it must carry. */
export class ServerError extends LeaseholdError {
  readonly kind = "Server" as const;
}

/** Invalid input or options (a bad name, a renewal schedule that cannot keep the lock, no endpoints). */
export class BadRequestError extends LeaseholdError {
  readonly kind = "BadRequest" as const;
}

/** A membership change was refused; `code` is the cluster's error code. */
export class MembershipError extends LeaseholdError {
  readonly kind = "Membership" as const;
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

/** The node serves no such call (`404 unknown_route`, `405 method_not_allowed`). */
export class UnknownRouteError extends LeaseholdError {
  readonly kind = "UnknownRoute" as const;
}
