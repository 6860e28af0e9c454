// Package cutover switches the ownership of hash slots from a source master
// to a target that already holds their keys: a short write pause on the
// source, a fence at the source's replication offset, the switch in the one
// order that does not make the source delete keys in its main thread, and
// the paced removal of the keys left behind. It also undoes the target side
// of a move that fails before the switch.
package cutover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/slots"
)

// Nodes are the masters a cutover talks to.
type Nodes struct {
	Source, Target     *redis.Client
	SourceID, TargetID string
	Others             []*redis.Client // every other master
}

// Plan is one cutover's budget.
type Plan struct {
	Slots *slots.Set
	// BeforeClaim, if set, runs on the target's side right before the
	// claim, the slots released: the last moment a key written there with
	// ASKING is not yet seen by clients (the mover's lock, see
	// mover.markOneByOne).
	BeforeClaim func(context.Context)
	// PauseBudget is the CLIENT PAUSE timeout: the longest the source's
	// writers can be held, even if this process dies mid-cutover.
	PauseBudget time.Duration
	// FenceTimeout bounds each wait for the target to catch up with the
	// source: before the release, and again after it.
	FenceTimeout time.Duration
	// SetSlotBlocks says that CLUSTER SETSLOT may block on these servers
	// (Valkey 8; see SetSlotBlocks): a paused source holds it back, and a
	// node with a replica online makes it wait for the replica's ack, which
	// inside MULTI or a script crashes Valkey 8.0 (an assertion). The
	// release is then DELSLOTS alone, in a script that refuses it unless
	// the source is still at the fence (see guardedRelease); the claim's
	// one SETSLOT goes right after its transaction, and the source and the
	// other masters are told the new owner after the unpause.
	SetSlotBlocks bool
	// AfterRelease, if set, runs right after the source's release; an
	// error from it ends Release there, as if the process died: no claim,
	// no unpause (the pause runs out by itself). For tests.
	AfterRelease func() error
}

// Fence waits until every byte of the source's stream up to off has been
// applied on the target and acknowledged.
type Fence func(ctx context.Context, off int64) error

// ErrFenceMissed means the target did not catch up in time; the source was
// unpaused, owns the slots as before, and the cutover can be tried again.
var ErrFenceMissed = errors.New("fence missed")

// ErrNotOwner means that, at the cutover, the source no longer owned every
// slot (another move of them finished): nothing was changed, and the move
// must roll back.
var ErrNotOwner = errors.New("the source does not own every slot any more (another move of them?)")

// Result describes one cutover attempt.
type Result struct {
	// Fence is the source's offset that the target reached before the
	// release: where the pause began, or, with Plan.SetSlotBlocks, where
	// the source was when its guarded release went through.
	Fence int64
	// ReleaseOffset is the source's offset as the release executed: every
	// write it accepted in the slots lies before it. The target reached it
	// before it claimed. It differs from Fence only when the pause did not
	// hold (another client's CLIENT UNPAUSE, a pause that ran out, a server
	// that let writes through), and never with Plan.SetSlotBlocks.
	ReleaseOffset int64
	// Refusals counts the guarded releases the source refused because
	// writes had come in since the fence (Plan.SetSlotBlocks only).
	Refusals int
	Pause    time.Duration // from CLIENT PAUSE sent to CLIENT UNPAUSE answered
	Released bool          // the source gave the slots away and kept them so: there is no way back

	// Where the pause went. CatchUp is the wait for ReleaseOffset, after
	// the release (0 when the pause held); Claim, the claim's part in the
	// pause (with Plan.SetSlotBlocks, its last SETSLOT comes after).
	FenceWait, Release, CatchUp, Claim time.Duration

	// NoOwner bounds how long neither node served the slots: from the
	// release's reply to the claim's (with Plan.SetSlotBlocks, to the end
	// of the source's news of the owner, though the target's claim may
	// reach it sooner by gossip). Clients that reach the source meanwhile
	// are bounced between the two nodes or, on Valkey 8, refused with
	// CLUSTERDOWN. It is milliseconds unless the machine is starved.
	NoOwner time.Duration

	// NotTold says which masters could not be told the new owner after
	// the switch: not a failure, as the target's claim reaches them by
	// gossip with its bumped epoch.
	NotTold error
}

// Rest is the part of the pause that none of FenceWait, Release, CatchUp
// and Claim names: the round trips of CLIENT PAUSE and CLIENT UNPAUSE, of
// the fence's offset read and of the ownership check. It is a few round
// trips, unless the source or the machine stalls.
func (r Result) Rest() time.Duration {
	return r.Pause - r.FenceWait - r.Release - r.CatchUp - r.Claim
}

// A cutover attempt is Release (steps 0-4), then Claimer.Claim (5-7):
//
//  0. Before the pause, queue the transactions of steps 3, 5 and 7 (MULTI
//     and their commands, not EXEC), so that only their execution is left.
//  1. CLIENT PAUSE <budget> WRITE on the source; read its master_repl_offset.
//  2. Wait for that fence; if it is not reached in time, unpause: ErrFenceMissed.
//     Check that the source still owns every slot; else unpause: ErrNotOwner.
//  3. Source: EXEC of MULTI; CLUSTER DELSLOTS …; CLUSTER SETSLOT <s> NODE
//     <target> …; INFO replication. From then on it answers -MOVED for the
//     slots and keeps their keys as orphans; the offset INFO reports is the
//     release offset. With Plan.SetSlotBlocks, a script that runs DELSLOTS
//     only if the source is still at the fence (guardedRelease); refused,
//     the target catches up with the new offset and the script is tried
//     again, until the fence's deadline.
//  4. Wait until the target has applied the stream up to the release
//     offset. The source refused every write in the slots after it, so
//     whether or not the pause held, the target now has every write the
//     source acknowledged in them. If it is not reached in time, the source
//     takes the slots back (ADDSLOTS) and is unpaused: ErrFenceMissed.
//  5. Target: EXEC of its claim (see claimCommands), which bumps its epoch.
//     With Plan.SetSlotBlocks, the transaction claims all slots but the
//     last, the source is unpaused, and then the last slot's SETSLOT,
//     which bumps the epoch and waits for the target's replicas.
//  6. CLIENT UNPAUSE.
//  7. Every other master, all at once: CLUSTER SETSLOT <s> NODE <target>
//     (and the source too, when SETSLOT was left out of its release).
//
// Claiming on the target first would make the source, on hearing of it by
// gossip while still owning the slots, delete their keys synchronously.
// The pause only keeps step 4 short and the bounce of clients between the
// two nodes brief; correctness rests on the release offset, which the
// source itself reports. Moves from one source in this process take turns
// (lockSource), so that none ends another's pause.
//
// freeze(off) is called right after the release: from then on nothing of
// the stream at or past off may reach the target, where it would undo
// clients' writes (the source still expires its orphaned keys, and streams a
// DEL for each). freeze(-1) lifts it, when the source takes the slots back.
// Release runs steps 0-4. With a nil error it returns the Claimer of a
// switch past its point of no return: the source gave the slots away, the
// target has every write the source acknowledged in them, and the source
// is still paused; the claim is all that is left, and no other cutover
// from this source runs until it ends. Otherwise the Claimer is nil, and
// Result.Released says whether the slots were left released anyway (a
// release that failed half-way): the switch is half done and must be
// finished by hand or by fix; the error says what is left.
func Release(ctx context.Context, n Nodes, p Plan, fence Fence, freeze func(off int64)) (_ *Claimer, res Result, err error) {
	unlock, err := lockSource(ctx, n.SourceID)
	if err != nil {
		return nil, res, err
	}
	var c *Claimer // non-nil once past the point of no return; it owns what follows
	defer func() {
		if c == nil {
			unlock()
		}
	}()

	// The other masters' news is queued too, so that they learn it within
	// a few milliseconds of the unpause: until then their clients are sent
	// to the source and on from there, and a client refreshing its slot map
	// from one of them gets the old owner.
	told := n.Others
	if p.SetSlotBlocks {
		told = nil
	}
	specs := []txSpec{{n.Target, "the claim on target", func(pl redis.Pipeliner) { claimCommands(ctx, pl, n.TargetID, p) }}}
	if !p.SetSlotBlocks {
		specs = append(specs, txSpec{n.Source, "the release on source", func(pl redis.Pipeliner) { releaseCommands(ctx, pl, n.TargetID, p) }})
	}
	txs, err := queueAll(ctx, append(specs, newsFor(ctx, told, n.TargetID, p.Slots)...))
	if err != nil {
		return nil, res, err
	}
	defer func() {
		if c == nil {
			closeAll(txs)
		}
	}()
	release := func(ctx context.Context, _ int64) (int64, bool, error) {
		replies, err := execTx(ctx, txs[1])
		if err != nil {
			return 0, false, err
		}
		relOff, err := info.Parse(fmt.Sprint(replies[len(replies)-1])).Int("master_repl_offset")
		return relOff, true, err
	}
	if p.SetSlotBlocks {
		release = func(ctx context.Context, fence int64) (int64, bool, error) {
			return guardedRelease(ctx, n.Source, p.Slots, fence)
		}
	}

	budget := p.PauseBudget
	pausedAt := time.Now()
	if err := n.Source.Do(ctx, "CLIENT", "PAUSE", budget.Milliseconds(), "WRITE").Err(); err != nil {
		return nil, res, fmt.Errorf("CLIENT PAUSE on source: %w", err)
	}
	unpause := func() error {
		// A fresh context: the pause must end even when ctx is cancelled.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := n.Source.Do(uctx, "CLIENT", "UNPAUSE").Err()
		res.Pause = time.Since(pausedAt)
		if err != nil {
			return fmt.Errorf("CLIENT UNPAUSE on source (the pause ends by itself within %s): %w", budget, err)
		}
		return nil
	}
	off, err := ReplOffset(ctx, n.Source)
	if err != nil {
		return nil, res, errors.Join(err, unpause())
	}
	res.Fence = off
	fctx, cancel := context.WithDeadline(ctx, pausedAt.Add(p.FenceTimeout))
	fenceStart := time.Now()
	err = fence(fctx, off)
	res.FenceWait = time.Since(fenceStart)
	cancel()
	if err != nil {
		// Only a deadline is a miss; any other error (the target failed,
		// the move evicts) is the move's failure. cancel() above set
		// fctx.Err() to Canceled unless the deadline had come first.
		if errors.Is(fctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%w: target not at offset %d within %s: %w", ErrFenceMissed, off, p.FenceTimeout, err)
		}
		return nil, res, errors.Join(err, unpause())
	}
	// A fence reached late leaves little of the pause for the switch:
	// writers would resume before it, and clients would bounce between the
	// nodes while the target catches up with them. Try again later.
	if elapsed := time.Since(pausedAt); elapsed > budget/2 {
		return nil, res, errors.Join(fmt.Errorf("%w: fence reached after %s, too late in a %s pause", ErrFenceMissed, elapsed, budget), unpause())
	}

	// Right before the release, as it hands the slots to this target
	// whoever owns them: a move of the same slots that another process
	// finished meanwhile (to another node) must not be overridden by this
	// target's claim, which would win with a newer epoch.
	if owned, err := sourceStillOwns(ctx, n.Source, p.Slots); err != nil || !owned {
		if err == nil {
			err = fmt.Errorf("%w (%s)", ErrNotOwner, n.Source.Options().Addr)
		}
		return nil, res, errors.Join(err, unpause())
	}

	// From the release on, only the way forward (or the source taking the
	// slots back) is safe: a cancelled caller must not leave the slots
	// between two nodes, so the rest runs on a context of its own.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget+5*time.Second)
	defer cancel()
	releaseStart := time.Now()
	var relOff int64
	for {
		var released bool
		relOff, released, err = release(sctx, off)
		if err != nil {
			res.Release = time.Since(releaseStart)
			if owned, oerr := sourceStillOwns(sctx, n.Source, p.Slots); oerr == nil && owned {
				return nil, res, errors.Join(fmt.Errorf("release on source: %w", err), unpause())
			}
			res.Released = true
			return nil, res, errors.Join(fmt.Errorf("release on source failed half-way: %w", err), unpause())
		}
		if released {
			break
		}
		// Refused: the pause did not hold, and writes came in since the
		// fence. Nothing was released; the target catches up with them,
		// and the release is tried again, within the fence's deadline.
		res.Refusals++
		fctx, cancel := context.WithDeadline(ctx, pausedAt.Add(p.FenceTimeout))
		err = fence(fctx, relOff)
		missed := errors.Is(fctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		if err != nil {
			if missed {
				err = fmt.Errorf("%w: the pause did not hold (offset %d at the fence, %d at the refused release) and the target did not reach it within %s: %w", ErrFenceMissed, off, relOff, p.FenceTimeout, err)
			}
			res.Release = time.Since(releaseStart)
			return nil, res, errors.Join(err, unpause())
		}
		off, res.Fence = relOff, relOff
	}
	res.Release = time.Since(releaseStart)
	res.Released = true
	res.ReleaseOffset = relOff
	releasedAt := time.Now()
	freeze(relOff)
	if p.AfterRelease != nil {
		if err := p.AfterRelease(); err != nil {
			return nil, res, err
		}
	}

	if relOff != off {
		catchUpStart := time.Now()
		fctx, cancel := context.WithTimeout(sctx, p.FenceTimeout)
		err := fence(fctx, relOff)
		missed := errors.Is(fctx.Err(), context.DeadlineExceeded)
		cancel()
		res.CatchUp = time.Since(catchUpStart)
		if err != nil {
			freeze(-1)
			if gerr := giveBack(sctx, n.Source, p); gerr != nil {
				return nil, res, errors.Join(fmt.Errorf("the pause did not hold (offset %d at the fence, %d at the release), the target did not reach the release offset (%w), and the source could not take the slots back: %w", off, relOff, err, gerr), unpause())
			}
			res.Released = false
			if missed {
				err = fmt.Errorf("%w: the pause did not hold (offset %d at the fence, %d at the release) and the target did not reach the release offset within %s; the source took the slots back: %w", ErrFenceMissed, off, relOff, p.FenceTimeout, err)
			}
			return nil, res, errors.Join(err, unpause())
		}
	}
	c = &Claimer{n: n, p: p, res: &res, releasedAt: releasedAt, unpause: unpause, unlock: unlock,
		txs: txs, claimTx: txs[0], tell: txs[len(specs):]}
	return c, res, nil
}

// Claimer is a switch released by Release, waiting for its claim.
type Claimer struct {
	n          Nodes
	p          Plan
	res        *Result // Release's, which unpause completes
	releasedAt time.Time
	unpause    func() error
	unlock     func()
	txs        []*queuedTx
	claimTx    *queuedTx
	tell       []*queuedTx
}

// Claim runs steps 5-7: the target claims the slots, the source is
// unpaused, the other masters are told. It returns the whole attempt's
// Result. It runs to its end whatever becomes of ctx: until it does,
// neither node serves the slots.
func (c *Claimer) Claim(ctx context.Context) (Result, error) {
	n, p := c.n, c.p
	defer c.close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.PauseBudget+5*time.Second)
	defer cancel()
	if p.BeforeClaim != nil {
		p.BeforeClaim(sctx)
	}
	claimStart := time.Now()
	_, claimErr := execTx(sctx, c.claimTx)
	var uerr error
	unpaused := false
	sourceTold := 0 // slots the source has been told the owner of, first to last
	if claimErr == nil && p.SetSlotBlocks {
		// The last slot's SETSLOT (its epoch bump) waits for the target's
		// replicas, up to 2 s with one that is slow, so writers of every
		// other slot of the source resume first. Nothing waits on the
		// pause any more: the source released the slots (it refuses their
		// writes, CLUSTERDOWN, until it hears of the owner) and the target
		// owns all but that one, whose writers it sends to the source
		// until the SETSLOT. The SETSLOT comes after the transaction: sent
		// first, it made Valkey 8 lose keys of slots that did not move (a
		// same-source soak lost 76 keys in 3 minutes; the other order none).
		c.res.Claim = time.Since(claimStart) // the part in the pause
		uerr, unpaused = c.unpause(), true
		all := p.Slots.Slots()
		last := len(all) - 1
		// Meanwhile the source hears of the owner of the others, which the
		// target holds already: until it does, it refuses their writes.
		claimErr = atOnce(2, func(i int) error {
			if i == 0 {
				return n.Target.Do(sctx, "CLUSTER", "SETSLOT", all[last], "NODE", n.TargetID).Err()
			}
			if SetSlots(sctx, n.Source, all[:last], "NODE", n.TargetID) == nil {
				sourceTold = last
			}
			return nil
		})
	}
	if claimErr != nil {
		claimErr = Claim(sctx, n.Target, n.TargetID, p.Slots, p.SetSlotBlocks)
	}
	if !unpaused {
		c.res.Claim = time.Since(claimStart)
		c.res.NoOwner = time.Since(c.releasedAt)
		uerr = c.unpause()
	}
	if claimErr != nil {
		return *c.res, errors.Join(fmt.Errorf("target claim failed after the source released the slots: %w", claimErr), uerr)
	}
	// Not fatal if one fails (see Result.NotTold).
	tellErr := atOnce(len(c.tell), func(i int) error {
		if _, err := execTx(sctx, c.tell[i]); err != nil {
			return fmt.Errorf("tell %s: %w", c.tell[i].client.Options().Addr, err)
		}
		return nil
	})
	if p.SetSlotBlocks {
		// Unqueued, outside transactions, now that the pause is over. The
		// source first and alone: it refuses the slots' writes, even ASKING
		// ones (its cleanup's), while it sees them unassigned, where the
		// other masters only redirect them; and each SETSLOT broadcasts to
		// the cluster, so four nodes told at once slowed each other (a
		// whole shard: 200-300 ms, against about 100 ms alone). Then the
		// others, and the target's replicas: they got the importing marks
		// by replication, which the claim's DELSLOTS/ADDSLOTS do not clear
		// there; SETSLOT STABLE does.
		tellErr = SetSlots(sctx, n.Source, p.Slots.Slots()[sourceTold:], "NODE", n.TargetID)
		if tellErr != nil {
			tellErr = fmt.Errorf("tell %s: %w", n.Source.Options().Addr, tellErr)
		}
		c.res.NoOwner = time.Since(c.releasedAt)
		nodes := append([]*redis.Client{n.Target}, n.Others...)
		tellErr = errors.Join(tellErr, atOnce(len(nodes), func(i int) error {
			how := []any{"NODE", n.TargetID}
			if i == 0 {
				how = []any{"STABLE"}
			}
			if err := SetSlots(sctx, nodes[i], p.Slots.Slots(), how...); err != nil {
				return fmt.Errorf("tell %s: %w", nodes[i].Options().Addr, err)
			}
			return nil
		}))
	}
	c.res.NotTold = tellErr
	return *c.res, uerr
}

// Abandon ends a released switch without its claim, when the move may not
// go on (its process is stopping in a state it cannot finish): the source
// is unpaused, the slots stay released, for fix.
func (c *Claimer) Abandon() error {
	defer c.close()
	return c.unpause()
}

func (c *Claimer) close() {
	closeAll(c.txs)
	c.unlock()
}

func closeAll(txs []*queuedTx) {
	for _, tx := range txs {
		tx.Close()
	}
}

// giveBack makes the source own the slots again after a release that the
// target could not follow: the target never claimed them and the other
// masters were never told, so the source's own view is the only one that
// changed.
func giveBack(ctx context.Context, source *redis.Client, p Plan) error {
	all := p.Slots.Slots()
	cmds, err := source.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		if !p.SetSlotBlocks {
			pl.Do(ctx, cluster.SlotsCommand("DELSLOTS", all)...)
		}
		pl.Do(ctx, cluster.SlotsCommand("ADDSLOTS", all)...)
		return nil
	})
	if err != nil {
		return firstCmdErr(cmds, source, err)
	}
	if owned, err := sourceStillOwns(ctx, source, p.Slots); err != nil || !owned {
		return errors.Join(errors.New("the source does not own every slot after ADDSLOTS"), err)
	}
	return nil
}

// sourceLocks hold one token per source node ID: the cutovers of moves
// from one source, in this process, take turns. A server keeps one write
// pause for all its clients, and any CLIENT UNPAUSE ends it: overlapping
// cutovers would end each other's pause.
var sourceLocks sync.Map // node ID → chan struct{} (capacity 1)

func lockSource(ctx context.Context, id string) (unlock func(), err error) {
	v, _ := sourceLocks.LoadOrStore(id, make(chan struct{}, 1))
	token := v.(chan struct{})
	select {
	case token <- struct{}{}:
		return func() { <-token }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// atOnce runs fn(0) … fn(n-1) concurrently and joins their errors.
func atOnce(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// txSpec is a transaction to queue on a node; what names it in errors.
type txSpec struct {
	client *redis.Client
	what   string
	build  func(redis.Pipeliner)
}

func newsFor(ctx context.Context, others []*redis.Client, targetID string, set *slots.Set) []txSpec {
	var specs []txSpec
	for _, o := range others {
		specs = append(specs, txSpec{o, "the news for " + o.Options().Addr, func(pl redis.Pipeliner) { setSlotNodeCommands(ctx, pl, targetID, set) }})
	}
	return specs
}

// queueAll queues every transaction at once, each on its own connection.
// On failure it closes those it queued.
func queueAll(ctx context.Context, specs []txSpec) ([]*queuedTx, error) {
	txs := make([]*queuedTx, len(specs))
	err := atOnce(len(specs), func(i int) error {
		tx, err := queueTx(ctx, specs[i].client, specs[i].build)
		if err != nil {
			return fmt.Errorf("queue %s: %w", specs[i].what, err)
		}
		txs[i] = tx
		return nil
	})
	if err != nil {
		for _, tx := range txs {
			if tx != nil {
				tx.Close()
			}
		}
		return nil, err
	}
	return txs, nil
}

// queuedTx is a MULTI with its commands queued on a connection of its own,
// so that only EXEC remains to be sent.
type queuedTx struct {
	client *redis.Client
	conn   *redis.Conn
}

// queueTx opens MULTI on a new connection and queues commands. Close drops
// the connection, which discards an unexecuted transaction: a pooled
// connection left inside MULTI would queue the next caller's commands.
func queueTx(ctx context.Context, c *redis.Client, build func(redis.Pipeliner)) (*queuedTx, error) {
	opts := *c.Options()
	opts.PoolSize = 1
	tx := &queuedTx{client: redis.NewClient(&opts)}
	tx.conn = tx.client.Conn()
	// MULTI alone first: were it refused (an ACL without it), the commands
	// pipelined behind it would run at once, outside any transaction.
	if err := tx.conn.Do(ctx, "MULTI").Err(); err != nil {
		tx.Close()
		return nil, fmt.Errorf("MULTI on %s: %w", c.Options().Addr, err)
	}
	cmds, err := tx.conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		build(p)
		return nil
	})
	if err != nil {
		tx.Close()
		return nil, firstCmdErr(cmds, c, err)
	}
	return tx, nil
}

func (tx *queuedTx) Close() {
	tx.conn.Close()
	tx.client.Close()
}

// execTx runs a queued transaction, checks the reply of every command in
// it, and returns the replies.
func execTx(ctx context.Context, tx *queuedTx) ([]any, error) {
	replies, err := tx.conn.Do(ctx, "EXEC").Slice()
	if err != nil {
		return nil, fmt.Errorf("EXEC: %w", err)
	}
	for i, r := range replies {
		if e, ok := r.(error); ok {
			return nil, fmt.Errorf("command %d of the transaction: %w", i+1, e)
		}
	}
	return replies, nil
}

// releaseCommands are step 3. DELSLOTS takes a list (DELSLOTSRANGE is
// 7.0+). INFO comes last: inside the transaction, the offset it reports is
// the stream's position at the release.
func releaseCommands(ctx context.Context, pl redis.Pipeliner, targetID string, p Plan) {
	pl.Do(ctx, cluster.SlotsCommand("DELSLOTS", p.Slots.Slots())...)
	if !p.SetSlotBlocks {
		setSlotNodeCommands(ctx, pl, targetID, p.Slots)
	}
	pl.Info(ctx, "replication")
}

// claimCommands make the target own the slots, in three commands: DELSLOTS
// and ADDSLOTS for every slot but the last (which also clear their
// importing marks), then SETSLOT <last> NODE <self>, which goes through the
// importing path and so bumps the target's config epoch (if it is not
// already the highest) and broadcasts the claim at once, making it win
// everywhere by gossip. Per slot, SETSLOT STABLE + NODE would cost the
// target ~4 ms for 5461 slots, all of it inside the pause, while clients
// bounce between the released source and the still-importing target. With
// p.SetSlotBlocks the SETSLOT is left out, to be sent right after the EXEC.
func claimCommands(ctx context.Context, pl redis.Pipeliner, targetID string, p Plan) {
	all := p.Slots.Slots()
	if rest := all[:len(all)-1]; len(rest) > 0 {
		pl.Do(ctx, cluster.SlotsCommand("DELSLOTS", rest)...)
		pl.Do(ctx, cluster.SlotsCommand("ADDSLOTS", rest)...)
	}
	if !p.SetSlotBlocks {
		pl.Do(ctx, "CLUSTER", "SETSLOT", all[len(all)-1], "NODE", targetID)
	}
}

// Claim makes the target own the slots in a fresh transaction, retried
// briefly: after the source has released the slots, the only way is
// forward. Slot by slot (STABLE, then NODE <self>; the last through the
// importing path, which bumps the epoch), as that can be repeated after a
// claim that went half-way. With setSlotBlocks (see Plan) the same
// commands go pipelined, outside any transaction.
func Claim(ctx context.Context, target *redis.Client, targetID string, set *slots.Set, setSlotBlocks bool) error {
	all := set.Slots()
	pipelined := target.TxPipelined
	if setSlotBlocks {
		pipelined = target.Pipelined
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var cmds []redis.Cmder
		cmds, err = pipelined(ctx, func(p redis.Pipeliner) error {
			for _, s := range all[:len(all)-1] {
				p.Do(ctx, "CLUSTER", "SETSLOT", s, "STABLE")
				p.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", targetID)
			}
			p.Do(ctx, "CLUSTER", "SETSLOT", all[len(all)-1], "NODE", targetID)
			return nil
		})
		if err == nil {
			return nil
		}
		err = firstCmdErr(cmds, target, err)
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// firstCmdErr names the first command of a pipeline that failed.
func firstCmdErr(cmds []redis.Cmder, c *redis.Client, err error) error {
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			return fmt.Errorf("%s on %s: %w", cmd.String(), c.Options().Addr, cmd.Err())
		}
	}
	return fmt.Errorf("on %s: %w", c.Options().Addr, err)
}

// setSlotNodeCommands tell a node that id owns the slots. In one
// MULTI/EXEC, the node saves its cluster config once, not once per batch of
// slots it happens to read.
func setSlotNodeCommands(ctx context.Context, p redis.Pipeliner, id string, set *slots.Set) {
	for _, s := range set.Slots() {
		p.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", id)
	}
}

// SetSlots sends CLUSTER SETSLOT <s> <how…> for every slot, pipelined
// outside any transaction, in rounds of setSlotsRound: on Valkey 8 each
// waits for the node's replicas, and a round must be answered within the
// client's read timeout.
func SetSlots(ctx context.Context, c *redis.Client, list []uint16, how ...any) error {
	for start := 0; start < len(list); start += setSlotsRound {
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, s := range list[start:min(start+setSlotsRound, len(list))] {
				p.Do(ctx, append([]any{"CLUSTER", "SETSLOT", s}, how...)...)
			}
			return nil
		})
		if err != nil {
			return firstCmdErr(cmds, c, err)
		}
	}
	return nil
}

const setSlotsRound = 256

// guardedRelease gives the slots away (DELSLOTS) only if the source's
// offset is still fence, and reports the offset it saw. Valkey 8 lets a
// node that imports a slot take it over by gossip as soon as the slot's
// owner stops claiming it, so there the release must not run ahead of the
// target: a script, run atomically, compares and releases in one step. It
// is flagged no-writes, which CLIENT PAUSE WRITE does not hold (the
// release must run during the pause), and DELSLOTS, unlike SETSLOT on
// Valkey 8, neither blocks nor replicates, so it is safe in a script.
func guardedRelease(ctx context.Context, source *redis.Client, set *slots.Set, fence int64) (offset int64, released bool, err error) {
	args := []any{"EVAL", guardedReleaseScript, 0, fence}
	for _, s := range set.Slots() {
		args = append(args, s)
	}
	reply, err := source.Do(ctx, args...).Slice()
	if err != nil {
		return 0, false, fmt.Errorf("guarded release on %s: %w", source.Options().Addr, err)
	}
	if len(reply) != 2 {
		return 0, false, fmt.Errorf("guarded release on %s: reply %v", source.Options().Addr, reply)
	}
	done, _ := reply[0].(int64)
	offset, err = strconv.ParseInt(fmt.Sprint(reply[1]), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("guarded release on %s: offset %v: %w", source.Options().Addr, reply[1], err)
	}
	return offset, done == 1, nil
}

// guardedReleaseScript: ARGV[1] the fence, ARGV[2…] the slots. It returns
// {1, offset} when it released them, {0, offset} when the offset had moved.
// DELSLOTS goes in batches, as Lua's unpack has a bounded stack.
const guardedReleaseScript = `#!lua flags=no-writes
local off = string.match(redis.call('INFO', 'replication'), 'master_repl_offset:(%d+)')
if off ~= ARGV[1] then
  return {0, off}
end
for i = 2, #ARGV, 1000 do
  redis.call('CLUSTER', 'DELSLOTS', unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return {1, off}`

// sourceStillOwns reports whether the source still claims every slot.
func sourceStillOwns(ctx context.Context, c *redis.Client, set *slots.Set) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	top, err := cluster.Load(ctx, c)
	if err != nil {
		return false, err
	}
	for _, s := range set.Slots() {
		if !top.Myself.Slots.Contains(s) {
			return false, nil
		}
	}
	return true, nil
}

// ReplOffset reads master_repl_offset from INFO replication.
func ReplOffset(ctx context.Context, c *redis.Client) (int64, error) {
	f, err := info.Read(ctx, c, "replication")
	if err != nil {
		return 0, err
	}
	off, err := f.Int("master_repl_offset")
	if err != nil {
		return 0, fmt.Errorf("on %s: %w", c.Options().Addr, err)
	}
	return off, nil
}

// SetSlotBlocks reports whether CLUSTER SETSLOT may block on the server:
// Valkey 8 flags it MAY_REPLICATE, so CLIENT PAUSE WRITE holds it back, and
// replicates it to the node's replicas before applying it, waiting for
// their ack (which, inside MULTI or a script, crashes 8.0). COMMAND INFO
// hides that flag, so the version tells.
func SetSlotBlocks(ctx context.Context, c *redis.Client) (bool, error) {
	f, err := info.Read(ctx, c, "server")
	if err != nil {
		return false, err
	}
	major, _, _ := strings.Cut(f["valkey_version"], ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 8, nil
}
