package leasehold

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The tests run beside heavy work (CI runs them on two cores beside the
// Rust suite): a count of background events is waited for, not expected
// after a fixed sleep; a lock that must outlive a wait (or a slow acquire)
// has a lease of seconds; a bound that says "no later than" has seconds of
// slack. What tells a lease counted wrong from one counted right is checked
// against when the fake got the call (no earlier than its send), or rests
// on an answer's delay longer than that slack.

// fake is a node that answers as its handler says, counting calls by path
// and noting when each came.
type fake struct {
	*httptest.Server
	mu     sync.Mutex
	calls  map[string]int
	bodies []map[string]interface{}
	// arrived is when the calls to each path came, on this process's
	// clock: no earlier than the client sent them.
	arrived map[string][]time.Time
}

func newFake(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body map[string]interface{})) *fake {
	f := &fake{calls: map[string]int{}, arrived: map[string][]time.Time{}}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		var body map[string]interface{}
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.calls[r.URL.Path]++
		f.bodies = append(f.bodies, body)
		f.arrived[r.URL.Path] = append(f.arrived[r.URL.Path], at)
		f.mu.Unlock()
		handle(w, r, body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fake) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[path]
}

// arrivals is when the calls to path came, in order.
func (f *fake) arrivals(path string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.arrived[path]...)
}

// waitFor waits until done holds, looking every 10 ms; it fails the test
// after 10 s.
func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fake) addr() string { return strings.TrimPrefix(f.URL, "http://") }

func answer(w http.ResponseWriter, status int, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func lockJSON(name string, leaseMS, ttlMS uint64) LockInfo {
	return LockInfo{Name: name, ID: "01JAAAAAAAAAAAAAAAAAAAAAAA", Node: 1, Fence: 7, LeaseMS: leaseMS, TTLMS: ttlMS}
}

func grant(w http.ResponseWriter, name string, leaseMS, ttlMS, servedMS uint64) {
	l := lockJSON(name, leaseMS, ttlMS)
	answer(w, 200, map[string]interface{}{"lock": l, "served_ms": servedMS})
}

func unavailable(w http.ResponseWriter) {
	answer(w, 503, map[string]string{"error": "no_leader", "message": "no speaker"})
}

// dropConnection closes the connection without an answer: the request was
// served, its answer lost.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

// holder answers acquire by granting, renew by renewing, release by
// releasing, as a node that holds every lock asked.
func holder(leaseMS uint64) func(http.ResponseWriter, *http.Request, map[string]interface{}) {
	return func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		name, _ := body["name"].(string)
		switch r.URL.Path {
		case "/v1/locks/acquire", "/v1/locks/renew", "/v1/locks/release":
			grant(w, name, leaseMS, leaseMS, 0)
		default:
			answer(w, 404, map[string]string{"error": "unknown_route", "message": r.URL.Path})
		}
	}
}

// newAt is a client whose rotation starts at the first endpoint.
func newAt(t *testing.T, endpoints []string, opts ...Option) *Client {
	t.Helper()
	c, err := New(endpoints, append([]Option{WithToken(""), WithTLSCAPEM(nil)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c.t.current = 0
	return c
}

func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestScheduleIsCheckedAsAWhole(t *testing.T) {
	cases := []struct {
		lease, every, margin time.Duration
		marginSet            bool
		ok                   bool
	}{
		{time.Second, 600 * time.Millisecond, 0, false, false},                     // more than half the lease
		{time.Second, 5 * time.Millisecond, 0, false, false},                       // under 10 ms
		{time.Second, 0, 500 * time.Millisecond, true, false},                      // margin not under half
		{time.Second, 400 * time.Millisecond, 450 * time.Millisecond, true, false}, // 1.5 x every + margin > lease
		{time.Second, 400 * time.Millisecond, 350 * time.Millisecond, true, true},
		{10 * time.Second, 5 * time.Second, 4990 * time.Millisecond, true, false},
		{30 * time.Second, 0, 0, false, true}, // the defaults
		{time.Second, 0, 0, false, true},
	}
	for _, c := range cases {
		o := &acquireOptions{renewEvery: c.every, lapseMargin: c.margin, marginSet: c.marginSet}
		_, err := checkedSchedule(c.lease, o)
		if (err == nil) != c.ok {
			t.Errorf("lease %v every %v margin %v: %v", c.lease, c.every, c.margin, err)
		}
		if err != nil && !errors.Is(err, ErrBadRequest) {
			t.Errorf("%v is not ErrBadRequest", err)
		}
	}
}

func TestDefaultLapseMarginIsATenthAtMostTwoSeconds(t *testing.T) {
	for lease, want := range map[time.Duration]time.Duration{
		time.Second:      100 * time.Millisecond,
		10 * time.Second: time.Second,
		30 * time.Second: 2 * time.Second,
		time.Minute:      2 * time.Second,
	} {
		if got := askedSchedule(lease, &acquireOptions{}).margin; got != want {
			t.Errorf("lease %v: margin %v, want %v", lease, got, want)
		}
		if got := askedSchedule(lease, &acquireOptions{}).every; got != lease/3 {
			t.Errorf("lease %v: every %v, want a third", lease, got)
		}
	}
}

func TestAShorterGrantKeepsTheMarginAndShortensThePeriod(t *testing.T) {
	o := &acquireOptions{renewEvery: 3 * time.Second, lapseMargin: 500 * time.Millisecond, marginSet: true}
	s := fittedSchedule(2*time.Second, o)
	if s.margin != 500*time.Millisecond || s.every > time.Second || s.every+s.every/2+s.margin > 2*time.Second {
		t.Fatalf("fitted %+v", s)
	}
}

func TestABadScheduleSendsNothing(t *testing.T) {
	f := newFake(t, holder(1000))
	c := newAt(t, []string{f.addr()})
	_, err := c.Acquire(context.Background(), "a", WithLease(time.Second), WithRenewEvery(600*time.Millisecond))
	if !errors.Is(err, ErrBadRequest) {
		t.Fatalf("got %v", err)
	}
	if n := f.count("/v1/locks/acquire"); n != 0 {
		t.Fatalf("%d acquires sent", n)
	}
}

func TestMovesOn503AndStays(t *testing.T) {
	refusing := newFake(t, func(w http.ResponseWriter, r *http.Request, _ map[string]interface{}) { unavailable(w) })
	serving := newFake(t, holder(5000))
	c := newAt(t, []string{refusing.addr(), serving.addr()})
	l, err := c.Acquire(context.Background(), "a", WithLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if refusing.count("/v1/locks/acquire") != 1 || serving.count("/v1/locks/acquire") != 1 {
		t.Fatalf("calls: %v %v", refusing.calls, serving.calls)
	}
	// A later call goes straight to the node that served.
	_, _ = c.Get(context.Background(), "a")
	if n := refusing.count("/v1/locks/a"); n != 0 {
		t.Fatalf("the client went back to the refusing node (%d)", n)
	}
}

func TestMovesOnNoAnswer(t *testing.T) {
	serving := newFake(t, holder(5000))
	c := newAt(t, []string{deadAddr(t), serving.addr()})
	l, err := c.Acquire(context.Background(), "a", WithLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l.Release(context.Background())
	if atomic.LoadUint64(&c.t.current) != 1 {
		t.Fatalf("at %d", c.t.current)
	}
}

func TestConcurrentFailuresMoveOnOnce(t *testing.T) {
	tr := &transport{endpoints: []string{"a", "b"}, current: 4}
	tr.moveOnFrom(4)
	tr.moveOnFrom(4)
	if tr.current != 5 {
		t.Fatalf("at %d", tr.current)
	}
	tr.moveOnFrom(5)
	if tr.current != 6 {
		t.Fatalf("at %d", tr.current)
	}
}

func TestClientsStartAtEveryEndpoint(t *testing.T) {
	seen := map[uint64]int{}
	for i := 0; i < 300; i++ {
		c, err := New([]string{"a:1", "b:1", "c:1"}, WithToken(""), WithTLSCAPEM(nil))
		if err != nil {
			t.Fatal(err)
		}
		seen[c.t.current]++
	}
	if len(seen) != 3 {
		t.Fatalf("starts: %v", seen)
	}
}

func TestNoEndpointsIsBadRequest(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("got %v", err)
	}
	if _, err := New([]string{"ftp://x:1", " "}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("got %v", err)
	}
}

func TestTheRetryWindowEndsInUnavailable(t *testing.T) {
	a := newFake(t, func(w http.ResponseWriter, r *http.Request, _ map[string]interface{}) { unavailable(w) })
	b := newFake(t, func(w http.ResponseWriter, r *http.Request, _ map[string]interface{}) { unavailable(w) })
	c := newAt(t, []string{a.addr(), b.addr()}, WithRetryFor(1500*time.Millisecond))
	start := time.Now()
	_, err := c.Acquire(context.Background(), "a")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
	// Not before the window ends; the bound above only catches a call that
	// goes on retrying.
	if took := time.Since(start); took < 1500*time.Millisecond || took > 10*time.Second {
		t.Fatalf("took %v", took)
	}
	if a.count("/v1/locks/acquire") < 2 || b.count("/v1/locks/acquire") < 2 {
		t.Fatalf("not tried through both: %v %v", a.calls, b.calls)
	}
}

func TestAnAnswerLostThenUnavailableIsNoAnswer(t *testing.T) {
	var n int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, _ map[string]interface{}) {
		if atomic.AddInt32(&n, 1) == 1 {
			dropConnection(w)
			return
		}
		unavailable(w)
	})
	c := newAt(t, []string{f.addr()}, WithRetryFor(300*time.Millisecond))
	_, err := c.Acquire(context.Background(), "a")
	if !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("got %v", err)
	}
}

func TestTheRequestIDIsReusedOnRetries(t *testing.T) {
	var n int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		if atomic.AddInt32(&n, 1) == 1 {
			dropConnection(w)
			return
		}
		grant(w, "a", 5000, 5000, 0)
	})
	c := newAt(t, []string{f.addr()})
	l, err := c.Acquire(context.Background(), "a", WithLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(context.Background(), "a", WithLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	var ids []string
	for _, b := range f.bodies {
		if id, ok := b["request_id"].(string); ok {
			ids = append(ids, id)
		}
	}
	f.mu.Unlock()
	if len(ids) != 3 || ids[0] != ids[1] || ids[1] == ids[2] || len(ids[0]) != 32 {
		t.Fatalf("request ids %v", ids)
	}
	l.Release(context.Background())
	l2.Release(context.Background())
}

func TestTheLeaseIsCountedFromTheSend(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		if r.URL.Path == "/v1/locks/acquire" {
			time.Sleep(400 * time.Millisecond)
			grant(w, "a", 10000, 10000, 100)
			return
		}
		grant(w, "a", 10000, 10000, 0)
	})
	c := newAt(t, []string{f.addr()})
	before := time.Now()
	// A lease of seconds: an acquire slowed by load is not late.
	l, err := c.Acquire(context.Background(), "a", WithLease(10*time.Second))
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	ends := l.LeaseEnds()
	sentBy := f.arrivals("/v1/locks/acquire")[0] // the send was no later
	// send + served_ms + ttl_ms: not counted from the answer 400 ms later.
	if ends.Before(before.Add(10100*time.Millisecond)) || ends.After(sentBy.Add(10100*time.Millisecond)) {
		t.Fatalf("ends %v after the send", ends.Sub(before))
	}
	if !ends.Before(after.Add(10000 * time.Millisecond)) {
		t.Fatalf("counted from the answer")
	}
}

func TestTheLeaseIsNeverCountedBeyondTheLeaseAsked(t *testing.T) {
	f := newFake(t, holder(600000))
	c := newAt(t, []string{f.addr()})
	l, err := c.Acquire(context.Background(), "a", WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	// The lease asked, from the send (no later than the fake got it), not
	// the 600 s the answer says.
	sentBy := f.arrivals("/v1/locks/acquire")[0]
	if ends := l.LeaseEnds(); ends.After(sentBy.Add(10 * time.Second)) {
		t.Fatalf("counted %v", ends.Sub(sentBy))
	}
}

func TestAGrantThatArrivesLateIsGivenBack(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		if r.URL.Path == "/v1/locks/acquire" {
			time.Sleep(950 * time.Millisecond)
		}
		grant(w, "a", 1000, 1000, 0)
	})
	c := newAt(t, []string{f.addr()})
	_, err := c.Acquire(context.Background(), "a", WithLease(time.Second))
	if !errors.Is(err, ErrArrivedLate) {
		t.Fatalf("got %v", err)
	}
	waitFor(t, "released", func() bool { return f.count("/v1/locks/release") > 0 })
}

func TestANodeThatHangsLetsTheLockLapseOnTime(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		if r.URL.Path == "/v1/locks/renew" {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		// The grant is answered 500 ms after the fake got it.
		time.Sleep(500 * time.Millisecond)
		grant(w, "a", 8000, 8000, 0)
	})
	c := newAt(t, []string{f.addr()})
	start := time.Now()
	// The lapse: 8 s - 3 s = 5 s after the send.
	l, err := c.Acquire(context.Background(), "a", WithLease(8*time.Second), WithRenewEvery(time.Second),
		WithLapseMargin(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	sentBy := f.arrivals("/v1/locks/acquire")[0] // the send was no later
	// Counted from the send, not from the answer 500 ms later.
	if ends := l.LeaseEnds(); ends.Before(start.Add(8*time.Second)) || ends.After(sentBy.Add(8*time.Second)) {
		t.Fatalf("the lease ends %v after the send", ends.Sub(sentBy))
	}
	select {
	case <-l.Lost():
	case <-time.After(20 * time.Second):
		t.Fatal("not lost")
	}
	lostAt := time.Now()
	// The lapse, the margin before the lease ends: never before it; on
	// time, with 2 s of slack for a slow machine (without the margin it
	// would lapse 3 s later).
	if lostAt.Before(start.Add(4950*time.Millisecond)) || lostAt.After(sentBy.Add(7*time.Second)) {
		t.Fatalf("lost after %v", lostAt.Sub(start))
	}
	if l.Loss() != Lapsed {
		t.Fatalf("loss %v", l.Loss())
	}
	if err := l.Release(context.Background()); !errors.Is(err, ErrLost) {
		t.Fatalf("release: %v", err)
	}
}

func TestARefusedRenewalIsALoss(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		if r.URL.Path == "/v1/locks/renew" {
			answer(w, 404, map[string]string{"error": "not_held", "message": "gone"})
			return
		}
		grant(w, "a", 10000, 10000, 0)
	})
	c := newAt(t, []string{f.addr()})
	// Renewed every 200 ms; a lease of seconds, so that only the refusal
	// loses it (a client that kept trying would lapse it 9 s after the send).
	l, err := c.Acquire(context.Background(), "a", WithLease(10*time.Second), WithRenewEvery(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(8 * time.Second):
		t.Fatal("not lost")
	}
	if l.Loss() != Refused || !errors.Is(l.Check(), ErrLost) {
		t.Fatalf("loss %v", l.Loss())
	}
	if err := l.Release(context.Background()); !errors.Is(err, ErrLost) {
		t.Fatalf("release: %v", err)
	}
}

func TestAFailedRenewalIsNotALoss(t *testing.T) {
	var renewals int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		if r.URL.Path == "/v1/locks/renew" {
			switch atomic.AddInt32(&renewals, 1) % 3 {
			case 1:
				unavailable(w)
				return
			case 2:
				answer(w, 500, map[string]string{"error": "internal", "message": "a bug"})
				return
			}
		}
		grant(w, "a", 6000, 6000, 0)
	})
	c := newAt(t, []string{f.addr()})
	// Renewed every 200 ms; a lease of seconds that no stall under load lapses.
	l, err := c.Acquire(context.Background(), "a", WithLease(6*time.Second), WithRenewEvery(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	acquired := f.arrivals("/v1/locks/acquire")[0]
	// Six renewals, two of them through (the failed ones tried again), and
	// the lease counted from one sent after the grant.
	waitFor(t, "renewed six times", func() bool {
		return l.IsLost() || (atomic.LoadInt32(&renewals) >= 6 && l.LeaseEnds().After(acquired.Add(6*time.Second)))
	})
	if err := l.Check(); err != nil {
		t.Fatalf("lost after failed renewals that were retried: %v", l.Loss())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestAReleaseWhoseAnswerWasLostCountsAsReleased(t *testing.T) {
	var releases int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		if r.URL.Path == "/v1/locks/release" {
			if atomic.AddInt32(&releases, 1) == 1 {
				dropConnection(w)
				return
			}
			answer(w, 404, map[string]string{"error": "not_held", "message": "gone"})
			return
		}
		grant(w, "a", 5000, 5000, 0)
	})
	c := newAt(t, []string{f.addr()})
	l, err := c.Acquire(context.Background(), "a", WithLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	if n := atomic.LoadInt32(&releases); n != 2 {
		t.Fatalf("%d releases", n)
	}
}

func TestDoCancelsTheWorkOnLoss(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		if r.URL.Path == "/v1/locks/renew" {
			answer(w, 404, map[string]string{"error": "not_held", "message": "gone"})
			return
		}
		grant(w, "a", 10000, 10000, 0)
	})
	c := newAt(t, []string{f.addr()})
	cancelled := make(chan struct{})
	err := c.Do(context.Background(), "a", func(ctx context.Context) error {
		if LockFromContext(ctx) == nil {
			t.Error("no lock in the work's context")
		}
		<-ctx.Done()
		close(cancelled)
		return nil
	}, WithLease(10*time.Second), WithRenewEvery(200*time.Millisecond))
	if !errors.Is(err, ErrLost) {
		t.Fatalf("got %v", err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the work was not cancelled")
	}
}

func TestDoReleasesWhenTheWorkReturns(t *testing.T) {
	f := newFake(t, holder(5000))
	c := newAt(t, []string{f.addr()})
	want := errors.New("the work's own")
	if err := c.Do(context.Background(), "a", func(ctx context.Context) error { return want }); err != want {
		t.Fatalf("got %v", err)
	}
	if f.count("/v1/locks/release") != 1 {
		t.Fatal("not released")
	}
}

func TestEachFailureHasAKind(t *testing.T) {
	api := func(code string) *callError {
		return &callError{kind: callAPI, body: errorBody{Error: code, Message: "m"}}
	}
	cases := map[string]error{
		"not_held": ErrNotHeld, "kind_mismatch": ErrKindMismatch, "bad_request": ErrBadRequest,
		"too_large": ErrBadRequest, "unauthorized": ErrUnauthorized, "forbidden": ErrForbidden,
		"not_rebuilt": ErrUnavailable, "no_leader": ErrUnavailable, "upgrading": ErrUnavailable,
		"internal": ErrServer, "wrong_member": ErrServer, "disabled": ErrServer, "held": ErrReserved,
		"unknown_route": ErrUnknownRoute, "method_not_allowed": ErrUnknownRoute,
		"member_exists": ErrMembership, "would_lose_quorum": ErrMembership,
	}
	for code, kind := range cases {
		if err := refused(api(code)); !errors.Is(err, kind) {
			t.Errorf("%s: %v", code, err)
		}
	}
	if err := refused(&callError{kind: callNoAnswer, msg: "timed out"}); !errors.Is(err, ErrNoAnswer) {
		t.Error(err)
	}
	if err := refused(&callError{kind: callNotSent, msg: "connection refused"}); !errors.Is(err, ErrUnavailable) {
		t.Error(err)
	}
	held := api("held")
	l := lockJSON("a", 1, 1)
	l.Holder = "w"
	held.body.Lock = &l
	err := refused(held)
	var he *HeldError
	if !errors.Is(err, ErrHeld) || !errors.As(err, &he) || he.Lock.Holder != "w" {
		t.Errorf("held: %v", err)
	}
}

func TestHeldCarriesTheHoldersLock(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		l := lockJSON("a", 5000, 4000)
		l.Holder = "other"
		answer(w, 409, map[string]interface{}{"error": "held", "message": "held", "lock": l})
	})
	c := newAt(t, []string{f.addr()})
	_, err := c.TryAcquire(context.Background(), "a")
	var he *HeldError
	if !errors.As(err, &he) || he.Lock.Holder != "other" || !errors.Is(err, ErrHeld) {
		t.Fatalf("got %v", err)
	}
	if f.count("/v1/locks/acquire") != 1 {
		t.Fatal("a refusal was retried")
	}
}

func TestTheTokenIsSentAndReadFromTheEnvironment(t *testing.T) {
	var got atomic.Value
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		got.Store(r.Header.Get("Authorization"))
		answer(w, 404, map[string]string{"error": "not_held", "message": "free"})
	})
	t.Setenv("LEASEHOLD_TOKEN", "from-env")
	t.Setenv("OTHER_TOKEN", "other")
	for _, c := range []struct {
		opts []Option
		want string
	}{
		{nil, "Bearer from-env"},
		{[]Option{WithTokenFromEnv("OTHER_TOKEN")}, "Bearer other"},
		{[]Option{WithToken("given")}, "Bearer given"},
		{[]Option{WithToken("")}, ""},
	} {
		client, err := New([]string{f.addr()}, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Get(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
		if g := got.Load().(string); g != c.want {
			t.Errorf("sent %q, want %q", g, c.want)
		}
	}
}

func TestLockIDsAndDigests(t *testing.T) {
	hi, lo, ok := parseLockID("00000000000000000000000001")
	if !ok || hi != 0 || lo != 1 {
		t.Fatal(hi, lo, ok)
	}
	hi, lo, ok = parseLockID("7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
	if !ok || hi != ^uint64(0) || lo != ^uint64(0) {
		t.Fatal(hi, lo, ok)
	}
	if _, _, ok := parseLockID("8ZZZZZZZZZZZZZZZZZZZZZZZZZ"); ok {
		t.Fatal("overflow read")
	}
	if segment("jobs/42 x") != "jobs%2F42%20x" {
		t.Fatal(segment("jobs/42 x"))
	}
	d := "batch"
	if dataTag(nil) != 0 || dataTag(&d) == 0 {
		t.Fatal("data tag")
	}
}
