package leasehold

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The longest margin before a lease's end at which an unrenewed lock counts
// as lost.
const maxLapseMargin = 2 * time.Second

// The shortest renewal period a schedule may ask for.
const minRenewEvery = 10 * time.Millisecond

// The longest the renewal goroutine sleeps without looking at the lapse.
const lookAtMost = 250 * time.Millisecond

// How long a change of data is tried while the cluster answers upgrading.
const dataPatience = 5 * time.Second

// Loss says why a lock was lost.
type Loss int

const (
	// NotLost: the lock is held (or was released).
	NotLost Loss = iota
	// Refused: a node refused a renewal (404 not_held, 409 held): the lock
	// is gone, and another client may hold it already.
	Refused
	// Lapsed: no renewal got through by the lapse margin before the lease
	// ends on the client's clock; the cluster may still have it until its
	// lease ends.
	Lapsed
)

func (l Loss) String() string {
	switch l {
	case Refused:
		return "Refused"
	case Lapsed:
		return "Lapsed"
	}
	return "NotLost"
}

// schedule is when a lock is renewed, and how long before the lease's end an
// unrenewed lock counts as lost.
type schedule struct {
	every  time.Duration
	margin time.Duration
}

func askedSchedule(lease time.Duration, o *acquireOptions) schedule {
	s := schedule{every: o.renewEvery, margin: o.lapseMargin}
	if s.every == 0 {
		s.every = lease / 3
	}
	if !o.marginSet {
		s.margin = lease / 10
		if s.margin > maxLapseMargin {
			s.margin = maxLapseMargin
		}
	}
	return s
}

// checkedSchedule is the schedule the options ask for under lease, or why
// it cannot keep the lock (ErrBadRequest): a renewal at least twice a lease
// and at most every 10 ms, a margin under half the lease, and room for a
// whole period and a half between renewals and the lapse.
func checkedSchedule(lease time.Duration, o *acquireOptions) (schedule, error) {
	s := askedSchedule(lease, o)
	if s.every < minRenewEvery || s.every > lease/2 {
		return s, badRequest("a renewal every %v does not fit a %v lease: renew at least twice a lease, and at most every %v", s.every, lease, minRenewEvery)
	}
	if s.margin < 0 || s.margin >= lease/2 {
		return s, badRequest("a lapse margin of %v is too long for a %v lease: keep it under half", s.margin, lease)
	}
	if s.every+s.every/2+s.margin > lease {
		return s, badRequest("a renewal every %v with a lapse margin of %v leaves too little of a %v lease between renewals: shorten one of them", s.every, s.margin, lease)
	}
	return s, nil
}

// fittedSchedule is the schedule for a granted lease: as asked where it
// fits; where the cluster granted less than was assumed, the margin asked
// for is kept if it is under half the lease (else a quarter of it), and the
// period is shortened to fit around it.
func fittedSchedule(lease time.Duration, o *acquireOptions) schedule {
	s, err := checkedSchedule(lease, o)
	if err != nil {
		asked := askedSchedule(lease, o)
		margin := asked.margin
		if margin < 0 || margin >= lease/2 {
			margin = lease / 4
		}
		room := (lease - margin) * 2 / 3
		if room < 0 {
			room = 0
		}
		every := asked.every
		if every > lease/2 {
			every = lease / 2
		}
		if every > room {
			every = room
		}
		s = schedule{every: every, margin: margin}
	}
	if s.every < time.Millisecond {
		s.every = time.Millisecond
	}
	return s
}

// attemptTimeout is how long one attempt may take with left before the
// deadline: a share of it for each endpoint not tried yet in this round, so
// a node that hangs leaves time to try the others (at least 100 ms, or
// what is left; at most 2 s).
func attemptTimeout(left time.Duration, triesLeft int) time.Duration {
	if triesLeft < 1 {
		triesLeft = 1
	}
	share := left / time.Duration(triesLeft)
	if share < 100*time.Millisecond {
		share = 100 * time.Millisecond
	}
	if share > left {
		share = left
	}
	if share > attemptMax {
		share = attemptMax
	}
	return share
}

// The longest one renewal or release attempt may take before another node
// is tried.
const attemptMax = 2 * time.Second

type stopKind int

const (
	stopRelease stopKind = iota
	stopHand
)

// Lock is a lock this client holds. It is renewed in the background until
// it is released (Release) or lost. Lost() is closed the moment the lock is
// lost, or its lease is about to lapse unrenewed on this client's clock
// (and, as the Rust client's token, once it is released). Call Release when
// done: unlike the Rust guard, a Lock that is dropped without it keeps
// being renewed.
type Lock struct {
	t *transport
	// The grant's name and id, as granted (they never change).
	name, id string

	mu       sync.Mutex
	info     LockInfo
	infoSent time.Time
	ends     time.Time
	loss     Loss

	lease  time.Duration
	every  time.Duration
	margin time.Duration

	lost     chan struct{}
	lostOnce sync.Once

	stop     chan stopKind
	stopOnce sync.Once
	finished chan struct{}
	result   error

	// A lock of a session: no renewal of its own.
	sess *Session
}

// startLock starts guarding granted, whose lease is counted from sent.
func startLock(t *transport, granted LockInfo, sent time.Time, o *acquireOptions) (*Lock, error) {
	// Never counted past the lease asked for, whatever an answer says.
	lease := ms(granted.LeaseMS)
	if lease < time.Millisecond {
		lease = time.Millisecond
	}
	if o.lease > 0 && o.lease < lease {
		lease = o.lease
	}
	s := fittedSchedule(lease, o)
	ttl := ms(granted.TTLMS)
	if ttl > lease {
		ttl = lease
	}
	l := &Lock{
		t:        t,
		name:     granted.Name,
		id:       granted.ID,
		info:     granted,
		infoSent: sent,
		ends:     sent.Add(ttl),
		lease:    lease,
		every:    s.every,
		margin:   s.margin,
		lost:     make(chan struct{}),
		stop:     make(chan stopKind, 1),
		finished: make(chan struct{}),
	}
	if !time.Now().Before(l.lapse()) {
		// The grant came too late to be used: give it back.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), attemptMax)
			defer cancel()
			_, _ = t.release(ctx, releaseBody{Name: granted.Name, ID: granted.ID}, attemptMax)
		}()
		return nil, ErrArrivedLate
	}
	go l.run()
	return l, nil
}

// Info is the lock as last granted or renewed.
func (l *Lock) Info() LockInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

// Name is the lock's name.
func (l *Lock) Name() string { return l.Info().Name }

// ID is the grant's id.
func (l *Lock) ID() string { return l.Info().ID }

// Fence is the grant's fencing token: pass it to the resource the lock
// guards, which refuses any request carrying a lower one. It stays the same
// across renewals.
func (l *Lock) Fence() uint64 { return l.Info().Fence }

// LeaseEnds is when the lease ends on this client's clock, as of the last
// renewal.
func (l *Lock) LeaseEnds() time.Time {
	if l.sess != nil {
		return l.sess.LeaseEnds()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ends
}

// LapseMargin is how long before the lease's end an unrenewed lock counts
// as lost (as fitted to the lease granted).
func (l *Lock) LapseMargin() time.Duration {
	if l.sess != nil {
		return l.sess.margin
	}
	return l.margin
}

func (l *Lock) lapse() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ends.Add(-l.margin)
}

// Lost is closed once the lock is lost or about to lapse (and once it is
// released).
func (l *Lock) Lost() <-chan struct{} {
	l.IsLost()
	return l.lost
}

func (l *Lock) closed() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

func (l *Lock) lose(loss Loss) {
	l.lostOnce.Do(func() {
		l.mu.Lock()
		l.loss = loss
		l.mu.Unlock()
		close(l.lost)
	})
}

// IsLost says whether the lock is lost, or about to lapse: judged now on
// the client's clock, not only as last seen by the renewal goroutine.
func (l *Lock) IsLost() bool {
	if l.sess != nil {
		if l.sess.IsLost() {
			l.lose(l.sess.Loss())
		}
		return l.closed()
	}
	if !l.closed() && !time.Now().Before(l.lapse()) {
		l.lose(Lapsed)
	}
	return l.closed()
}

// Loss says why the lock was lost: Refused or Lapsed; NotLost while it is
// held, and after a release.
func (l *Lock) Loss() Loss {
	l.IsLost()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.loss
}

// Check is ErrLost once the lock may be lost, judged now: call it before
// every unit of work that acts as the holder.
func (l *Lock) Check() error {
	if l.IsLost() {
		return ErrLost
	}
	return nil
}

// leaseEnded is closed once the lease has ended on this client's clock.
func (l *Lock) leaseEnded() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for {
			left := time.Until(l.LeaseEnds())
			if left <= 0 {
				close(ch)
				return
			}
			if left > lookAtMost {
				left = lookAtMost
			}
			time.Sleep(left)
		}
	}()
	return ch
}

// Release stops renewing and releases the lock, trying node after node
// until the lease would have ended anyway. ErrLost if the lock had already
// been lost. The release goes on when ctx ends before it is done (only the
// wait for it stops).
func (l *Lock) Release(ctx context.Context) error {
	if l.sess != nil {
		return l.sess.release(ctx, l)
	}
	l.stopOnce.Do(func() { l.stop <- stopRelease })
	select {
	case <-l.finished:
		return l.result
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handOver stops renewing, for a release with others in one call; ErrLost
// if the lock was lost already.
func (l *Lock) handOver() error {
	sent := false
	l.stopOnce.Do(func() { l.stop <- stopHand; sent = true })
	<-l.finished
	if !sent {
		return ErrLost
	}
	return l.result
}

// SetData keeps data with the lock in place of its data (for an election,
// the leader proclaiming a new value), by a renewal. ErrLost if the lock is
// lost; ErrBadRequest for data the cluster refuses; ErrUnavailable while the
// cluster cannot change data yet, after trying for 5 s. The lock is kept on
// every error but ErrLost.
func (l *Lock) SetData(ctx context.Context, data string) (*LockInfo, error) {
	if l.sess != nil {
		return nil, badRequest("a lock of a session is renewed with its session: its data cannot change")
	}
	if l.IsLost() {
		return nil, ErrLost
	}
	info, loss, err := l.renew(ctx, &data)
	if loss != NotLost {
		l.lose(loss)
		return nil, ErrLost
	}
	if err != nil {
		return nil, err
	}
	if info.Data == nil || *info.Data != data {
		return nil, badRequest("the speaker renewed the lock but kept its data: it runs an earlier build; upgrade every member to change a held lock's data")
	}
	return info, nil
}

func (l *Lock) finish(err error) {
	l.result = err
	close(l.finished)
}

// nextRenewal is when to renew next: a period from now, but early enough
// that a whole period is left before the lapse (at once, for a grant that
// came with little of its lease left).
func (l *Lock) nextRenewal() time.Time {
	now := time.Now()
	early := l.lapse().Add(-l.every)
	if early.Before(now) {
		early = now
	}
	next := now.Add(l.every)
	if early.Before(next) {
		return early
	}
	return next
}

func (l *Lock) lookEvery() time.Duration {
	d := l.margin / 2
	if d < 10*time.Millisecond {
		d = 10 * time.Millisecond
	}
	if d > lookAtMost {
		d = lookAtMost
	}
	return d
}

func earliest(a time.Time, rest ...time.Time) time.Time {
	for _, t := range rest {
		if t.Before(a) {
			a = t
		}
	}
	return a
}

// run renews the lock until it is released, handed over or lost.
func (l *Lock) run() {
	next := l.nextRenewal()
	for {
		wake := earliest(next, l.lapse(), time.Now().Add(l.lookEvery()))
		timer := time.NewTimer(time.Until(wake))
		select {
		case <-timer.C:
		case kind := <-l.stop:
			timer.Stop()
			if kind == stopHand {
				l.finish(nil)
			} else {
				l.finish(l.releaseNow())
			}
			l.lostOnce.Do(func() { close(l.lost) })
			return
		}
		if !time.Now().Before(l.lapse()) || l.closed() {
			l.lose(Lapsed)
			l.finish(ErrLost)
			return
		}
		// Renew early enough still, should the lapse have come closer.
		next = earliest(next, l.nextRenewal())
		if time.Now().Before(next) {
			continue
		}
		_, loss, _ := l.renew(context.Background(), nil)
		if loss != NotLost {
			l.lose(loss)
			l.finish(ErrLost)
			return
		}
		next = l.nextRenewal()
	}
}

// renew renews (keeping data with the lock in place of its data, if given),
// trying node after node, until it gets through or the lapse. A change of
// data the cluster cannot take is an error, not a loss.
func (l *Lock) renew(ctx context.Context, data *string) (*LockInfo, Loss, error) {
	attempt := 0
	started := time.Now()
	for {
		lapse := l.lapse()
		sent := time.Now()
		if !sent.Before(lapse) || l.closed() {
			return nil, Lapsed, nil
		}
		body := renewBody{Name: l.name, ID: l.id, LeaseMS: u64p(millis(l.lease)), Data: data}
		n := len(l.t.endpoints)
		tries := n - attempt%n
		timeout := attemptTimeout(lapse.Sub(sent), tries)
		actx, cancel := context.WithDeadline(ctx, lapse)
		info, err := l.t.renew(actx, body, timeout)
		cancel()
		if err == nil {
			if l.closed() {
				// Declared lost meanwhile: lost it stays.
				return nil, Lapsed, nil
			}
			left := ms(info.TTLMS)
			if left > l.lease {
				left = l.lease
			}
			l.mu.Lock()
			l.ends = sent.Add(left)
			if !sent.Before(l.infoSent) {
				l.infoSent = sent
				l.info = *info
			}
			l.mu.Unlock()
			return info, NotLost, nil
		}
		if err.kind == callCancelled {
			if ctx.Err() != nil {
				return nil, NotLost, ctx.Err()
			}
			return nil, Lapsed, nil
		}
		switch code := err.code(); {
		case code == "not_held" || code == "held":
			return nil, Refused, nil
		case data != nil && (code == "bad_request" || code == "too_large" || code == "forbidden" || code == "unauthorized"):
			return nil, NotLost, refused(err)
		case data != nil && code == "upgrading" && time.Since(started) >= dataPatience:
			return nil, NotLost, refused(err)
		}
		// Unknown outcome, no speaker, or a node that failed: not lost until
		// the lease really runs out; try another node.
		a := attempt
		if a > 3 {
			a = 3
		}
		pause := time.Duration(25<<uint(a)) * time.Millisecond
		if pause > 200*time.Millisecond {
			pause = 200 * time.Millisecond
		}
		if left := time.Until(l.lapse()); left < pause {
			time.Sleep(left)
			return nil, Lapsed, nil
		}
		if !sleep(ctx, pause) {
			return nil, NotLost, ctx.Err()
		}
		attempt++
	}
}

// releaseNow releases, trying node after node while the lease runs.
func (l *Lock) releaseNow() error {
	return releaseOne(l.t, lockRef{Name: l.name, ID: l.id}, l.LeaseEnds, false)
}

func (l *Lock) String() string {
	info := l.Info()
	return fmt.Sprintf("Lock{%s fence %d}", info.Name, info.Fence)
}
