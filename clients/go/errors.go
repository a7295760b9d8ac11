package leasehold

import (
	"errors"
	"fmt"
)

// The kinds of failure, named as the Rust client names them (docs/client.md,
// "Errors"). Test for them with errors.Is; a held lock's holder is had with
// errors.As on a *HeldError.
var (
	// ErrHeld: another holds the lock (at the end of the wait, if any).
	ErrHeld = errors.New("leasehold: the lock is held")
	// ErrReserved: the name is free, but an earlier request waits for it (a
	// set waiting for all its names keeps its free ones from later
	// requests): refused as ErrHeld is, with no holder to show (409 held
	// without a lock).
	ErrReserved = errors.New("leasehold: the name is free, but earlier requests wait for it")
	// ErrNotHeld: the lock is not held under that id: released, expired, or lost.
	ErrNotHeld = errors.New("leasehold: the lock is not held")
	// ErrKindMismatch: the name is held or awaited as another kind (permits
	// on a lock, a lock on a semaphore, another permit count).
	ErrKindMismatch = errors.New("leasehold: the name is held as another kind")
	// ErrLost: the lock was lost: a renewal was refused, or the lease ran out
	// on the client's own clock before a renewal got through.
	ErrLost = errors.New("leasehold: the lock was lost")
	// ErrArrivedLate: a grant arrived after the client's own count of its
	// lease had run out; it was released and is not held. Safe to retry.
	ErrArrivedLate = errors.New("leasehold: the grant arrived after its lease had run out; it was released")
	// ErrUnavailable: nodes answered but none could serve (503), or none
	// could be reached, before the call's time ran out. Retry later.
	ErrUnavailable = errors.New("leasehold: the cluster is unavailable")
	// ErrNoAnswer: a request was sent and went unanswered: its outcome is
	// unknown (an acquire may have been granted, a release may have happened).
	ErrNoAnswer = errors.New("leasehold: no answer from the cluster")
	// ErrUnauthorized: the cluster refused the credentials (401).
	ErrUnauthorized = errors.New("leasehold: unauthorized")
	// ErrForbidden: the token may not do that to that name (403).
	ErrForbidden = errors.New("leasehold: forbidden")
	// ErrServer: a node failed (500), is not a member of the cluster the
	// client was given (409 wrong_member), or answered without what its
	// answer must carry.
	ErrServer = errors.New("leasehold: the node failed")
	// ErrBadRequest: invalid input or options (a name too long, a renewal
	// schedule that cannot keep the lock, no endpoints).
	ErrBadRequest = errors.New("leasehold: bad request")
	// ErrMembership: a membership change was refused (unknown_member,
	// member_exists, change_in_progress, would_lose_quorum).
	ErrMembership = errors.New("leasehold: membership change refused")
	// ErrUnknownRoute: the node serves no such call (404 unknown_route, 405
	// method_not_allowed): the endpoint is not a node's address, or the
	// node's version lacks the call.
	ErrUnknownRoute = errors.New("leasehold: the node serves no such call (is the endpoint a leasehold node's address?)")
)

// Error is a failure of one of the kinds above, with what the node (or the
// client) said. errors.Is(err, ErrX) matches its Kind.
type Error struct {
	// Kind is one of the Err* values.
	Kind error
	// Code is the node's error code ("not_rebuilt", "member_exists", ...)
	// when a node answered one; empty otherwise.
	Code string
	// Message says why.
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Kind.Error()
	}
	return fmt.Sprintf("%v: %s", e.Kind, e.Message)
}

// Unwrap answers the kind, for errors.Is.
func (e *Error) Unwrap() error { return e.Kind }

// HeldError is ErrHeld with the holder's lock (of a name held shared or as
// permits, the oldest holder; of a set, the first name held by another).
type HeldError struct {
	Lock LockInfo
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("leasehold: %s is held by %q", e.Lock.Name, e.Lock.Holder)
}

// Unwrap answers ErrHeld, for errors.Is.
func (e *HeldError) Unwrap() error { return ErrHeld }

func newError(kind error, code, format string, args ...interface{}) error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...interface{}) error {
	return newError(ErrBadRequest, "", format, args...)
}
