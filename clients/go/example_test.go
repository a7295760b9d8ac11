package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// Example is README.md's example (TestTheREADMEExampleIsExample).
func Example() {
	ctx := context.Background()
	c, err := leasehold.New([]string{"node-a:7701", "node-b:7701", "node-c:7701"})
	if err == nil {
		err = c.Do(ctx, "jobs/42", func(ctx context.Context) error {
			// Runs while the lock is held; ctx is cancelled if it is lost.
			fmt.Println("working under fence", leasehold.LockFromContext(ctx).Fence())
			return nil
		}, leasehold.WithLease(10*time.Second), leasehold.WithWait(30*time.Second))
	}
	if err != nil {
		log.Fatal(err) // errors.Is(err, leasehold.ErrHeld): the wait ran out; leasehold.ErrLost: lost mid-work
	}
}

func ExampleClient_Acquire() {
	ctx := context.Background()
	c, err := leasehold.New([]string{"node-a:7701", "node-b:7701", "node-c:7701"})
	if err != nil {
		log.Fatal(err)
	}
	lock, err := c.Acquire(ctx, "jobs/42", leasehold.WithLease(10*time.Second), leasehold.WithWait(30*time.Second))
	if err != nil {
		log.Fatal(err) // errors.Is(err, leasehold.ErrHeld) once the wait ran out
	}
	defer lock.Release(context.Background())
	select {
	case <-doTheWork(lock.Fence()): // writes that carry the fence
	case <-lock.Lost(): // Refused or Lapsed: stop acting as the holder
		log.Printf("lost (%v)", lock.Loss())
	}
}

func doTheWork(fence uint64) <-chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}

func ExampleClient_Do() {
	c, err := leasehold.New([]string{"node-a:7701", "node-b:7701"})
	if err != nil {
		log.Fatal(err)
	}
	err = c.Do(context.Background(), "reports/nightly", func(ctx context.Context) error {
		for batch := 0; batch < 100; batch++ {
			if ctx.Err() != nil {
				return ctx.Err() // the lock is lost: stop
			}
			// ... write batch, carrying leasehold.LockFromContext(ctx).Fence()
		}
		return nil
	}, leasehold.WithLease(20*time.Second))
	if errors.Is(err, leasehold.ErrLost) {
		log.Print("the work ran on a lost lock: its result does not count")
	}
}

func ExampleClient_TryAcquire() {
	c, _ := leasehold.New([]string{"node-a:7701"})
	lock, err := c.TryAcquire(context.Background(), "jobs/42")
	var held *leasehold.HeldError
	switch {
	case errors.As(err, &held):
		fmt.Printf("busy: held by %q through node %d (fence %d, %v left)\n",
			held.Lock.Holder, held.Lock.Node, held.Lock.Fence, held.Lock.TTL())
	case err != nil:
		log.Fatal(err)
	default:
		defer lock.Release(context.Background())
	}
}

func ExampleClient_Campaign() {
	ctx := context.Background()
	c, _ := leasehold.New([]string{"node-a:7701", "node-b:7701"})
	lead, err := c.Campaign(ctx, "scheduler", "worker-7", leasehold.CampaignLease(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lead.Resign(ctx)
	<-lead.Lost() // lead until leadership is lost
}

// TestTheREADMEExampleIsExample: README.md's Go example is Example's body,
// so it compiles (go vet checks the example functions) and stays short.
func TestTheREADMEExampleIsExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	source, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(readme), "```go\n")
	if start < 0 {
		t.Fatal("README.md has no Go example")
	}
	block := string(readme)[start+len("```go\n"):]
	block = block[:strings.Index(block, "```")]
	body := string(source)[strings.Index(string(source), "func Example() {\n")+len("func Example() {\n"):]
	body = body[:strings.Index(body, "\n}\n")+1]
	var lines []string
	for _, line := range strings.SplitAfter(body, "\n") {
		lines = append(lines, strings.TrimPrefix(line, "\t"))
	}
	if got := strings.Join(lines, ""); got != block {
		t.Errorf("README.md's example:\n%s\nis not Example's body:\n%s", block, got)
	}
	if n := strings.Count(strings.TrimSpace(block), "\n") + 1; n > 12 {
		t.Errorf("README.md's example is %d lines; keep it about ten", n)
	}
}
