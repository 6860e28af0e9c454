package natsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotmover/slotmover/sidecar"
)

// Client asks sidecars for imports and their tasks' records over NATS.
// A refused request's error is an *Error, whose Code a program can test.
type Client struct {
	NC     *nats.Conn
	Prefix string // subject prefix; "slotmover" if empty
}

// Import asks node's sidecar (its node ID or alias) to import req's slots.
func (c *Client) Import(ctx context.Context, node string, req ImportRequest) ([]sidecar.Task, error) {
	return c.ask(ctx, node, "import", req)
}

// Status returns node's task with that ID, or all its tasks for "".
func (c *Client) Status(ctx context.Context, node, id string) ([]sidecar.Task, error) {
	return c.ask(ctx, node, "status", TaskRequest{ID: id})
}

// Cancel cancels node's task with that ID, or all its tasks for "".
func (c *Client) Cancel(ctx context.Context, node, id string) ([]sidecar.Task, error) {
	return c.ask(ctx, node, "cancel", TaskRequest{ID: id})
}

// Control changes node's running task with that ID, or all its running
// tasks for "" (see ControlRequest), and returns those changed.
func (c *Client) Control(ctx context.Context, node string, req ControlRequest) ([]sidecar.Task, error) {
	return c.ask(ctx, node, "control", req)
}

// Sidecars asks every sidecar on the bus (<prefix>.ping) and returns the
// answers that come within wait, in no particular order.
func (c *Client) Sidecars(ctx context.Context, wait time.Duration) ([]PingReply, error) {
	inbox := c.NC.NewInbox()
	sub, err := c.NC.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("list the sidecars over NATS: %w", err)
	}
	defer sub.Unsubscribe()
	if err := c.NC.PublishRequest(c.prefix()+".ping", inbox, nil); err != nil {
		return nil, fmt.Errorf("list the sidecars over NATS: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var out []PingReply
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return out, nil // the wait is over
			}
			return out, fmt.Errorf("list the sidecars over NATS: %w", err)
		}
		var p PingReply
		if err := json.Unmarshal(msg.Data, &p); err != nil {
			return out, fmt.Errorf("a ping reply: %q: %w", msg.Data, err)
		}
		out = append(out, p)
	}
}

func (c *Client) prefix() string {
	if c.Prefix == "" {
		return "slotmover"
	}
	return c.Prefix
}

func (c *Client) ask(ctx context.Context, node, verb string, body any) ([]sidecar.Task, error) {
	prefix := c.prefix()
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a sidecar answers at once, or is not there
	defer cancel()
	msg, err := c.NC.RequestWithContext(ctx, prefix+"."+node+"."+verb, data)
	if err != nil {
		return nil, fmt.Errorf("%s to %s over NATS: %w", verb, node, err)
	}
	var r Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, fmt.Errorf("%s reply from %s: %w", verb, node, err)
	}
	if r.Error != nil {
		return nil, r.Error
	}
	return r.Tasks, nil
}
