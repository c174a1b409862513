package testbed

import (
	"context"
	"time"
)

// PlayEvery runs sync at once and then every tick until ctx ends, handing each result to record:
// the loop of every player here (the cloud provider, IPAM, the demo's Steward and kubeadm
// bootstrap provider), which acts on what it sees and keeps the last error for Err.
func PlayEvery(ctx context.Context, tick time.Duration, sync func(context.Context) error, record func(error)) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		record(sync(ctx))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
