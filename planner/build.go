package planner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slotmover/slotmover/cluster"
)

// ErrRead marks an error of Build that came from reading the cluster, not
// from the request.
var ErrRead = errors.New("read the cluster")

// Build does what `slotmover plan` does: it reads the cluster from seed,
// makes the plan req asks for, and lists its big keys.
func Build(ctx context.Context, seed cluster.Conn, req Request, big BigKeyOptions) (*Plan, error) {
	view, err := Gather(ctx, seed, GatherOptions{By: req.By})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRead, err)
	}
	p, err := Make(view, req)
	if err != nil {
		return nil, err
	}
	if err := FindBigKeys(ctx, seed, view, p, big); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRead, err)
	}
	p.Cluster = seed.Addr
	p.Created = time.Now().UTC().Format(time.RFC3339)
	return p, nil
}
