package leasehold

import (
	"context"
	"sync"
)

// LockSet is locks granted together (AcquireAll), one *Lock each, renewed
// side by side. The set counts as lost the moment any of its locks is.
type LockSet struct {
	t        *transport
	locks    []*Lock
	lost     chan struct{}
	lostOnce sync.Once
	relOnce  sync.Once
	released chan struct{}
	result   error
}

// AcquireAll acquires every one of names at once, or none: the set waits
// (as WithWait says) until every name is free for it, first come first
// served on each name, and is granted in one step, each lock with its own
// fence (consecutive, in the order asked).
func (c *Client) AcquireAll(ctx context.Context, names []string, opts ...AcquireOption) (*LockSet, error) {
	o := newAcquireOptions(opts)
	if o.session != nil {
		return nil, badRequest("a set in a session is not supported by this client: take each name with Session.Acquire")
	}
	body := o.body()
	body.Names = append([]string(nil), names...)
	answer, sent, err := c.granted(ctx, body, o)
	if err != nil {
		return nil, err
	}
	set := &LockSet{t: c.t, lost: make(chan struct{}), released: make(chan struct{})}
	for i, info := range answer.Locks {
		l, err := startLock(c.t, info, sent, o)
		if err != nil {
			// The locks started so far are released in the background, and
			// so are those not started (the one that failed gave itself back).
			for _, started := range set.locks {
				go func(l *Lock) { _ = l.Release(context.Background()) }(started)
			}
			for _, rest := range answer.Locks[i+1:] {
				go func(info LockInfo) {
					ctx, cancel := context.WithTimeout(context.Background(), attemptMax)
					defer cancel()
					_, _ = c.t.release(ctx, releaseBody{Name: info.Name, ID: info.ID}, attemptMax)
				}(rest)
			}
			return nil, err
		}
		set.locks = append(set.locks, l)
	}
	for _, l := range set.locks {
		go func(l *Lock) {
			<-l.lost
			set.lostOnce.Do(func() { close(set.lost) })
		}(l)
	}
	return set, nil
}

// DoAll runs work while holding every one of names (AcquireAll), then
// releases them; as Do, the work's context is cancelled the moment any of
// them is lost, and DoAll then answers ErrLost at once (as the Rust
// client's with_locks, without waiting for the work).
func (c *Client) DoAll(ctx context.Context, names []string, work func(ctx context.Context) error, opts ...AcquireOption) error {
	set, err := c.AcquireAll(ctx, names, opts...)
	if err != nil {
		return err
	}
	return runUnder(ctx, set.locks[0], set.lost, set.Loss, set.IsLost, set.locks[0].leaseEnded, set.Release, work, false)
}

// Locks are the set's locks, in the order asked.
func (s *LockSet) Locks() []*Lock { return append([]*Lock(nil), s.locks...) }

// Infos are the locks as last granted or renewed, in the order asked.
func (s *LockSet) Infos() []LockInfo {
	out := make([]LockInfo, len(s.locks))
	for i, l := range s.locks {
		out[i] = l.Info()
	}
	return out
}

// Fences are the fence of each lock, in the order asked.
func (s *LockSet) Fences() []uint64 {
	out := make([]uint64, len(s.locks))
	for i, l := range s.locks {
		out[i] = l.Fence()
	}
	return out
}

// Lost is closed the moment any lock of the set is lost, or its lease is
// about to lapse unrenewed (and once the set is released).
func (s *LockSet) Lost() <-chan struct{} {
	s.IsLost()
	return s.lost
}

// IsLost says whether any lock of the set is lost, judged now.
func (s *LockSet) IsLost() bool {
	for _, l := range s.locks {
		if l.IsLost() {
			s.lostOnce.Do(func() { close(s.lost) })
		}
	}
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

// Loss says why the set was lost: the loss of its first lock lost.
func (s *LockSet) Loss() Loss {
	for _, l := range s.locks {
		if loss := l.Loss(); loss != NotLost {
			return loss
		}
	}
	return NotLost
}

// Check is ErrLost if any lock of the set is lost, judged now.
func (s *LockSet) Check() error {
	if s.IsLost() {
		return ErrLost
	}
	return nil
}

// Release stops renewing and releases every lock in one call, tried node
// after node while a lease runs. ErrLost if any lock was lost; the others
// are released all the same. The release goes on when ctx ends before it is
// done.
func (s *LockSet) Release(ctx context.Context) error {
	s.relOnce.Do(func() {
		go func() {
			s.result = s.releaseAll()
			close(s.released)
		}()
	})
	select {
	case <-s.released:
		return s.result
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *LockSet) releaseAll() error {
	var lost error
	var held []*Lock
	for _, l := range s.locks {
		if err := l.handOver(); err != nil {
			lost = err
		} else {
			held = append(held, l)
		}
	}
	if len(held) == 0 {
		return lost
	}
	if err := releaseTogether(s.t, held); err != nil {
		return err
	}
	return lost
}
