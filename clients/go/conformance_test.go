package leasehold_test

// The conformance runner: performs every scenario of
// ../conformance/scenarios.json with this client against a real cluster
// (clients/conformance/README.md says how).

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

type scenarioFile struct {
	Version   int        `json:"version"`
	Scenarios []scenario `json:"scenarios"`
}

type scenario struct {
	ID      string            `json:"id"`
	Covers  string            `json:"covers"`
	Cluster *clusterSpec      `json:"cluster"`
	Env     map[string]string `json:"env"`
	Steps   []step            `json:"steps"`
}

type clusterSpec struct {
	Nodes     int      `json:"nodes"`
	TLS       bool     `json:"tls"`
	ACL       *string  `json:"acl"`
	ServeArgs []string `json:"serve_args"`
}

type step map[string]interface{}

// The error kinds expect names.
var kinds = map[string]error{
	"Held":         leasehold.ErrHeld,
	"Reserved":     leasehold.ErrReserved,
	"NotHeld":      leasehold.ErrNotHeld,
	"KindMismatch": leasehold.ErrKindMismatch,
	"Lost":         leasehold.ErrLost,
	"ArrivedLate":  leasehold.ErrArrivedLate,
	"Unavailable":  leasehold.ErrUnavailable,
	"NoAnswer":     leasehold.ErrNoAnswer,
	"Unauthorized": leasehold.ErrUnauthorized,
	"Forbidden":    leasehold.ErrForbidden,
	"Server":       leasehold.ErrServer,
	"BadRequest":   leasehold.ErrBadRequest,
	"Membership":   leasehold.ErrMembership,
	"UnknownRoute": leasehold.ErrUnknownRoute,
}

// leaseholdBinary finds the binary: $LEASEHOLD_BIN, else the repository's
// target/debug, then target/release.
func leaseholdBinary() (string, error) {
	if bin := os.Getenv("LEASEHOLD_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("LEASEHOLD_BIN=%s: %v", bin, err)
		}
		return filepath.Abs(bin)
	}
	for _, p := range []string{"../../target/debug/leasehold", "../../target/release/leasehold"} {
		if _, err := os.Stat(p); err == nil {
			return filepath.Abs(p)
		}
	}
	return "", errors.New("no leasehold binary: set LEASEHOLD_BIN, or build target/debug/leasehold")
}

func TestConformance(t *testing.T) {
	raw, err := os.ReadFile("../conformance/scenarios.json")
	if err != nil {
		t.Fatalf("the conformance suite: %v", err)
	}
	var file scenarioFile
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("../conformance/scenarios.json: %v", err)
	}
	bin, err := leaseholdBinary()
	if err != nil {
		t.Fatal(err)
	}
	only := os.Getenv("CONFORMANCE_ONLY")
	ran := 0
	for _, sc := range file.Scenarios {
		sc := sc
		if only != "" && !strings.Contains(sc.ID, only) {
			continue
		}
		ran++
		t.Run(sc.ID, func(t *testing.T) { runScenario(t, bin, sc) })
	}
	if ran == 0 {
		t.Fatalf("no scenario's id contains CONFORMANCE_ONLY=%q", only)
	}
}

// held is what a lock step binds: a lock, a set, or a leadership.
type held struct {
	lock *leasehold.Lock
	set  *leasehold.LockSet
}

func (h held) info() leasehold.LockInfo {
	if h.set != nil {
		return h.set.Infos()[0]
	}
	return h.lock.Info()
}

func (h held) lost() <-chan struct{} {
	if h.set != nil {
		return h.set.Lost()
	}
	return h.lock.Lost()
}

func (h held) loss() leasehold.Loss {
	if h.set != nil {
		return h.set.Loss()
	}
	return h.lock.Loss()
}

func (h held) check() error {
	if h.set != nil {
		return h.set.Check()
	}
	return h.lock.Check()
}

func (h held) release(ctx context.Context) error {
	if h.set != nil {
		return h.set.Release(ctx)
	}
	return h.lock.Release(ctx)
}

type outcome struct {
	held held
	err  error
}

type observer struct {
	mu     sync.Mutex
	values []*string
}

type runner struct {
	t        *testing.T
	bin      string
	dir      string
	upDir    string
	tls      bool
	up       *exec.Cmd
	upDone   chan struct{}
	nodes    map[uint64]string
	ids      []uint64
	ctx      context.Context
	clients  map[string]*leasehold.Client
	locks    map[string]held
	sessions map[string]*leasehold.Session
	bg       map[string]chan outcome
	began    map[string]time.Time
	vars     map[string]interface{}
	obs      map[string]*observer
	paused   map[string]bool
}

func runScenario(t *testing.T, bin string, sc scenario) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &runner{
		t: t, bin: bin, ctx: ctx,
		clients:  map[string]*leasehold.Client{},
		locks:    map[string]held{},
		sessions: map[string]*leasehold.Session{},
		bg:       map[string]chan outcome{},
		began:    map[string]time.Time{},
		vars:     map[string]interface{}{},
		obs:      map[string]*observer{},
		paused:   map[string]bool{},
	}
	for k, v := range sc.Env {
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		defer func(k, old string, had bool) {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		}(k, old, had)
	}
	defer r.stop()
	if err := r.start(sc.Cluster); err != nil {
		t.Fatalf("%s: the cluster did not start: %v%s", sc.ID, err, r.logTail())
	}
	for i, s := range sc.Steps {
		if err := r.step(s); err != nil {
			t.Fatalf("%s: step %d (%s) failed: %v", sc.ID, i, describeStep(s), err)
		}
	}
}

func describeStep(s step) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// start starts the scenario's cluster and waits until every node is ready.
func (r *runner) start(spec *clusterSpec) error {
	dir, err := os.MkdirTemp("", "leasehold-conformance-")
	if err != nil {
		return err
	}
	r.dir = dir
	r.upDir = filepath.Join(dir, "up")
	nodes := 3
	var serve []string
	if spec != nil {
		if spec.Nodes > 0 {
			nodes = spec.Nodes
		}
		if spec.TLS {
			r.tls = true
			tlsDir := filepath.Join(dir, "tls")
			out, err := exec.Command("bash", "../../scripts/make-certs", tlsDir, "node").CombinedOutput()
			if err != nil {
				return fmt.Errorf("make-certs: %v: %s", err, out)
			}
		}
		serve = append(serve, spec.ServeArgs...)
		if spec.ACL != nil {
			p := filepath.Join(dir, "acl.toml")
			if err := os.WriteFile(p, []byte(*spec.ACL), 0o600); err != nil {
				return err
			}
			serve = append(serve, "--acl", p)
		}
		if spec.TLS {
			tlsDir := filepath.Join(dir, "tls")
			serve = append(serve, "--tls-cert", filepath.Join(tlsDir, "node.pem"),
				"--tls-key", filepath.Join(tlsDir, "node-key.pem"), "--tls-ca", filepath.Join(tlsDir, "ca.pem"))
		}
	}
	args := []string{"up", "--nodes", strconv.Itoa(nodes), "--base-port", "0", "--data-dir", r.upDir}
	if len(serve) > 0 {
		args = append(append(args, "--"), serve...)
	}
	logFile, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(r.bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	r.up = cmd
	r.upDone = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(r.upDone)
	}()
	deadline := time.Now().Add(30 * time.Second)
	// up.json names the nodes.
	for {
		if err := r.readUp(); err == nil && len(r.nodes) == nodes {
			break
		}
		select {
		case <-r.upDone:
			return fmt.Errorf("leasehold up exited (%v)", cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s/up.json naming %d nodes within 30 s", r.upDir, nodes)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every node ready.
	httpClient := &http.Client{Timeout: time.Second}
	scheme := "http"
	if r.tls {
		pool := x509.NewCertPool()
		pem, err := os.ReadFile(r.caFile())
		if err != nil {
			return err
		}
		pool.AppendCertsFromPEM(pem)
		httpClient.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
		scheme = "https"
	}
	defer httpClient.CloseIdleConnections()
	for _, id := range r.ids {
		for {
			resp, err := httpClient.Get(fmt.Sprintf("%s://%s/readyz", scheme, r.nodes[id]))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			select {
			case <-r.upDone:
				return fmt.Errorf("leasehold up exited (%v)", cmd.ProcessState)
			default:
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("node %d (%s) not ready within 30 s: %v", id, r.nodes[id], err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func (r *runner) caFile() string { return filepath.Join(r.dir, "tls", "ca.pem") }

func (r *runner) readUp() error {
	raw, err := os.ReadFile(filepath.Join(r.upDir, "up.json"))
	if err != nil {
		return err
	}
	var up struct {
		Nodes map[string]struct {
			Addr string `json:"addr"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(raw, &up); err != nil {
		return err
	}
	nodes := map[uint64]string{}
	var ids []uint64
	for k, v := range up.Nodes {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			return err
		}
		_, port, err := net.SplitHostPort(v.Addr)
		if err != nil || port == "0" {
			return fmt.Errorf("node %d has no port yet", id)
		}
		nodes[id] = v.Addr
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	r.nodes, r.ids = nodes, ids
	return nil
}

// stop resumes what the scenario left paused, stops up (SIGTERM, then
// SIGKILL after 10 s) and removes the directory.
func (r *runner) stop() {
	if r.up != nil {
		for n := range r.paused {
			_ = r.chaos([]string{"resume", n})
		}
		_ = r.up.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.upDone:
		case <-time.After(10 * time.Second):
			_ = r.up.Process.Kill()
			<-r.upDone
		}
	}
	if r.t.Failed() {
		r.t.Log(r.logTail())
	}
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

func (r *runner) logTail() string {
	if r.dir == "" {
		return ""
	}
	raw, err := os.ReadFile(filepath.Join(r.dir, "up.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "\nleasehold up said:\n" + strings.Join(lines, "\n")
}

// chaos runs `leasehold chaos ARGS...` against the scenario's cluster.
func (r *runner) chaos(args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, append([]string{"chaos"}, args...)...)
	cmd.Env = append(os.Environ(), "LEASEHOLD_UP="+r.upDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("leasehold chaos %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	switch {
	case len(args) == 2 && args[0] == "pause":
		r.paused[args[1]] = true
	case len(args) == 2 && (args[0] == "resume" || args[0] == "kill" || args[0] == "restart"):
		delete(r.paused, args[1])
	}
	return nil
}

// Reading a step's fields.

func (s step) str(k string) string {
	v, _ := s[k].(string)
	return v
}

func (s step) has(k string) bool {
	_, ok := s[k]
	return ok
}

func (s step) num(k string) float64 {
	v, _ := s[k].(float64)
	return v
}

func (s step) ms(k string) time.Duration {
	return time.Duration(s.num(k) * float64(time.Millisecond))
}

func (s step) boolean(k string) bool {
	v, _ := s[k].(bool)
	return v
}

// resolve resolves the placeholders of a value.
func (r *runner) resolve(v interface{}) (interface{}, error) {
	switch v := v.(type) {
	case []interface{}:
		out := make([]interface{}, 0, len(v))
		for _, e := range v {
			e, err := r.resolve(e)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	case string:
		if !strings.HasPrefix(v, "{") || !strings.HasSuffix(v, "}") {
			return v, nil
		}
		inner := v[1 : len(v)-1]
		switch {
		case strings.HasPrefix(inner, "node:"):
			h, ok := r.locks[inner[5:]]
			if !ok {
				return nil, fmt.Errorf("%s: no lock bound to %q", v, inner[5:])
			}
			return float64(h.info().Node), nil
		case strings.HasPrefix(inner, "var:"):
			x, ok := r.vars[inner[4:]]
			if !ok {
				return nil, fmt.Errorf("%s: nothing remembered as %q", v, inner[4:])
			}
			return x, nil
		case inner == "nodes":
			out := []interface{}{}
			for _, id := range r.ids {
				out = append(out, float64(id))
			}
			return out, nil
		case inner == "speaker" || inner == "followers":
			speaker, err := r.speaker()
			if err != nil {
				return nil, err
			}
			if inner == "speaker" {
				return float64(speaker), nil
			}
			out := []interface{}{}
			for _, id := range r.ids {
				if id != speaker {
					out = append(out, float64(id))
				}
			}
			return out, nil
		}
		return nil, fmt.Errorf("unknown placeholder %s", v)
	}
	return v, nil
}

// speaker is the speaker's node id, read with the client's Cluster call
// through node 1, retried for up to 10 s until one is named.
func (r *runner) speaker() (uint64, error) {
	opts := []leasehold.Option{leasehold.WithToken("")}
	if r.tls {
		opts = append(opts, leasehold.WithTLSCAFile(r.caFile()))
	}
	c, err := leasehold.New([]string{r.nodes[r.ids[0]]}, opts...)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Cluster(r.ctx)
		if err == nil && info.Leader != nil {
			return *info.Leader, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no speaker named within 10 s (%v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func text(v interface{}) string {
	switch v := v.(type) {
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		return v
	}
	return fmt.Sprint(v)
}

func (r *runner) client(s step, k string) (*leasehold.Client, error) {
	c, ok := r.clients[s.str(k)]
	if !ok {
		return nil, fmt.Errorf("no client %q", s.str(k))
	}
	return c, nil
}

func (r *runner) lock(s step, k string) (held, error) {
	h, ok := r.locks[s.str(k)]
	if !ok {
		return held{}, fmt.Errorf("no lock bound to %q", s.str(k))
	}
	return h, nil
}

// expect compares a call's outcome with the step's expect ("ok" by
// default, or an error kind).
func expect(s step, err error) error {
	want := "ok"
	if s.has("expect") {
		want = s.str("expect")
	}
	if want == "ok" {
		if err != nil {
			return fmt.Errorf("expected success, got %v", err)
		}
		return nil
	}
	kind, ok := kinds[want]
	if !ok {
		return fmt.Errorf("unknown error kind %q", want)
	}
	if err == nil {
		return fmt.Errorf("expected %s, got success", want)
	}
	if !errors.Is(err, kind) {
		return fmt.Errorf("expected %s, got %v", want, err)
	}
	return nil
}

func (r *runner) step(s step) error {
	do := s.str("do")
	began := time.Now()
	if as := s.str("as"); as != "" {
		r.began[as] = began
	}
	switch do {
	case "client":
		return r.doClient(s)
	case "acquire":
		return r.doAcquire(s, began)
	case "await":
		return r.doAwait(s)
	case "release":
		h, err := r.lock(s, "lock")
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		defer cancel()
		return expect(s, h.release(ctx))
	case "release_by_id":
		c, err := r.client(s, "client")
		if err != nil {
			return err
		}
		h, err := r.lock(s, "lock")
		if err != nil {
			return err
		}
		info := h.info()
		_, err = c.Release(r.ctx, info.Name, info.ID)
		return expect(s, err)
	case "held":
		h, err := r.lock(s, "lock")
		if err != nil {
			return err
		}
		if err := h.check(); err != nil {
			return fmt.Errorf("the lock is not held: %v (loss %v)", err, h.loss())
		}
		return nil
	case "lost":
		return r.doLost(s)
	case "mark":
		r.began[s.str("as")] = began
		return nil
	case "remember":
		v, err := r.resolve(s["value"])
		if err != nil {
			return err
		}
		r.vars[s.str("as")] = v
		return nil
	case "get":
		return r.doGet(s, began)
	case "same_fence", "fence_above":
		a, err := r.lock(s, "a")
		if err != nil {
			return err
		}
		b, err := r.lock(s, "b")
		if err != nil {
			return err
		}
		fa, fb := a.info().Fence, b.info().Fence
		if do == "same_fence" && fa != fb {
			return fmt.Errorf("fences differ: %d and %d", fa, fb)
		}
		if do == "fence_above" && fa <= fb {
			return fmt.Errorf("fence %d is not above %d", fa, fb)
		}
		return nil
	case "node_is_not":
		h, err := r.lock(s, "lock")
		if err != nil {
			return err
		}
		v, err := r.resolve(s["node"])
		if err != nil {
			return err
		}
		if node := h.info().Node; text(float64(node)) == text(v) {
			return fmt.Errorf("the lock is still recorded at node %d", node)
		}
		return nil
	case "sleep":
		time.Sleep(s.ms("ms"))
		return nil
	case "list":
		return r.doList(s, began)
	case "with_lock":
		return r.doWithLock(s)
	case "open_session":
		c, err := r.client(s, "client")
		if err != nil {
			return err
		}
		var opts []leasehold.SessionOption
		if s.has("ttl_ms") {
			opts = append(opts, leasehold.SessionTTL(s.ms("ttl_ms")))
		}
		sess, err := c.OpenSession(r.ctx, opts...)
		if err == nil {
			r.sessions[s.str("as")] = sess
		}
		return expect(s, err)
	case "close_session":
		sess, ok := r.sessions[s.str("session")]
		if !ok {
			return fmt.Errorf("no session %q", s.str("session"))
		}
		_, err := sess.Close(r.ctx)
		return expect(s, err)
	case "campaign":
		return r.doCampaign(s)
	case "resign":
		h, err := r.lock(s, "lock")
		if err != nil {
			return err
		}
		return expect(s, h.lock.Release(r.ctx))
	case "leader":
		c, err := r.client(s, "client")
		if err != nil {
			return err
		}
		lock, lerr := c.Leader(r.ctx, s.str("name"))
		if err := expect(s, lerr); err != nil || lerr != nil || !s.has("value") {
			return err
		}
		var got interface{}
		if lock != nil {
			if lock.Data != nil {
				got = *lock.Data
			} else {
				got = ""
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(s["value"]) || (got == nil) != (s["value"] == nil) {
			return fmt.Errorf("the leader's value is %v, not %v", got, s["value"])
		}
		return nil
	case "observe":
		c, err := r.client(s, "client")
		if err != nil {
			return err
		}
		o := &observer{}
		r.obs[s.str("as")] = o
		ch := c.Observe(r.ctx, s.str("name"))
		go func() {
			for ob := range ch {
				if ob.Err != nil {
					continue
				}
				o.mu.Lock()
				o.values = append(o.values, ob.Value())
				o.mu.Unlock()
			}
		}()
		return nil
	case "observed":
		return r.doObserved(s)
	case "chaos":
		return r.doChaos(s["args"])
	}
	return fmt.Errorf("this runner does not implement step %q", do)
}

func (r *runner) doChaos(rawArgs interface{}) error {
	resolved, err := r.resolve(rawArgs)
	if err != nil {
		return err
	}
	list, ok := resolved.([]interface{})
	if !ok {
		return fmt.Errorf("chaos args %v are not a list", rawArgs)
	}
	// An argument that is a list runs the command once per element.
	runs := [][]string{{}}
	for _, a := range list {
		if many, ok := a.([]interface{}); ok {
			var next [][]string
			for _, run := range runs {
				for _, e := range many {
					next = append(next, append(append([]string(nil), run...), text(e)))
				}
			}
			runs = next
			continue
		}
		for i := range runs {
			runs[i] = append(runs[i], text(a))
		}
	}
	for _, args := range runs {
		if err := r.chaos(args); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) doClient(s step) error {
	var endpoints []string
	switch e := s["endpoints"].(type) {
	case string:
		if e != "all" {
			return fmt.Errorf("endpoints %q", e)
		}
		for _, id := range r.ids {
			endpoints = append(endpoints, r.nodes[id])
		}
	case []interface{}:
		for _, x := range e {
			name, _ := x.(string)
			switch {
			case name == "dead":
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return err
				}
				endpoints = append(endpoints, l.Addr().String())
				l.Close()
			case name == "all":
				for _, id := range r.ids {
					endpoints = append(endpoints, r.nodes[id])
				}
			case strings.HasPrefix(name, "node:"):
				id, err := strconv.ParseUint(name[5:], 10, 64)
				if err != nil || r.nodes[id] == "" {
					return fmt.Errorf("no node %q", name)
				}
				endpoints = append(endpoints, r.nodes[id])
			default:
				return fmt.Errorf("endpoint %q", name)
			}
		}
	default:
		return fmt.Errorf("endpoints %v", s["endpoints"])
	}
	opts := []leasehold.Option{leasehold.WithToken(""), leasehold.WithTLSCAPEM(nil)}
	if env := s.str("token_env"); env != "" {
		opts = append(opts, leasehold.WithTokenFromEnv(env))
	}
	if s.boolean("tls") {
		opts = append(opts, leasehold.WithTLSCAFile(r.caFile()))
	}
	if s.has("retry_for_ms") {
		opts = append(opts, leasehold.WithRetryFor(s.ms("retry_for_ms")))
	}
	c, err := leasehold.New(endpoints, opts...)
	if err != nil {
		return err
	}
	r.clients[s.str("as")] = c
	return nil
}

func (r *runner) acquireOptions(s step) ([]leasehold.AcquireOption, error) {
	var opts []leasehold.AcquireOption
	if s.has("lease_ms") {
		opts = append(opts, leasehold.WithLease(s.ms("lease_ms")))
	}
	if s.has("wait_ms") {
		opts = append(opts, leasehold.WithWait(s.ms("wait_ms")))
	}
	if s.has("renew_every_ms") {
		opts = append(opts, leasehold.WithRenewEvery(s.ms("renew_every_ms")))
	}
	if s.has("lapse_margin_ms") {
		opts = append(opts, leasehold.WithLapseMargin(s.ms("lapse_margin_ms")))
	}
	if s.has("lock_delay_ms") {
		opts = append(opts, leasehold.WithLockDelay(s.ms("lock_delay_ms")))
	}
	if s.has("holder") {
		opts = append(opts, leasehold.WithHolder(s.str("holder")))
	}
	if s.has("data") {
		opts = append(opts, leasehold.WithData(s.str("data")))
	}
	if s.boolean("shared") {
		opts = append(opts, leasehold.WithShared())
	}
	if s.has("permits") {
		opts = append(opts, leasehold.WithPermits(uint64(s.num("permits"))))
	}
	if s.has("session") {
		sess, ok := r.sessions[s.str("session")]
		if !ok {
			return nil, fmt.Errorf("no session %q", s.str("session"))
		}
		opts = append(opts, leasehold.WithSession(sess))
	}
	return opts, nil
}

func (r *runner) doAcquire(s step, began time.Time) error {
	c, err := r.client(s, "client")
	if err != nil {
		return err
	}
	opts, err := r.acquireOptions(s)
	if err != nil {
		return err
	}
	call := func() outcome {
		if names, ok := s["names"].([]interface{}); ok {
			var list []string
			for _, n := range names {
				list = append(list, text(n))
			}
			set, err := c.AcquireAll(r.ctx, list, opts...)
			return outcome{held: held{set: set}, err: err}
		}
		var l *leasehold.Lock
		var err error
		if s.num("wait_ms") == 0 {
			l, err = c.TryAcquire(r.ctx, s.str("name"), opts...)
		} else {
			l, err = c.Acquire(r.ctx, s.str("name"), opts...)
		}
		return outcome{held: held{lock: l}, err: err}
	}
	if s.boolean("background") {
		ch := make(chan outcome, 1)
		r.bg[s.str("as")] = ch
		go func() { ch <- call() }()
		return nil
	}
	out := call()
	took := time.Since(began)
	if err := expect(s, out.err); err != nil {
		return err
	}
	if s.has("max_ms") && took > s.ms("max_ms") {
		return fmt.Errorf("the call took %v, more than %v", took, s.ms("max_ms"))
	}
	if out.err == nil && s.str("as") != "" {
		r.locks[s.str("as")] = out.held
	}
	return nil
}

func (r *runner) doAwait(s step) error {
	ch, ok := r.bg[s.str("as")]
	if !ok {
		return fmt.Errorf("nothing runs in the background as %q", s.str("as"))
	}
	within := 60 * time.Second
	if s.has("within_ms") {
		within = s.ms("within_ms")
	}
	select {
	case out := <-ch:
		if err := expect(s, out.err); err != nil {
			return err
		}
		if out.err == nil {
			r.locks[s.str("as")] = out.held
		}
		return nil
	case <-time.After(within):
		return fmt.Errorf("%q did not end within %v", s.str("as"), within)
	}
}

func (r *runner) doLost(s step) error {
	h, err := r.lock(s, "lock")
	if err != nil {
		return err
	}
	select {
	case <-h.lost():
	case <-time.After(s.ms("within_ms")):
		return fmt.Errorf("no loss signalled within %v", s.ms("within_ms"))
	}
	at := time.Now()
	if want := s.str("loss"); want != "" && h.loss().String() != want {
		return fmt.Errorf("the loss was %v, not %s", h.loss(), want)
	}
	if since := s.str("since"); since != "" {
		began, ok := r.began[since]
		if !ok {
			return fmt.Errorf("no step or mark %q", since)
		}
		after := at.Sub(began)
		if s.has("at_least_ms") && after < s.ms("at_least_ms") {
			return fmt.Errorf("the loss came %v after %q, before %v", after, since, s.ms("at_least_ms"))
		}
		if s.has("at_most_ms") && after > s.ms("at_most_ms") {
			return fmt.Errorf("the loss came %v after %q, after %v", after, since, s.ms("at_most_ms"))
		}
	}
	return nil
}

// doGet performs a get; with for_ms, the get and its checks are repeated
// every 100 ms for that long.
func (r *runner) doGet(s step, began time.Time) error {
	c, err := r.client(s, "client")
	if err != nil {
		return err
	}
	until := began.Add(s.ms("for_ms"))
	for {
		lock, gerr := c.Get(r.ctx, s.str("name"))
		if err := expect(s, gerr); err != nil || gerr != nil {
			return err
		}
		if err := r.checkGet(s, lock); err != nil {
			return err
		}
		if !time.Now().Before(until) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// doList asks for the listing under the step's prefix every 100 ms until
// it shows the step's locks and awaited names, for at most within_ms.
func (r *runner) doList(s step, began time.Time) error {
	c, err := r.client(s, "client")
	if err != nil {
		return err
	}
	want, err := json.Marshal(map[string]interface{}{"locks": s["locks"], "awaited": s["awaited"]})
	if err != nil {
		return err
	}
	until := began.Add(s.ms("within_ms"))
	for {
		listing, err := c.Listing(r.ctx, s.str("prefix"), 1000)
		if err != nil {
			return err
		}
		locks := []string{}
		for _, l := range listing.Locks {
			locks = append(locks, l.Name)
		}
		awaited := []map[string]interface{}{}
		for _, a := range listing.Awaited {
			var first interface{}
			if len(a.Queue) > 0 {
				first = a.Queue[0].Holder
			}
			awaited = append(awaited, map[string]interface{}{"name": a.Name, "waiters": a.Waiters, "first": first})
		}
		shown, err := json.Marshal(map[string]interface{}{"locks": locks, "awaited": awaited})
		if err != nil {
			return err
		}
		if string(shown) == string(want) {
			return nil
		}
		if !time.Now().Before(until) {
			return fmt.Errorf("the listing shows %s, not %s", shown, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkGet checks one answer of a get: what the name is held under.
func (r *runner) checkGet(s step, lock *leasehold.LockInfo) error {
	if s.boolean("free") && lock != nil {
		return fmt.Errorf("%s is held by %q (id %s)", s.str("name"), lock.Holder, lock.ID)
	}
	if s.has("holder_lock") {
		h, err := r.lock(s, "holder_lock")
		if err != nil {
			return err
		}
		if lock == nil {
			return fmt.Errorf("%s is free", s.str("name"))
		}
		want := h.info().ID
		if h.set != nil {
			for _, info := range h.set.Infos() {
				if info.Name == s.str("name") {
					want = info.ID
				}
			}
		}
		found := lock.ID == want
		for _, o := range lock.Others {
			found = found || o.ID == want
		}
		if !found {
			return fmt.Errorf("%s is held under %s, not %s", s.str("name"), lock.ID, want)
		}
	}
	if s.has("holders") {
		n := 0
		if lock != nil {
			n = 1 + len(lock.Others)
		}
		if n != int(s.num("holders")) {
			return fmt.Errorf("%s has %d holders, not %v", s.str("name"), n, s["holders"])
		}
	}
	if s.has("ttl_at_least_ms") {
		if lock == nil {
			return fmt.Errorf("%s is free", s.str("name"))
		}
		if lock.TTL() < s.ms("ttl_at_least_ms") {
			return fmt.Errorf("%s has %v left, less than %v", s.str("name"), lock.TTL(), s.ms("ttl_at_least_ms"))
		}
	}
	return nil
}

func (r *runner) doWithLock(s step) error {
	c, err := r.client(s, "client")
	if err != nil {
		return err
	}
	opts, err := r.acquireOptions(s)
	if err != nil {
		return err
	}
	cancelled := make(chan bool, 1)
	var workErr error
	var waitCancel time.Duration
	work := func(ctx context.Context) error { return nil }
	if spec, ok := s["work"].(map[string]interface{}); ok {
		waitCancel = time.Duration(spec["wait_cancel_ms"].(float64)) * time.Millisecond
		work = func(ctx context.Context) error {
			if args, ok := spec["chaos"]; ok {
				if err := r.doChaos(args); err != nil {
					workErr = err
				}
			}
			if b, _ := spec["release_elsewhere"].(bool); b {
				l := leasehold.LockFromContext(ctx)
				info := l.Info()
				if _, err := c.Release(context.Background(), info.Name, info.ID); err != nil {
					workErr = fmt.Errorf("the release elsewhere: %v", err)
				}
			}
			select {
			case <-ctx.Done():
				cancelled <- true
			case <-time.After(waitCancel):
				cancelled <- false
			}
			return nil
		}
	} else if s.str("work") != "return" {
		return fmt.Errorf("work %v", s["work"])
	}
	err = c.Do(r.ctx, s.str("name"), work, opts...)
	if waitCancel > 0 {
		// Do may return before the work does (a refused renewal): wait for
		// the work to see its cancellation.
		select {
		case ok := <-cancelled:
			if workErr != nil {
				return workErr
			}
			if !ok {
				return fmt.Errorf("the work's context was not cancelled within %v", waitCancel)
			}
		case <-time.After(waitCancel + time.Second):
			return fmt.Errorf("the work did not return")
		}
	}
	return expect(s, err)
}

func (r *runner) doCampaign(s step) error {
	c, err := r.client(s, "client")
	if err != nil {
		return err
	}
	var opts []leasehold.CampaignOption
	if s.has("lease_ms") {
		opts = append(opts, leasehold.CampaignLease(s.ms("lease_ms")))
	}
	if s.has("give_up_after_ms") {
		opts = append(opts, leasehold.GiveUpAfter(s.ms("give_up_after_ms")))
	}
	call := func() outcome {
		l, err := c.Campaign(r.ctx, s.str("name"), s.str("value"), opts...)
		if err != nil {
			return outcome{err: err}
		}
		return outcome{held: held{lock: l.Lock}}
	}
	if s.boolean("background") {
		ch := make(chan outcome, 1)
		r.bg[s.str("as")] = ch
		go func() { ch <- call() }()
		return nil
	}
	out := call()
	if err := expect(s, out.err); err != nil {
		return err
	}
	if out.err == nil && s.str("as") != "" {
		r.locks[s.str("as")] = out.held
	}
	return nil
}

func (r *runner) doObserved(s step) error {
	o, ok := r.obs[s.str("as")]
	if !ok {
		return fmt.Errorf("no observer %q", s.str("as"))
	}
	want, _ := s["values"].([]interface{})
	// No leader may show between two leaders: nulls are left out unless
	// the values name one.
	keepNone := false
	for _, w := range want {
		keepNone = keepNone || w == nil
	}
	deadline := time.Now().Add(s.ms("within_ms"))
	for {
		o.mu.Lock()
		var seen []interface{}
		for _, v := range o.values {
			var x interface{}
			if v != nil {
				x = *v
			} else if !keepNone {
				continue
			}
			if len(seen) > 0 && fmt.Sprint(seen[len(seen)-1]) == fmt.Sprint(x) && (seen[len(seen)-1] == nil) == (x == nil) {
				continue
			}
			seen = append(seen, x)
		}
		o.mu.Unlock()
		if endsWith(seen, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the observer saw %v, which does not end with %v", seen, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func endsWith(seen, want []interface{}) bool {
	if len(seen) < len(want) {
		return false
	}
	tail := seen[len(seen)-len(want):]
	for i := range want {
		if (tail[i] == nil) != (want[i] == nil) || fmt.Sprint(tail[i]) != fmt.Sprint(want[i]) {
			return false
		}
	}
	return true
}
