package leasehold

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// setNode grants sets and releases them in one call, or (old) answers a
// set's release 400 as a build before it did.
func setNode(old bool) func(http.ResponseWriter, *http.Request, map[string]interface{}) {
	return func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		switch r.URL.Path {
		case "/v1/locks/acquire":
			var locks []LockInfo
			for i, n := range body["names"].([]interface{}) {
				l := lockJSON(n.(string), 5000, 5000)
				l.Fence = uint64(10 + i)
				l.ID = []string{"01JAAAAAAAAAAAAAAAAAAAAAA1", "01JAAAAAAAAAAAAAAAAAAAAAA2"}[i]
				locks = append(locks, l)
			}
			answer(w, 200, map[string]interface{}{"lock": locks[0], "locks": locks, "served_ms": 0})
		case "/v1/locks/release":
			if _, ok := body["locks"]; ok && old {
				answer(w, 400, map[string]string{"error": "bad_request", "message": "name is missing"})
				return
			}
			grant(w, "x", 5000, 5000, 0)
		default:
			grant(w, "x", 5000, 5000, 0)
		}
	}
}

func TestASetIsReleasedInOneCall(t *testing.T) {
	f := newFake(t, setNode(false))
	c := newAt(t, []string{f.addr()})
	set, err := c.AcquireAll(context.Background(), []string{"a", "b"}, WithLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if fences := set.Fences(); len(fences) != 2 || fences[1] != fences[0]+1 {
		t.Fatalf("fences %v", fences)
	}
	if err := set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.count("/v1/locks/release"); n != 1 {
		t.Fatalf("%d releases", n)
	}
	f.mu.Lock()
	last := f.bodies[len(f.bodies)-1]
	f.mu.Unlock()
	if locks, _ := last["locks"].([]interface{}); len(locks) != 2 {
		t.Fatalf("released %v", last)
	}
}

func TestASetsReleaseFallsBackToOneCallPerLock(t *testing.T) {
	f := newFake(t, setNode(true))
	c := newAt(t, []string{f.addr()})
	set, err := c.AcquireAll(context.Background(), []string{"a", "b"}, WithLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.count("/v1/locks/release"); n != 3 {
		t.Fatalf("%d releases, want the set's and one per lock", n)
	}
}

func TestASessionRenewalThatMissesALockLosesIt(t *testing.T) {
	var renewals int32
	var digest atomic.Value
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		// A lease of 3 s, renewed every second: held through a stall of over a second.
		session := SessionInfo{ID: "s1", LeaseMS: 3000, TTLMS: 3000}
		switch r.URL.Path {
		case "/v1/sessions/open":
			answer(w, 200, map[string]interface{}{"session": session, "served_ms": 0})
		case "/v1/sessions/renew":
			digest.Store(body["digest"])
			a := map[string]interface{}{"session": session, "served_ms": 0}
			if atomic.AddInt32(&renewals, 1) >= 2 {
				a["held"] = []string{"00000000000000000000000002"}
			}
			answer(w, 200, a)
		case "/v1/locks/acquire":
			name := body["name"].(string)
			l := lockJSON(name, 3000, 3000)
			l.ID = map[string]string{"a": "00000000000000000000000001", "b": "00000000000000000000000002"}[name]
			l.Session = "s1"
			answer(w, 200, map[string]interface{}{"lock": l, "served_ms": 0})
		case "/v1/sessions/close":
			answer(w, 200, map[string]interface{}{"session": session, "released": 1})
		}
	})
	c := newAt(t, []string{f.addr()})
	s, err := c.OpenSession(context.Background(), SessionTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Acquire(context.Background(), "a", WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock the renewal did not find was not lost")
	}
	if a.Loss() != Refused || b.IsLost() || s.IsLost() {
		t.Fatalf("a %v, b lost %v, session lost %v", a.Loss(), b.IsLost(), s.IsLost())
	}
	if d, _ := digest.Load().(string); d != "00000000000000000000000000000003" && d != "00000000000000000000000000000002" {
		t.Fatalf("digest %q", d)
	}
	if n, err := s.Close(context.Background()); err != nil || n != 1 {
		t.Fatalf("close: %d %v", n, err)
	}
	if !errors.Is(b.Check(), ErrLost) {
		t.Fatal("a lock of a closed session still held")
	}
}

// A node that hangs does not use up the session's lease: each renewal
// attempt has a share of the time left for every endpoint not tried yet, so
// the session is renewed through the other node before it lapses.
func TestASessionRenewalMovesPastANodeThatHangs(t *testing.T) {
	session := SessionInfo{ID: "s1", LeaseMS: 3000, TTLMS: 3000}
	hang := make(chan struct{})
	defer close(hang)
	hung := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		if r.URL.Path == "/v1/sessions/renew" {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		answer(w, 200, map[string]interface{}{"session": session, "served_ms": 0})
	})
	var renewed int32
	healthy := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]interface{}) {
		if r.URL.Path == "/v1/sessions/renew" {
			atomic.AddInt32(&renewed, 1)
		}
		answer(w, 200, map[string]interface{}{"session": session, "served_ms": 0})
	})
	c := newAt(t, []string{hung.addr(), healthy.addr()})
	s, err := c.OpenSession(context.Background(), SessionTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	time.Sleep(6 * time.Second)
	if s.IsLost() || atomic.LoadInt32(&renewed) == 0 {
		t.Fatalf("session lost %v (%v), renewals through the healthy node %d", s.IsLost(), s.Loss(), renewed)
	}
}
