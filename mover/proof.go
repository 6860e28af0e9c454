package mover

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/slots"
)

// The snapshot is sent with the target's replies turned off. That it lost
// nothing is proved from the target's own error counts (INFO), read before
// and after: a command refused or failed under CLIENT REPLY OFF is counted
// all the same.

// quietCommands are the commands the snapshot sends unanswered.
var quietCommands = []string{"set", "asking", "restore-asking"}

// redirectOnly are error replies that the snapshot's commands cannot draw
// while the slots stay importing on the target (each goes behind ASKING,
// names one key, and SET or RESTORE … REPLACE never meet a wrong type).
var redirectOnly = []string{"MOVED", "ASK", "TRYAGAIN", "CROSSSLOT", "WRONGTYPE", "NOSCRIPT", "EXECABORT"}

// errorCounts is what a target's INFO says about failed commands.
type errorCounts struct {
	quiet    int64 // failed and rejected calls of quietCommands, by any client
	replies  int64 // error replies of any kind (total_error_replies)
	harmless int64 // error replies of the redirectOnly kinds
}

// readErrorCounts reads the counts from one INFO call.
func readErrorCounts(ctx context.Context, c *redis.Client) (errorCounts, error) {
	f, err := info.Read(ctx, c, "all")
	if err != nil {
		return errorCounts{}, err
	}
	var n errorCounts
	if n.replies, err = f.Int("total_error_replies"); err != nil {
		return n, fmt.Errorf("INFO on target %s has no total_error_replies (Redis 6.2 or newer needed for a quiet snapshot; use --reply-per-key): %w", c.Options().Addr, err)
	}
	for _, cmd := range quietCommands {
		stats := f.Sub("cmdstat_" + cmd)
		n.quiet += subInt(stats, "failed_calls") + subInt(stats, "rejected_calls")
	}
	for _, kind := range redirectOnly {
		n.harmless += subInt(f.Sub("errorstat_"+kind), "count")
	}
	return n, nil
}

// subInt reads one numeric field of a stats line; 0 if absent.
func subInt(stats map[string]string, field string) int64 {
	v, _ := strconv.ParseInt(stats[field], 10, 64)
	return v
}

// verifyQuiet decides whether every unanswered command between before and
// after did its work. It did if no SET, ASKING or RESTORE-ASKING failed on
// the target. If some did, they were other clients' as long as every error
// reply meanwhile was a redirection or another kind the snapshot's commands
// cannot draw, and the slots are still importing (else ours are redirected
// too); stillImporting is asked only then. It returns how many failures
// were other clients'.
func verifyQuiet(before, after errorCounts, stillImporting func() (bool, error)) (othersFailed int64, err error) {
	failed := after.quiet - before.quiet
	if failed == 0 {
		return 0, nil
	}
	others := (after.replies - before.replies) - (after.harmless - before.harmless)
	if failed > 0 && others == 0 {
		importing, err := stillImporting()
		if err != nil {
			return 0, err
		}
		if importing {
			return failed, nil
		}
		return 0, fmt.Errorf("the target lost the slots' IMPORTING marks during the snapshot: %d commands were refused", failed)
	}
	if failed < 0 {
		return 0, fmt.Errorf("the target's statistics were reset during the snapshot (CONFIG RESETSTAT): cannot tell whether every key arrived")
	}
	return 0, fmt.Errorf("%d SET/RESTORE commands failed or were refused on the target during the snapshot, %d of its error replies were not redirections (its INFO commandstats and errorstats say why)", failed, others)
}

// importingFrom reports whether c still has every slot of set importing from sourceID.
func importingFrom(ctx context.Context, c *redis.Client, set *slots.Set, sourceID string) (bool, error) {
	top, err := cluster.Load(ctx, c)
	if err != nil {
		return false, err
	}
	for _, s := range set.Slots() {
		if top.Myself.Importing[s] != sourceID {
			return false, nil
		}
	}
	return true, nil
}
