package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func Example() {
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
