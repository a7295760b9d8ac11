// The leasehold client for Node: locks held by a guard that renews them in
// the background, work run under a lock and cancelled when it is lost,
// sets, sessions and leader election. Every lease is counted on this
// client's own monotonic clock from the moment it sent the request that
// won or renewed it.

export { Client, Leadership, dataTag } from "./client.js";
export type { AcquireOptions, CampaignOptions, ClientOptions, ClusterAnswer, Observed, SessionOptions } from "./client.js";
export { Lock } from "./lock.js";
export type { Loss } from "./lock.js";
export { LockSet } from "./set.js";
export { Session, SessionLock } from "./session.js";
export type { SessionAcquireOptions } from "./session.js";
export type { Awaited, Listing, LockInfo, Queued, SessionInfo } from "./types.js";
export { parseJson, stringifyJson } from "./json.js";
export type { Json } from "./json.js";
export {
  LeaseholdError,
  HeldError,
  ReservedError,
  NotHeldError,
  KindMismatchError,
  LostError,
  ArrivedLateError,
  UnavailableError,
  NoAnswerError,
  UnauthorizedError,
  ForbiddenError,
  ServerError,
  BadRequestError,
  MembershipError,
  UnknownRouteError,
} from "./errors.js";
export type { ErrorKind } from "./errors.js";
