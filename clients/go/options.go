package leasehold

import "time"

// AcquireOption configures an acquire (Acquire, TryAcquire, AcquireAll, Do).
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	lease       time.Duration
	wait        time.Duration
	holder      *string
	data        *string
	renewEvery  time.Duration
	lapseMargin time.Duration
	marginSet   bool
	shared      bool
	permits     uint64
	lockDelay   time.Duration
	session     *Session
}

func newAcquireOptions(opts []AcquireOption) *acquireOptions {
	o := &acquireOptions{}
	for _, f := range opts {
		f(o)
	}
	return o
}

func (o *acquireOptions) sessionID() string {
	if o.session == nil {
		return ""
	}
	return o.session.id
}

// WithLease asks for this lease (default: the cluster's, 30 s).
func WithLease(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.lease = d }
}

// WithWait waits up to d while another holds the lock (0, the default:
// fail at once with ErrHeld). Any length: a node waits 10 minutes at a time
// and the client asks again.
func WithWait(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.wait = d }
}

// WithHolder names the holder, shown in listings.
func WithHolder(holder string) AcquireOption {
	return func(o *acquireOptions) { o.holder = &holder }
}

// WithData keeps data with the lock.
func WithData(data string) AcquireOption {
	return func(o *acquireOptions) { o.data = &data }
}

// WithRenewEvery renews every d (default: a third of the lease). At most
// half the lease, at least 10 ms, and with room for the lapse margin: a
// schedule that cannot keep the lock is ErrBadRequest, before anything is
// sent.
func WithRenewEvery(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.renewEvery = d }
}

// WithLapseMargin counts an unrenewed lock as lost d before its lease ends
// on the client's clock (default: a tenth of the lease, at most 2 s).
func WithLapseMargin(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.lapseMargin, o.marginSet = d, true }
}

// WithShared holds the name as a reader, beside other readers.
func WithShared() AcquireOption {
	return func(o *acquireOptions) { o.shared = true }
}

// WithPermits holds one of n permits of the name (a semaphore). Every
// holder and waiter of the name must ask the same n.
func WithPermits(n uint64) AcquireOption {
	return func(o *acquireOptions) { o.permits = n }
}

// WithLockDelay keeps the name closed d longer once the lease runs out
// unreleased (at most a minute).
func WithLockDelay(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.lockDelay = d }
}

// WithSession takes the lock in session s: it has the session's lease, no
// renewal of its own, and is lost with the session. Not with WithLease or
// WithLockDelay (they are not taken).
func WithSession(s *Session) AcquireOption {
	return func(o *acquireOptions) { o.session = s }
}
