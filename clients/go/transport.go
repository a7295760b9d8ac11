package leasehold

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// How long an idle connection is kept: under the nodes' 30 s, as the Rust
// client keeps them (20 s).
const idleKept = 20 * time.Second

// How long a connection may take to be made.
const connectTimeout = 2 * time.Second

// The most of an answer read.
const maxAnswerBytes = 16 << 20

type callKind int

const (
	// A node answered with an error.
	callAPI callKind = iota
	// No node answered (timed out, or the connection broke after the
	// request was sent): the outcome is unknown.
	callNoAnswer
	// The request never reached a node (the connection could not be
	// made): nothing was done.
	callNotSent
	// The caller's context ended.
	callCancelled
)

// callError is a call that failed, as the transport saw it.
type callError struct {
	kind callKind
	body errorBody
	msg  string
	ctx  error
}

func (e *callError) Error() string {
	switch e.kind {
	case callAPI:
		return e.body.Error + ": " + e.body.Message
	case callNoAnswer:
		return "no answer: " + e.msg
	case callNotSent:
		return "not sent: " + e.msg
	}
	return e.msg
}

func (e *callError) code() string {
	if e == nil || e.kind != callAPI {
		return ""
	}
	return e.body.Error
}

// The codes a node answers (docs/api.md, "Errors").
var knownCodes = map[string]bool{
	"bad_request": true, "held": true, "kind_mismatch": true, "not_held": true,
	"not_rebuilt": true, "no_leader": true, "unauthorized": true, "forbidden": true,
	"wrong_member": true, "too_large": true, "internal": true, "unknown_route": true,
	"method_not_allowed": true, "disabled": true, "unknown_member": true,
	"member_exists": true, "change_in_progress": true, "would_lose_quorum": true,
	"not_caught_up": true, "upgrading": true, "in_session": true,
}

// retryableCode: a code that says "not now, maybe elsewhere".
func retryableCode(code string) bool {
	switch code {
	case "not_rebuilt", "no_leader", "not_caught_up", "upgrading":
		return true
	}
	return false
}

// retryable: worth trying again through another node.
func retryable(e *callError) bool {
	switch e.kind {
	case callNoAnswer, callNotSent:
		return true
	case callAPI:
		return retryableCode(e.body.Error)
	}
	return false
}

// refused turns a failed call into the error the caller sees.
func refused(e *callError) error {
	switch e.kind {
	case callNoAnswer:
		return &Error{Kind: ErrNoAnswer, Message: e.msg}
	case callNotSent:
		return &Error{Kind: ErrUnavailable, Message: e.msg}
	case callCancelled:
		return e.ctx
	}
	b := e.body
	var kind error
	switch b.Error {
	case "held":
		if b.Lock == nil {
			return &Error{Kind: ErrReserved, Code: b.Error, Message: b.Message}
		}
		return &HeldError{Lock: *b.Lock}
	case "not_held":
		kind = ErrNotHeld
	case "kind_mismatch":
		kind = ErrKindMismatch
	case "bad_request", "too_large", "in_session":
		kind = ErrBadRequest
	case "unauthorized":
		kind = ErrUnauthorized
	case "forbidden":
		kind = ErrForbidden
	case "not_rebuilt", "no_leader", "not_caught_up", "upgrading":
		kind = ErrUnavailable
	case "unknown_route", "method_not_allowed":
		kind = ErrUnknownRoute
	case "unknown_member", "member_exists", "change_in_progress", "would_lose_quorum":
		kind = ErrMembership
	default: // wrong_member, internal, disabled
		kind = ErrServer
	}
	return &Error{Kind: kind, Code: b.Error, Message: b.Message}
}

// transport is the API over HTTP, to whichever of several endpoints answers.
type transport struct {
	endpoints []string
	current   uint64
	http      *http.Client
	token     string
}

func newTransport(endpoints []string, token string, ca *x509.CertPool) (*transport, error) {
	scheme := "http://"
	if ca != nil {
		scheme = "https://"
	}
	var list []string
	for _, e := range endpoints {
		e = strings.TrimRight(strings.TrimSpace(e), "/")
		if !strings.Contains(e, "://") {
			e = scheme + e
		}
		if i := strings.Index(e, "://"); e[i+3:] == "" {
			continue
		}
		list = append(list, e)
	}
	if len(list) == 0 {
		return nil, badRequest("no endpoints given")
	}
	for _, e := range list {
		u, err := url.Parse(e)
		if err != nil {
			return nil, badRequest("%q is not an endpoint (host:port, or http(s)://host:port): %v", e, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
			return nil, badRequest("%q is not an endpoint (host:port, or http(s)://host:port): it has no host, or is not http(s)", e)
		}
	}
	if strings.ContainsAny(token, "\r\n\x00") {
		return nil, badRequest("the token is not a valid header value")
	}
	dialer := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     idleKept,
		TLSHandshakeTimeout: connectTimeout,
	}
	if ca != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: ca, MinVersion: tls.VersionTLS12}
	}
	return &transport{
		endpoints: list,
		current:   randomBelow(uint64(len(list))),
		http:      &http.Client{Transport: tr},
		token:     token,
	}, nil
}

// moveOnFrom moves the rotation on from place at, unless another caller
// that failed there moved it already: callers failing at once move it once.
func (t *transport) moveOnFrom(at uint64) {
	atomic.CompareAndSwapUint64(&t.current, at, at+1)
}

// send makes one call to the current endpoint. A call the endpoint did not
// serve (no answer, or an error worth retrying elsewhere) moves the rotation
// on from that endpoint.
func (t *transport) send(ctx context.Context, method, path string, body interface{}, timeout time.Duration, out interface{}) *callError {
	at := atomic.LoadUint64(&t.current)
	base := t.endpoints[at%uint64(len(t.endpoints))]
	err := t.exchange(ctx, method, base+path, body, timeout, out)
	served := err == nil
	if err != nil && err.kind == callAPI {
		switch err.body.Error {
		case "held", "not_held", "bad_request", "too_large":
			served = true
		}
	}
	if !served && err.kind != callCancelled {
		t.moveOnFrom(at)
	}
	return err
}

func (t *transport) exchange(ctx context.Context, method, target string, body interface{}, timeout time.Duration, out interface{}) *callError {
	if timeout <= 0 {
		timeout = time.Millisecond
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return &callError{kind: callNotSent, msg: err.Error()}
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(cctx, method, target, reader)
	if err != nil {
		return &callError{kind: callNotSent, msg: err.Error()}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if t.token != "" {
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	resp, err := t.http.Do(req)
	if err != nil {
		return t.failed(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		if ctx.Err() != nil {
			return &callError{kind: callCancelled, msg: ctx.Err().Error(), ctx: ctx.Err()}
		}
		return &callError{kind: callNoAnswer, msg: describe(err)}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				return &callError{kind: callNoAnswer, msg: "unreadable answer: " + err.Error()}
			}
		}
		return nil
	}
	var eb errorBody
	if err := json.Unmarshal(data, &eb); err != nil || eb.Error == "" {
		if err == nil {
			err = errors.New("no error code")
		}
		return &callError{kind: callNoAnswer, msg: fmt.Sprintf("unreadable error answer (%d): %v", resp.StatusCode, err)}
	}
	if !knownCodes[eb.Error] {
		// A code this client does not know: judged by its status.
		code := "internal"
		switch {
		case resp.StatusCode == 503:
			code = "no_leader"
		case resp.StatusCode >= 400 && resp.StatusCode < 500:
			code = "bad_request"
		}
		eb = errorBody{Error: code, Message: eb.Error + ": " + eb.Message}
	}
	return &callError{kind: callAPI, body: eb}
}

// failed classifies a request that got no answer.
func (t *transport) failed(ctx context.Context, err error) *callError {
	if ctx.Err() != nil {
		return &callError{kind: callCancelled, msg: ctx.Err().Error(), ctx: ctx.Err()}
	}
	msg := describe(err)
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &callError{kind: callNotSent, msg: msg}
	}
	if strings.HasPrefix(msg, "TLS handshake failed") {
		return &callError{kind: callNotSent, msg: msg}
	}
	return &callError{kind: callNoAnswer, msg: msg}
}

// describe names what went wrong as an operator reads it first.
func describe(err error) string {
	all := err.Error()
	lower := strings.ToLower(all)
	var named string
	var netErr net.Error
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	switch {
	case strings.Contains(lower, "connection refused"):
		named = "connection refused"
	case errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalid),
		errors.As(err, &record), strings.Contains(lower, "tls:"), strings.Contains(lower, "x509:"):
		named = "TLS handshake failed"
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		named = "timed out"
	case strings.Contains(lower, "no such host"):
		named = "the host name does not resolve"
	}
	if named == "" {
		return all
	}
	return named + " (" + all + ")"
}

// segment percent-encodes a name as one path segment.
func segment(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// The calls.

func (t *transport) acquire(ctx context.Context, body acquireBody, timeout time.Duration) (*lockAnswer, *callError) {
	var a lockAnswer
	if err := t.send(ctx, http.MethodPost, "/v1/locks/acquire", body, timeout, &a); err != nil {
		return nil, err
	}
	if a.Lock == nil {
		return nil, &callError{kind: callNoAnswer, msg: "unreadable answer: no lock"}
	}
	if len(a.Locks) == 0 {
		a.Locks = []LockInfo{*a.Lock}
	}
	return &a, nil
}

func (t *transport) release(ctx context.Context, body releaseBody, timeout time.Duration) (*lockAnswer, *callError) {
	var a lockAnswer
	if err := t.send(ctx, http.MethodPost, "/v1/locks/release", body, timeout, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

func (t *transport) renew(ctx context.Context, body renewBody, timeout time.Duration) (*LockInfo, *callError) {
	var a lockAnswer
	if err := t.send(ctx, http.MethodPost, "/v1/locks/renew", body, timeout, &a); err != nil {
		return nil, err
	}
	if a.Lock == nil {
		return nil, &callError{kind: callNoAnswer, msg: "unreadable answer: no lock"}
	}
	return a.Lock, nil
}

// get answers the lock, or nil when the name is free.
func (t *transport) get(ctx context.Context, path string, timeout time.Duration) (*LockInfo, *callError) {
	var a lockAnswer
	if err := t.send(ctx, http.MethodGet, path, nil, timeout, &a); err != nil {
		if err.code() == "not_held" {
			return nil, nil
		}
		return nil, err
	}
	return a.Lock, nil
}

func (t *transport) session(ctx context.Context, path string, body interface{}, timeout time.Duration) (*sessionAnswer, *callError) {
	var a sessionAnswer
	if err := t.send(ctx, http.MethodPost, path, body, timeout, &a); err != nil {
		return nil, err
	}
	if a.Session == nil {
		return nil, &callError{kind: callNoAnswer, msg: "unreadable answer: no session"}
	}
	return &a, nil
}
