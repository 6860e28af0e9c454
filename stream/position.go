package stream

import (
	"errors"
	"fmt"

	"github.com/slotmover/slotmover/internal/info"
)

// ErrNoBacklog says a source keeps no replication backlog: no replica has
// attached since it started, so a link can only begin with a full sync.
var ErrNoBacklog = errors.New("the source keeps no replication backlog (no replica has attached to it)")

// ContinuePoint returns where a partial sync (Config.From) can start, from
// the source's INFO replication: its current offset, provided it keeps a
// backlog. The backlog then holds every write from that point on, for as
// long as the link takes to attach.
func ContinuePoint(repl info.Fields) (*Position, error) {
	active, err := repl.Int("repl_backlog_active")
	if err != nil {
		return nil, err
	}
	if active != 1 {
		return nil, ErrNoBacklog
	}
	off, err := repl.Int("master_repl_offset")
	if err != nil {
		return nil, err
	}
	id := repl["master_replid"]
	if len(id) != 40 {
		return nil, fmt.Errorf("INFO replication: bad master_replid %q", id)
	}
	return &Position{ReplID: id, Offset: off}, nil
}
