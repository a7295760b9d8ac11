package leasehold

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// SessionOption configures OpenSession.
type SessionOption func(*sessionOptions)

type sessionOptions struct {
	ttl    time.Duration
	holder *string
}

// SessionTTL sets the session's lease (default: the cluster's): every lock
// of the session has this lease.
func SessionTTL(d time.Duration) SessionOption {
	return func(o *sessionOptions) { o.ttl = d }
}

// SessionHolder names the session's holder, shown in listings.
func SessionHolder(holder string) SessionOption {
	return func(o *sessionOptions) { o.holder = &holder }
}

// Session is one lease that many locks hang off, renewed in the background
// once for all of them until it is closed (Close) or lost. Lost() is closed
// the moment it is lost (a renewal refused, or its lease about to lapse
// unrenewed on this client's clock), and every lock of it is lost with it.
type Session struct {
	c      *Client
	id     string
	margin time.Duration

	mu    sync.Mutex
	info  SessionInfo
	ends  time.Time
	loss  Loss
	locks []sessionHeld

	lost      chan struct{}
	lostOnce  sync.Once
	stopRenew chan struct{}
	stopOnce  sync.Once
}

type sessionHeld struct {
	lock    *Lock
	granted time.Time
}

// OpenSession opens a session: a lease that locks taken with
// Session.Acquire (or WithSession) hang off.
func (c *Client) OpenSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	o := &sessionOptions{}
	for _, f := range opts {
		f(o)
	}
	body := sessionOpenBody{Holder: o.holder}
	if o.ttl > 0 {
		body.TTLMS = u64p(millis(o.ttl))
	}
	var sent time.Time
	var answer *sessionAnswer
	err := c.retrying(ctx, time.Now().Add(c.retryFor), func() *callError {
		sent = time.Now()
		a, err := c.t.session(ctx, "/v1/sessions/open", body, requestTimeout)
		answer = a
		return err
	})
	if err != nil {
		return nil, refused(err)
	}
	info := *answer.Session
	lease := ms(info.LeaseMS)
	margin := lease / 10
	if margin > maxLapseMargin {
		margin = maxLapseMargin
	}
	s := &Session{
		c:         c,
		id:        info.ID,
		margin:    margin,
		info:      info,
		ends:      sent.Add(ms(answer.ServedMS + info.TTLMS)),
		lost:      make(chan struct{}),
		stopRenew: make(chan struct{}),
	}
	every := lease / 3
	if every < 10*time.Millisecond {
		every = 10 * time.Millisecond
	}
	go s.renew(every)
	return s, nil
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Info is the session as last opened or renewed.
func (s *Session) Info() SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

// LeaseEnds is when the session's lease ends on this client's count (from
// the send of the call that opened or last renewed it).
func (s *Session) LeaseEnds() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ends
}

func (s *Session) lapse() time.Time { return s.LeaseEnds().Add(-s.margin) }

// Lost is closed once the session is lost (or closed), with every lock of it.
func (s *Session) Lost() <-chan struct{} {
	s.IsLost()
	return s.lost
}

// IsLost says whether the session is lost, judged now (a lapse is seen the
// moment it is due).
func (s *Session) IsLost() bool {
	select {
	case <-s.lost:
		return true
	default:
	}
	if !time.Now().Before(s.lapse()) {
		s.lose(Lapsed)
	}
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

// Loss says why the session was lost (NotLost while held, and after Close).
func (s *Session) Loss() Loss {
	s.IsLost()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loss
}

func (s *Session) lose(loss Loss) {
	s.lostOnce.Do(func() {
		s.mu.Lock()
		s.loss = loss
		locks := s.locks
		s.mu.Unlock()
		close(s.lost)
		for _, h := range locks {
			h.lock.lose(loss)
		}
	})
}

// Acquire takes name in this session, waiting as the options say: the lock
// has the session's lease and no renewal of its own (WithLease is not
// taken); WithLockDelay keeps its name closed that long after a lapse of
// the session (protocol 8). It is lost when the session is, or when a
// renewal of the session finds it gone.
func (s *Session) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	o := newAcquireOptions(opts)
	return s.acquire(ctx, s.c, name, o)
}

func (s *Session) acquire(ctx context.Context, _ *Client, name string, o *acquireOptions) (*Lock, error) {
	if s.IsLost() {
		return nil, ErrLost
	}
	o.session = s
	o.lease = 0
	body := o.body()
	body.Name = name
	answer, _, err := s.c.granted(ctx, body, o)
	if err != nil {
		return nil, err
	}
	l := &Lock{t: s.c.t, name: answer.Lock.Name, id: answer.Lock.ID, info: *answer.Lock, lost: make(chan struct{}), sess: s, finished: make(chan struct{})}
	s.mu.Lock()
	s.locks = append(s.locks, sessionHeld{lock: l, granted: time.Now()})
	s.mu.Unlock()
	if s.IsLost() {
		l.lose(s.Loss())
	}
	return l, nil
}

// release releases one lock of the session before the session ends.
func (s *Session) release(ctx context.Context, l *Lock) error {
	s.mu.Lock()
	kept := s.locks[:0]
	for _, h := range s.locks {
		if h.lock != l {
			kept = append(kept, h)
		}
	}
	s.locks = kept
	s.mu.Unlock()
	info := l.Info()
	_, err := s.c.t.release(ctx, releaseBody{Name: info.Name, ID: info.ID}, requestTimeout)
	l.lostOnce.Do(func() { close(l.lost) })
	if err != nil {
		return refused(err)
	}
	return nil
}

// Close closes the session: it and every lock of it are released. It
// answers how many locks went with it.
func (s *Session) Close(ctx context.Context) (uint64, error) {
	s.stopOnce.Do(func() { close(s.stopRenew) })
	s.lose(NotLost)
	answer, err := s.c.t.session(ctx, "/v1/sessions/close", sessionBody{ID: s.id}, requestTimeout)
	if err != nil {
		return 0, refused(err)
	}
	if answer.Released != nil {
		return *answer.Released, nil
	}
	return answer.Session.Locks, nil
}

// digest is the exclusive or of the 128-bit ids of the locks held in the
// session, as 32 hex digits.
func (s *Session) digest() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var hi, lo uint64
	for _, h := range s.locks {
		if a, b, ok := parseLockID(h.lock.id); ok {
			hi ^= a
			lo ^= b
		}
	}
	return fmt.Sprintf("%016x%016x", hi, lo)
}

// keepOnly marks lost every lock not in held, the session's locks as a
// renewal sent at sent found them: a lock granted since may be missing from
// it, and is kept.
func (s *Session) keepOnly(held []string, sent time.Time) {
	in := make(map[string]bool, len(held))
	for _, id := range held {
		in[id] = true
	}
	s.mu.Lock()
	kept := s.locks[:0]
	var gone []*Lock
	for _, h := range s.locks {
		if in[h.lock.id] || !h.granted.Before(sent) {
			kept = append(kept, h)
		} else {
			gone = append(gone, h.lock)
		}
	}
	s.locks = kept
	s.mu.Unlock()
	for _, l := range gone {
		l.lose(Refused)
	}
}

// renew renews the session every period until it is lost or closed; a
// renewal refused loses it at once, and one that gets no answer is tried
// again until the lease is about to end.
func (s *Session) renew(every time.Duration) {
	for {
		wait := every
		if untilLapse := time.Until(s.lapse()); untilLapse < wait {
			wait = untilLapse
		}
		timer := time.NewTimer(wait)
		select {
		case <-s.lost:
			timer.Stop()
			return
		case <-s.stopRenew:
			timer.Stop()
			return
		case <-timer.C:
		}
		for attempt := 0; ; attempt++ {
			if s.IsLost() {
				return
			}
			body := sessionBody{ID: s.id, Digest: s.digest()}
			sent := time.Now()
			// Each attempt has a share of the time left for every endpoint
			// not tried yet in the round: a node that hangs leaves time for
			// the others.
			n := len(s.c.t.endpoints)
			timeout := attemptTimeout(s.lapse().Sub(sent), n-attempt%n)
			ctx, cancel := context.WithDeadline(context.Background(), s.lapse())
			answer, err := s.c.t.session(ctx, "/v1/sessions/renew", body, timeout)
			cancel()
			select {
			case <-s.stopRenew:
				return
			default:
			}
			if err == nil {
				s.mu.Lock()
				s.ends = sent.Add(ms(answer.Session.TTLMS))
				s.info = *answer.Session
				s.mu.Unlock()
				if answer.Held != nil {
					s.keepOnly(*answer.Held, sent)
				}
				break
			}
			if err.kind == callCancelled {
				s.lose(Lapsed)
				return
			}
			if err.kind == callAPI && !retryable(err) {
				s.lose(Refused)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// parseLockID reads a lock id (26 characters of Crockford base32) as its
// 128 bits.
func parseLockID(id string) (hi, lo uint64, ok bool) {
	if len(id) != 26 || id[0] > '7' {
		return 0, 0, false
	}
	const digits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	for _, c := range strings.ToUpper(id) {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c == 'O':
			d = 0
		case c == 'I' || c == 'L':
			d = 1
		default:
			i := strings.IndexRune(digits[10:], c)
			if i < 0 {
				return 0, 0, false
			}
			d = uint64(i + 10)
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | d
	}
	return hi, lo, true
}
