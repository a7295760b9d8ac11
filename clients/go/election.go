package leasehold

import (
	"context"
	"errors"
	"time"
)

// CampaignOption configures Campaign.
type CampaignOption func(*campaignOptions)

type campaignOptions struct {
	lease   time.Duration
	giveUp  time.Duration
	giveSet bool
}

// CampaignLease sets the leadership lease: how soon another takes over
// after this leader dies without resigning (default: the cluster's).
func CampaignLease(d time.Duration) CampaignOption {
	return func(o *campaignOptions) { o.lease = d }
}

// GiveUpAfter gives the campaign up after d without winning (ErrHeld);
// default: never.
func GiveUpAfter(d time.Duration) CampaignOption {
	return func(o *campaignOptions) { o.giveUp, o.giveSet = d, true }
}

// Leadership is this candidate's leadership: it leads while the lock lives
// and is not lost. The lock's data is the leader's value.
type Leadership struct {
	*Lock
}

// Resign gives leadership up at once, so another candidate can take over.
func (l *Leadership) Resign(ctx context.Context) error {
	return l.Release(ctx)
}

// Proclaim announces value as this leader's in place of the one it
// campaigned with, without giving leadership up: observers see it at once.
func (l *Leadership) Proclaim(ctx context.Context, value string) (*LockInfo, error) {
	return l.SetData(ctx, value)
}

// The longest single wait of a campaign; it waits again after.
const campaignWait = 60 * time.Second

// How long an observer's watch waits before asking again.
const observeWait = 30 * time.Second

// Campaign waits until this candidate leads election name, announcing
// value, and returns its leadership; ErrHeld once GiveUpAfter passes.
func (c *Client) Campaign(ctx context.Context, name, value string, opts ...CampaignOption) (*Leadership, error) {
	o := &campaignOptions{}
	for _, f := range opts {
		f(o)
	}
	var giveUp time.Time
	if o.giveSet {
		giveUp = time.Now().Add(o.giveUp)
	}
	for {
		wait := campaignWait
		if o.giveSet {
			if left := time.Until(giveUp); left < wait {
				wait = left
			}
			if wait < 0 {
				wait = 0
			}
		}
		acquire := []AcquireOption{WithWait(wait), WithHolder(value), WithData(value)}
		if o.lease > 0 {
			acquire = append(acquire, WithLease(o.lease))
		}
		l, err := c.Acquire(ctx, name, acquire...)
		if err == nil {
			return &Leadership{Lock: l}, nil
		}
		if (errors.Is(err, ErrHeld) || errors.Is(err, ErrReserved) || errors.Is(err, ErrArrivedLate)) && (!o.giveSet || time.Now().Before(giveUp)) && ctx.Err() == nil {
			continue
		}
		return nil, err
	}
}

// Leader answers who leads election name now: the leader's lock, whose Data
// is its value; nil when none leads.
func (c *Client) Leader(ctx context.Context, name string) (*LockInfo, error) {
	return c.Get(ctx, name)
}

// Observation is what an observer is told: the leader (nil: none), or a
// failed call (Err).
type Observation struct {
	Leader *LockInfo
	Err    error
}

// Value is the leader's value (its lock's data); nil when none leads.
func (o Observation) Value() *string {
	if o.Leader == nil {
		return nil
	}
	return o.Leader.Data
}

// Observe follows who leads election name: first the leader now (or none),
// then each change (a new leader, or a leader's new value), without
// polling. After a failed call (an Err item) the next one waits, 50 ms
// doubling to 2 s. The channel is closed once ctx ends.
func (c *Client) Observe(ctx context.Context, name string) <-chan Observation {
	out := make(chan Observation)
	go func() {
		defer close(out)
		type seenT struct {
			fence uint64
			data  *string
		}
		var seen *seenT // nil: nothing told yet
		told := false
		failures := 0
		for ctx.Err() == nil {
			if failures > 0 {
				shift := failures - 1
				if shift > 6 {
					shift = 6
				}
				d := time.Duration(50<<uint(shift)) * time.Millisecond
				if d > 2*time.Second {
					d = 2 * time.Second
				}
				if !sleep(ctx, d) {
					return
				}
			}
			var lock *LockInfo
			var err error
			switch {
			case !told:
				lock, err = c.Get(ctx, name)
			case seen == nil:
				lock, err = c.WatchData(ctx, name, 0, nil, observeWait)
			default:
				lock, err = c.WatchData(ctx, name, seen.fence, seen.data, observeWait)
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failures++
				select {
				case out <- Observation{Err: err}:
				case <-ctx.Done():
					return
				}
				continue
			}
			failures = 0
			var now *seenT
			if lock != nil {
				now = &seenT{fence: lock.Fence, data: lock.Data}
			}
			same := told && ((seen == nil && now == nil) ||
				(seen != nil && now != nil && seen.fence == now.fence && eqData(seen.data, now.data)))
			if same {
				continue
			}
			told = true
			seen = now
			select {
			case out <- Observation{Leader: lock}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func eqData(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}
