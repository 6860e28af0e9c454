package cluster

import (
	"context"
	"strings"
	"time"
)

// WhileDown runs fn again, for up to 10 s, while the node answers that the
// cluster is down: a node whose slots another move is releasing with
// DELSLOTS alone (Valkey 8) is down for a few milliseconds, and refuses
// scripts and keyed commands meanwhile. fn must be safe to repeat after
// such a refusal.
func WhileDown(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fn()
		if err == nil || !IsDown(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// IsDown says whether err is a node's answer that the cluster is down, or
// that a slot is not served ("slot not served": unassigned in the node's
// view until it hears the new owner).
func IsDown(err error) bool {
	s := err.Error()
	return strings.Contains(s, "CLUSTERDOWN") || strings.Contains(s, "cluster is down") || strings.Contains(s, "slot not served")
}
