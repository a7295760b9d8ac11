package leasehold

import (
	"encoding/json"
	"time"
)

// LockInfo is a lock as the API shows it (docs/api.md, "A lock"). Durations
// are the API's milliseconds; TTL and Lease give them as time.Duration.
type LockInfo struct {
	Name   string `json:"name"`
	ID     string `json:"id,omitempty"`
	Node   uint64 `json:"node"`
	Holder string `json:"holder"`
	// Fence is the fencing token: pass it to what the lock protects.
	Fence   uint64 `json:"fence"`
	LeaseMS uint64 `json:"lease_ms"`
	// TTLMS is the time left as the answering node counted it.
	TTLMS      uint64  `json:"ttl_ms"`
	AcquiredAt string  `json:"acquired_at,omitempty"`
	ExpiresAt  string  `json:"expires_at,omitempty"`
	Data       *string `json:"data,omitempty"`
	// Mode is "" for an exclusive lock, "shared" or "permit".
	Mode        string `json:"mode,omitempty"`
	Permits     uint64 `json:"permits,omitempty"`
	LockDelayMS uint64 `json:"lock_delay_ms,omitempty"`
	DelayLeftMS uint64 `json:"delay_left_ms,omitempty"`
	// Others are the name's other holders (shared or permits), oldest first.
	Others  []LockInfo `json:"others,omitempty"`
	Waiters uint64     `json:"waiters,omitempty"`
	Queue   []Queued   `json:"queue,omitempty"`
	// Session is the id of the session the lock hangs off, if any.
	Session string `json:"session,omitempty"`
}

// TTL is the time left as the answering node counted it.
func (l LockInfo) TTL() time.Duration { return ms(l.TTLMS) }

// Lease is the lease granted.
func (l LockInfo) Lease() time.Duration { return ms(l.LeaseMS) }

// Queued is a request waiting for a lock.
type Queued struct {
	Holder     string   `json:"holder"`
	Node       uint64   `json:"node"`
	Since      string   `json:"since,omitempty"`
	WaitedMS   uint64   `json:"waited_ms"`
	WaitLeftMS uint64   `json:"wait_left_ms"`
	LeaseMS    uint64   `json:"lease_ms"`
	Mode       string   `json:"mode,omitempty"`
	Permits    uint64   `json:"permits,omitempty"`
	With       []string `json:"with,omitempty"`
}

// SessionInfo is a session as the API shows it.
type SessionInfo struct {
	ID        string `json:"id"`
	Node      uint64 `json:"node"`
	Holder    string `json:"holder"`
	LeaseMS   uint64 `json:"lease_ms"`
	TTLMS     uint64 `json:"ttl_ms"`
	Locks     uint64 `json:"locks,omitempty"`
	ExpiresAt string `json:"expires_at,omitempty"`
}

// Member is a cluster member as GET /v1/cluster shows it.
type Member struct {
	ID            uint64  `json:"id"`
	Addr          string  `json:"addr"`
	State         string  `json:"state"`
	Role          string  `json:"role"`
	Lag           *uint64 `json:"lag"`
	Reachable     *bool   `json:"reachable"`
	LastContactMS *uint64 `json:"last_contact_ms"`
	Protocol      *uint64 `json:"protocol"`
}

// ClusterInfo is the cluster as the node reached sees it (GET /v1/cluster).
type ClusterInfo struct {
	Node            uint64          `json:"node"`
	Leader          *uint64         `json:"leader"`
	Term            uint64          `json:"term"`
	Rebuilt         bool            `json:"rebuilt"`
	Generation      uint64          `json:"generation"`
	Members         []Member        `json:"members"`
	Changing        bool            `json:"changing"`
	LastRebuild     json.RawMessage `json:"last_rebuild,omitempty"`
	Version         string          `json:"version"`
	Protocol        uint64          `json:"protocol"`
	ProtocolOffered uint64          `json:"protocol_offered"`
	View            string          `json:"view"`
	Through         *uint64         `json:"through,omitempty"`
	SpeakerError    string          `json:"speaker_error,omitempty"`
	AtMS            uint64          `json:"at_ms"`
	Grants          uint64          `json:"grants"`
}

// The bodies and answers of the calls.

type lockRef struct {
	Name string `json:"name"`
	ID   string `json:"id"`
}

type acquireBody struct {
	Name        string   `json:"name,omitempty"`
	Names       []string `json:"names,omitempty"`
	Holder      *string  `json:"holder,omitempty"`
	LeaseMS     *uint64  `json:"lease_ms,omitempty"`
	WaitMS      *uint64  `json:"wait_ms,omitempty"`
	Data        *string  `json:"data,omitempty"`
	RequestID   string   `json:"request_id,omitempty"`
	Shared      *bool    `json:"shared,omitempty"`
	Permits     *uint64  `json:"permits,omitempty"`
	LockDelayMS *uint64  `json:"lock_delay_ms,omitempty"`
	Session     string   `json:"session,omitempty"`
}

type renewBody struct {
	Name    string  `json:"name"`
	ID      string  `json:"id"`
	LeaseMS *uint64 `json:"lease_ms,omitempty"`
	Data    *string `json:"data,omitempty"`
}

type releaseBody struct {
	Name  string    `json:"name,omitempty"`
	ID    string    `json:"id,omitempty"`
	Locks []lockRef `json:"locks,omitempty"`
}

type lockAnswer struct {
	Lock     *LockInfo  `json:"lock"`
	ServedMS uint64     `json:"served_ms"`
	Locks    []LockInfo `json:"locks,omitempty"`
	NotHeld  []lockRef  `json:"not_held,omitempty"`
}

// Listing is a listing as the API answers it (Client.Listing).
type Listing struct {
	// Locks are the locks held under the prefix, in name order.
	Locks []LockInfo `json:"locks"`
	// Total is how many are held under the prefix in all (nil where the
	// node does not tell: a token of --acl).
	Total *uint64 `json:"total,omitempty"`
	// Awaited are the free names under the prefix that requests wait for,
	// in name order.
	Awaited []Awaited `json:"awaited,omitempty"`
}

// Awaited is a name nobody holds that requests wait for, kept free for
// them (a set waiting for all its names).
type Awaited struct {
	Name    string   `json:"name"`
	Waiters uint64   `json:"waiters"`
	Queue   []Queued `json:"queue"`
}

type sessionOpenBody struct {
	Holder *string `json:"holder,omitempty"`
	TTLMS  *uint64 `json:"ttl_ms,omitempty"`
}

type sessionBody struct {
	ID     string  `json:"id"`
	TTLMS  *uint64 `json:"ttl_ms,omitempty"`
	Digest string  `json:"digest,omitempty"`
}

type sessionAnswer struct {
	Session  *SessionInfo `json:"session"`
	ServedMS uint64       `json:"served_ms"`
	Held     *[]string    `json:"held,omitempty"`
	Released *uint64      `json:"released,omitempty"`
}

type errorBody struct {
	Error   string    `json:"error"`
	Message string    `json:"message"`
	Lock    *LockInfo `json:"lock,omitempty"`
}

func ms(n uint64) time.Duration {
	const max = uint64(1<<63-1) / uint64(time.Millisecond)
	if n > max {
		n = max
	}
	return time.Duration(n) * time.Millisecond
}

func millis(d time.Duration) uint64 {
	if d < 0 {
		return 0
	}
	return uint64(d / time.Millisecond)
}

func u64p(v uint64) *uint64 { return &v }
