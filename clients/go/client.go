// Package leasehold is the Go client of leasehold, a cluster lock service.
//
// A lock is held by a *Lock that renews it in the background until it is
// released (Release) or lost (Lost, Loss, Check). Do runs work under a lock
// and cancels the work's context when the lock is lost. Campaign, Leader and
// Observe do leader election; OpenSession holds many locks on one lease;
// AcquireAll holds a set of names at once or none.
//
// The client behaves as the Rust client (docs/client.md): it starts at an
// endpoint chosen at random and moves on when a node gives no answer or a
// 503; one-shot calls retry for 10 s; each acquire sends a request_id of its
// own, the same on every retry; every lease is counted on the client's own
// clock from the moment it sent the request that won or renewed it.
package leasehold

import (
	"context"
	crand "crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// The lease assumed before the cluster says which it granted.
const assumedDefaultLease = 30 * time.Second

// How long a one-shot call keeps retrying through other nodes while none
// can serve.
const defaultRetryFor = 10 * time.Second

// The longest wait of one watch (the node's limit).
const maxWatch = 60 * time.Second

// The time allowed one request beyond any wait it asks for.
const requestTimeout = 5 * time.Second

// The longest name (bytes).
const maxNameBytes = 512

// EnvToken is the environment variable a client reads its token from when
// none is given (as the leasehold command line does).
const EnvToken = "LEASEHOLD_TOKEN"

// EnvTLSCA is the environment variable a client reads the path of its TLS CA
// from when none is given (as the leasehold command line does).
const EnvTLSCA = "LEASEHOLD_TLS_CA"

// Client talks to a leasehold cluster. It is safe for concurrent use; all
// its calls share one connection pool and one current endpoint.
type Client struct {
	t        *transport
	retryFor time.Duration
}

type clientConfig struct {
	token    string
	tokenSet bool
	caPEM    []byte
	caFile   string
	caSet    bool
	retryFor time.Duration
	err      error
}

// Option configures a Client.
type Option func(*clientConfig)

// WithToken sends token with every request as "Authorization: Bearer", for
// a cluster run with --acl. An empty token sends none (and stops the client
// from reading LEASEHOLD_TOKEN).
func WithToken(token string) Option {
	return func(c *clientConfig) { c.token, c.tokenSet = token, true }
}

// WithTokenFromEnv reads the token from the environment variable name (none
// when it is unset or empty).
func WithTokenFromEnv(name string) Option {
	return func(c *clientConfig) { c.token, c.tokenSet = os.Getenv(name), true }
}

// WithTLSCAFile makes the client trust only the CA (PEM) in the file at
// path; endpoints given as bare host:port are then reached with https://.
// A file that cannot be read, or holds no certificate, makes New fail with
// ErrBadRequest.
func WithTLSCAFile(path string) Option {
	return func(c *clientConfig) {
		c.caSet = true
		c.caFile = path
		c.caPEM = nil
	}
}

// WithTLSCAPEM is WithTLSCAFile with the CA's PEM itself.
func WithTLSCAPEM(pem []byte) Option {
	return func(c *clientConfig) {
		c.caSet = true
		c.caFile = ""
		c.caPEM = pem
	}
}

// WithRetryFor sets how long a one-shot call (and an acquire beyond its
// wait) keeps trying through other nodes while none can serve (default
// 10 s), as the Rust client's with_retry_for.
func WithRetryFor(d time.Duration) Option {
	return func(c *clientConfig) { c.retryFor = d }
}

// New makes a client of the cluster at endpoints ("host:port" or
// "http(s)://host:port"; any node will do). Without WithToken or
// WithTokenFromEnv the token is read from LEASEHOLD_TOKEN, if set; without
// WithTLSCAFile or WithTLSCAPEM the CA is read from the file LEASEHOLD_TLS_CA
// names, if set. An empty list, or an endpoint that is not one, is
// ErrBadRequest.
func New(endpoints []string, opts ...Option) (*Client, error) {
	cfg := clientConfig{retryFor: defaultRetryFor}
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.tokenSet {
		cfg.token = os.Getenv(EnvToken)
	}
	if !cfg.caSet {
		cfg.caFile = os.Getenv(EnvTLSCA)
	}
	var pool *x509.CertPool
	pem := cfg.caPEM
	if cfg.caFile != "" {
		b, err := os.ReadFile(cfg.caFile)
		if err != nil {
			return nil, badRequest("TLS CA %s: %v", cfg.caFile, err)
		}
		pem = b
	}
	if pem != nil {
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, badRequest("the TLS CA holds no PEM certificate")
		}
	}
	t, err := newTransport(endpoints, cfg.token, pool)
	if err != nil {
		return nil, err
	}
	return &Client{t: t, retryFor: cfg.retryFor}, nil
}

// Endpoints are the endpoints the client was given, as it reaches them.
func (c *Client) Endpoints() []string {
	return append([]string(nil), c.t.endpoints...)
}

// randomBelow is a random number below n (n > 0).
func randomBelow(n uint64) uint64 {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano()) % n
	}
	return binary.LittleEndian.Uint64(b[:]) % n
}

var requestCount uint64

// newRequestID is a new name for one acquisition: 32 hex digits.
func newRequestID() string {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixNano()))
		binary.BigEndian.PutUint64(b[8:], atomic.AddUint64(&requestCount, 1)^uint64(os.Getpid())<<32)
	}
	return hex.EncodeToString(b[:])
}

// sleep waits d, or until ctx ends (false then).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// backoff is a short pause before trying again: 50 ms doubling to 500 ms.
func backoff(ctx context.Context, attempt int) bool {
	if attempt > 4 {
		attempt = 4
	}
	d := time.Duration(50<<uint(attempt)) * time.Millisecond
	if d > 500*time.Millisecond {
		d = 500 * time.Millisecond
	}
	return sleep(ctx, d)
}

// retrying runs call until it succeeds, is refused for good, or until
// passes; the transport moved to another node after each failure. An
// attempt that got no answer may have gone through: if one did, the outcome
// stays unknown whatever the later ones say.
func (c *Client) retrying(ctx context.Context, until time.Time, call func() *callError) *callError {
	attempt := 0
	unanswered := ""
	for {
		err := call()
		if err == nil {
			return nil
		}
		if retryable(err) && time.Now().Before(until) {
			if err.kind == callNoAnswer {
				unanswered = err.msg
			}
			if !backoff(ctx, attempt) {
				return &callError{kind: callCancelled, msg: ctx.Err().Error(), ctx: ctx.Err()}
			}
			attempt++
			continue
		}
		if err.kind == callAPI && retryableCode(err.body.Error) && unanswered != "" {
			return &callError{kind: callNoAnswer, msg: fmt.Sprintf("%s (then: %s)", unanswered, err.body.Message)}
		}
		return err
	}
}

// checkedName is ErrBadRequest for a name no lock can have (empty, or too
// long).
func checkedName(name string) error {
	if name == "" {
		return badRequest("the name is empty")
	}
	if len(name) > maxNameBytes {
		return badRequest("the name is longer than %d bytes", maxNameBytes)
	}
	return nil
}

// granted sends an acquire until a node grants it, refuses it for good, or
// the wait and the retries run out. It answers the grant and where its
// lease is counted from: the send of the call that won it, plus the time
// the node held it.
func (c *Client) granted(ctx context.Context, body acquireBody, o *acquireOptions) (*lockAnswer, time.Time, error) {
	expected := assumedDefaultLease
	if o.lease > 0 {
		expected = o.lease
	}
	if _, err := checkedSchedule(expected, o); err != nil {
		return nil, time.Time{}, err
	}
	start := time.Now()
	until := start.Add(o.wait + c.retryFor)
	waitUntil := start.Add(o.wait)
	var sent time.Time
	var answer *lockAnswer
	for {
		err := c.retrying(ctx, until, func() *callError {
			sent = time.Now()
			b := body
			wait := waitUntil.Sub(sent)
			if wait > 0 {
				b.WaitMS = u64p(millis(wait))
			} else {
				wait = 0
			}
			a, err := c.t.acquire(ctx, b, wait+requestTimeout)
			answer = a
			return err
		})
		if err == nil {
			break
		}
		// A node waits at most 10 minutes at a time: ask again while this
		// call's own wait lasts.
		if err.code() == "held" && time.Now().Before(waitUntil) {
			if !backoff(ctx, 0) {
				return nil, time.Time{}, ctx.Err()
			}
			continue
		}
		return nil, time.Time{}, refused(err)
	}
	// The node got the request no earlier than it was sent and held it
	// served_ms: the lease is counted from there.
	return answer, sent.Add(ms(answer.ServedMS)), nil
}

func (o *acquireOptions) body() acquireBody {
	b := acquireBody{RequestID: newRequestID(), Session: o.sessionID()}
	if o.holder != nil {
		b.Holder = o.holder
	}
	if o.lease > 0 {
		b.LeaseMS = u64p(millis(o.lease))
	}
	b.Data = o.data
	if o.shared {
		t := true
		b.Shared = &t
	}
	if o.permits > 0 {
		b.Permits = u64p(o.permits)
	}
	if o.lockDelay > 0 {
		b.LockDelayMS = u64p(millis(o.lockDelay))
	}
	return b
}

// Acquire acquires name, waiting as WithWait says (no wait: fail at once
// with ErrHeld), and returns the lock, renewed in the background until it is
// released (Lock.Release) or lost. With WithSession, the lock is taken in
// that session (Session.Acquire).
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	o := newAcquireOptions(opts)
	if o.session != nil {
		return o.session.acquire(ctx, c, name, o)
	}
	body := o.body()
	body.Name = name
	answer, sent, err := c.granted(ctx, body, o)
	if err != nil {
		return nil, err
	}
	return startLock(c.t, *answer.Lock, sent, o)
}

// TryAcquire is Acquire with no wait: if the lock is held it fails at once
// with ErrHeld (a *HeldError carrying the holder's lock).
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return c.Acquire(ctx, name, append(append([]AcquireOption(nil), opts...), WithWait(0))...)
}

type lockKey struct{}

// LockFromContext answers the lock Do runs its work under, from the work's
// context (nil elsewhere).
func LockFromContext(ctx context.Context) *Lock {
	l, _ := ctx.Value(lockKey{}).(*Lock)
	return l
}

// Do acquires name, runs work while holding it, then releases it, as
// pglock's Do and the Rust client's with_lock. The work's context is
// cancelled the moment the lock is lost, or its lease is about to lapse
// unrenewed (judged on the client's clock, even with no node answering).
// After a lapse the work has until the lease ends to return; after a
// refused renewal (another may hold the lock already) Do returns at once.
// Either way Do answers ErrLost, even if the work returned nil. Errors of
// the acquire are returned as they are, and nothing was run. Otherwise Do
// answers what the work returned.
func (c *Client) Do(ctx context.Context, name string, work func(ctx context.Context) error, opts ...AcquireOption) error {
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return runUnder(ctx, l, l.Lost(), l.Loss, l.IsLost, l.leaseEnded, l.Release, work, true)
}

// runUnder runs work under a held lock (or set): cancels its context on
// loss, and answers as Do says.
func runUnder(ctx context.Context, l *Lock, lost <-chan struct{}, loss func() Loss, isLost func() bool,
	ended func() <-chan struct{}, release func(context.Context) error, work func(context.Context) error,
	waitOnLapse bool) error {
	wctx, cancel := context.WithCancel(context.WithValue(ctx, lockKey{}, l))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- work(wctx) }()
	select {
	case err := <-done:
		if isLost() {
			return ErrLost
		}
		// The work is done; a failed release only leaves the lease to run out.
		_ = release(context.Background())
		return err
	case <-lost:
		// Let the work see its context end. A refused renewal means another
		// may hold the lock already: return now. A lapse leaves the work
		// until the lease ends.
		cancel()
		if waitOnLapse && loss() != Refused {
			select {
			case <-done:
			case <-ended():
			}
		}
		return ErrLost
	}
}

// Get answers the lock name, or nil when the name is free.
func (c *Client) Get(ctx context.Context, name string) (*LockInfo, error) {
	if err := checkedName(name); err != nil {
		return nil, err
	}
	var lock *LockInfo
	err := c.retrying(ctx, time.Now().Add(c.retryFor), func() *callError {
		l, err := c.t.get(ctx, "/v1/locks/"+segment(name), requestTimeout)
		lock = l
		return err
	})
	if err != nil {
		return nil, refused(err)
	}
	return lock, nil
}

// Watch answers the lock name once its fence differs from afterFence, or
// after wait (at most 60 s), as it then is (nil: free).
func (c *Client) Watch(ctx context.Context, name string, afterFence uint64, wait time.Duration) (*LockInfo, error) {
	return c.watch(ctx, name, afterFence, nil, wait)
}

// WatchData is Watch answering also once the lock's data differs from
// afterData (the data of the lock last seen; nil: none).
func (c *Client) WatchData(ctx context.Context, name string, afterFence uint64, afterData *string, wait time.Duration) (*LockInfo, error) {
	tag := dataTag(afterData)
	return c.watch(ctx, name, afterFence, &tag, wait)
}

func (c *Client) watch(ctx context.Context, name string, afterFence uint64, afterData *uint64, wait time.Duration) (*LockInfo, error) {
	if err := checkedName(name); err != nil {
		return nil, err
	}
	if wait > maxWatch {
		wait = maxWatch
	}
	if wait < 0 {
		wait = 0
	}
	path := fmt.Sprintf("/v1/locks/%s?wait_ms=%d&after_fence=%d", segment(name), millis(wait), afterFence)
	if afterData != nil {
		path += "&after_data=" + strconv.FormatUint(*afterData, 10)
	}
	var lock *LockInfo
	err := c.retrying(ctx, time.Now().Add(wait+c.retryFor), func() *callError {
		l, err := c.t.get(ctx, path, wait+requestTimeout)
		lock = l
		return err
	})
	if err != nil {
		return nil, refused(err)
	}
	return lock, nil
}

// dataTag is the tag of a lock's data a watch compares (FNV-1a, 64 bits, of
// its UTF-8 bytes; 0 for none).
func dataTag(data *string) uint64 {
	if data == nil {
		return 0
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(*data); i++ {
		h ^= uint64((*data)[i])
		h *= 1099511628211
	}
	return h
}

// List answers the locks whose names start with prefix, at most limit (0:
// the node's default, 1000), in name order.
func (c *Client) List(ctx context.Context, prefix string, limit int) ([]LockInfo, error) {
	listing, err := c.Listing(ctx, prefix, limit)
	if err != nil {
		return nil, err
	}
	return listing.Locks, nil
}

// Listing answers what List does, with how many locks are held under
// prefix in all and the free names under it that requests wait for (a set
// waiting for all its names keeps the free ones for itself).
func (c *Client) Listing(ctx context.Context, prefix string, limit int) (*Listing, error) {
	path := "/v1/locks?prefix=" + segment(prefix)
	if limit > 0 {
		path += "&limit=" + strconv.Itoa(limit)
	}
	var listing Listing
	err := c.retrying(ctx, time.Now().Add(c.retryFor), func() *callError {
		listing = Listing{}
		return c.t.send(ctx, http.MethodGet, path, nil, requestTimeout, &listing)
	})
	if err != nil {
		return nil, refused(err)
	}
	return &listing, nil
}

// Cluster answers the cluster as the node reached sees it.
func (c *Client) Cluster(ctx context.Context) (*ClusterInfo, error) {
	var info ClusterInfo
	err := c.retrying(ctx, time.Now().Add(c.retryFor), func() *callError {
		info = ClusterInfo{}
		return c.t.send(ctx, http.MethodGet, "/v1/cluster", nil, requestTimeout, &info)
	})
	if err != nil {
		return nil, refused(err)
	}
	return &info, nil
}

// Release releases the lock name held under id, for a lock held without a
// *Lock (an operator's release). A stale id is ErrNotHeld.
func (c *Client) Release(ctx context.Context, name, id string) (*LockInfo, error) {
	var lock *LockInfo
	body := releaseBody{Name: name, ID: id}
	err := c.retrying(ctx, time.Now().Add(c.retryFor), func() *callError {
		a, err := c.t.release(ctx, body, requestTimeout)
		if a != nil {
			lock = a.Lock
		}
		return err
	})
	if err != nil {
		return nil, refused(err)
	}
	return lock, nil
}
