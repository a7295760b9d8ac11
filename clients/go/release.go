package leasehold

import (
	"context"
	"time"
)

// tries are the attempts at one release while its lease runs.
type tries struct {
	// unknown: an earlier attempt may have released unseen (its answer was
	// lost).
	unknown bool
}

// timeout is the next attempt's timeout, for a lease that ends then; false
// once it has ended (nothing is left to release).
func (r *tries) timeout(t *transport, ends time.Time) (time.Duration, bool) {
	left := time.Until(ends)
	if left <= 0 {
		return 0, false
	}
	return attemptTimeout(left, len(t.endpoints)), true
}

// judge says what an attempt's answer (allReleased: every lock was) makes
// of the release, or false to try again, on the next node after a pause.
func (r *tries) judge(allReleased bool, err *callError) (error, bool) {
	if err == nil {
		if allReleased || r.unknown {
			return nil, true
		}
		return ErrLost, true
	}
	if err.code() == "not_held" {
		if r.unknown {
			return nil, true
		}
		return ErrLost, true
	}
	if err.kind == callAPI && !retryable(err) {
		return refused(err), true
	}
	if err.kind == callNoAnswer {
		r.unknown = true
	}
	time.Sleep(50 * time.Millisecond)
	return nil, false
}

// releaseOne releases lock, trying node after node until its lease (as ends
// says) is over; unknown: an earlier attempt may have released it unseen.
// ErrLost when it was not held.
func releaseOne(t *transport, lock lockRef, ends func() time.Time, unknown bool) error {
	body := releaseBody{Name: lock.Name, ID: lock.ID}
	r := tries{unknown: unknown}
	for {
		timeout, ok := r.timeout(t, ends())
		if !ok {
			// The lease is over anyway.
			return nil
		}
		_, err := t.release(context.Background(), body, timeout)
		if done, ok := r.judge(true, err); ok {
			return done
		}
	}
}

// releaseTogether releases every one of held in one call, trying node after
// node while any of their leases runs; a lock whose lease is over is left
// out. ErrLost when any was not held. A node that does not read a set's
// release (400) gets one release per lock, at once.
func releaseTogether(t *transport, held []*Lock) error {
	r := tries{}
	for {
		now := time.Now()
		var live []*Lock
		var ends time.Time
		for _, l := range held {
			if e := l.LeaseEnds(); e.After(now) {
				live = append(live, l)
				if e.After(ends) {
					ends = e
				}
			}
		}
		if len(live) == 0 {
			return nil
		}
		timeout, ok := r.timeout(t, ends)
		if !ok {
			return nil
		}
		body := releaseBody{}
		for _, l := range live {
			info := l.Info()
			body.Locks = append(body.Locks, lockRef{Name: info.Name, ID: info.ID})
		}
		answer, err := t.release(context.Background(), body, timeout)
		if err.code() == "bad_request" {
			errs := make(chan error, len(live))
			for _, l := range live {
				go func(l *Lock) {
					info := l.Info()
					errs <- releaseOne(t, lockRef{Name: info.Name, ID: info.ID}, l.LeaseEnds, r.unknown)
				}(l)
			}
			var first error
			for range live {
				if e := <-errs; e != nil && first == nil {
					first = e
				}
			}
			return first
		}
		all := err == nil && len(answer.NotHeld) == 0
		if done, ok := r.judge(all, err); ok {
			return done
		}
	}
}
