package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/admin"
	"github.com/slotmover/slotmover/daemon/config"
	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/natsapi"
)

// daemonFlags say how to reach a sidecar: its admin port, or NATS.
type daemonFlags struct {
	admin         string
	password      cli.Secret // the admin port's
	tls           tlsFlags   // the admin port's
	natsURL, node string
	prefix        string
	config        string
}

func (d *daemonFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.admin, "admin", "127.0.0.1:7100", "the sidecar's admin port, `HOST:PORT`")
	d.password.Register(fs, "admin-password", "the admin port", "SLOTMOVER_ADMIN_PASSWORD") // serve's name
	d.tls.register(fs, "admin-tls", "the admin port", "for an admin port with tls.client_ca")
	fs.StringVar(&d.natsURL, "nats", "", "ask over NATS instead, at this `URL` (with --node)")
	fs.StringVar(&d.node, "node", "", "over NATS: the sidecar's node ID or alias")
	fs.StringVar(&d.prefix, "nats-subject-prefix", "slotmover", "over NATS: the subject prefix")
	cli.Rename(fs, map[string]string{"subject-prefix": "nats-subject-prefix", "password": "admin-password", "password-file": "admin-password-file"})
	fs.StringVar(&d.config, "config", "", "over NATS, as the sidecar of this YAML `file` connects (its servers, credentials, TLS, subject prefix; its alias unless --node)")
}

// ask sends a STATUS or CANCEL for id ("" for all) and returns the reply
// as records of field → value.
func (d *daemonFlags) ask(ctx context.Context, verb, id string) ([]map[string]any, error) {
	if d.natsURL != "" || d.config != "" {
		return d.askNATS(ctx, verb, id)
	}
	return d.askAdmin(ctx, []string{strings.ToUpper(verb)}, id)
}

// askAdmin sends CLUSTER MIGRATION <verb…> to the admin port (admin.Ask).
func (d *daemonFlags) askAdmin(ctx context.Context, verb []string, id string) ([]map[string]any, error) {
	password, err := d.password.Get()
	if err != nil {
		return nil, err
	}
	tlsConf, err := d.tls.config()
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: d.admin, Password: password, TLSConfig: tlsConf, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	out, err := admin.Ask(ctx, c, verb, id)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", strings.ToLower(verb[0]), d.admin, err)
	}
	return out, nil
}

var errNoNode = errors.New("--node is required over NATS (or an alias in --config's file)")

// bus connects to NATS as --nats and --config say, and returns the
// client for the sidecars' subjects.
func (d *daemonFlags) bus(name string) (*natsapi.Client, error) {
	n := config.NATS{Servers: []string{d.natsURL}}
	if d.config != "" {
		c, err := config.Load([]string{"--config", d.config}, nil)
		if err != nil {
			return nil, err
		}
		n = c.NATS
		if d.natsURL != "" {
			n.Servers = []string{d.natsURL}
		}
		d.prefix = n.SubjectPrefix
		if d.node == "" {
			d.node = n.Alias
		}
	}
	nc, err := natsapi.Connect(n, name, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	return &natsapi.Client{NC: nc, Prefix: d.prefix}, nil
}

func (d *daemonFlags) askNATS(ctx context.Context, verb, id string) ([]map[string]any, error) {
	bus, err := d.bus("slotmover " + verb)
	if err != nil {
		return nil, err
	}
	defer bus.NC.Close()
	if d.node == "" {
		return nil, errNoNode
	}
	ask := bus.Status
	if verb == "cancel" {
		ask = bus.Cancel
	}
	tasks, err := ask(ctx, d.node, id)
	if err != nil {
		return nil, err
	}
	// As records of field → value, like the admin port's replies.
	var out []map[string]any
	body, _ := json.Marshal(tasks)
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// refuseAdminFlags reports whether the admin port's password or TLS
// cannot be had (both --admin-password and --admin-password-file, an
// unreadable file, a certificate without its key), after saying why: that
// is bad input, refused before anything is asked.
func refuseAdminFlags(cmd string, d *daemonFlags) bool {
	_, err := d.password.Get()
	if err == nil {
		_, err = d.tls.config()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "slotmover %s: %v\n", cmd, err)
		return true
	}
	return false
}

// statusCmd prints a sidecar's tasks.
func statusCmd(args []string) int {
	fs := cli.NewFlagSet("status")
	var d daemonFlags
	d.register(fs)
	asJSON := fs.Bool("json", false, "print the records as JSON")
	pos, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	if prog.RefuseExtra("status", pos, 1, "one task ID at most") || refuseAdminFlags("status", &d) {
		return exitRefused
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	tasks, err := d.ask(ctx, "status", strings.Join(pos, ""))
	if err != nil {
		fmt.Fprintln(os.Stderr, "slotmover status:", err)
		return exitFailed
	}
	if *asJSON {
		if tasks == nil {
			tasks = []map[string]any{} // none is [], not null
		}
		command.PrintJSON(os.Stdout, tasks)
		return 0
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSLOTS\tSOURCE\tSTATE\tPHASE\tKEYS\tLAG\tPAUSE MS\tTHROTTLED MS\tHELD\tERROR")
	for _, t := range tasks {
		source := t["source_addr"]
		if source == nil || source == "" {
			source = t["source"]
		}
		pause := cell(t["write_pause_ms"])
		if ms, err := strconv.ParseFloat(pause, 64); err == nil {
			pause = strconv.FormatFloat(ms, 'f', 1, 64)
		}
		held := cell(t["holding"])
		if hs, ok := t["holding"].([]any); ok { // NATS's JSON: a list
			parts := make([]string, len(hs))
			for i, h := range hs {
				parts[i] = fmt.Sprint(h)
			}
			held = strings.Join(parts, "; ")
		}
		if b, _ := t["cutover_held"].(bool); b || t["cutover_held"] == int64(1) {
			held = strings.TrimPrefix(held+"; cutover", "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(t["id"]), cell(t["slots"]), cell(source), cell(t["state"]), cell(t["phase"]),
			cell(t["keys_copied"]), cell(t["lag_bytes"]), pause, cell(t["throttled_ms"]), held, cell(t["last_error"]))
	}
	tw.Flush()
	return 0
}

// cell is a record's field as the table shows it: a field the record lacks
// (NATS's JSON leaves out an empty error) is blank.
func cell(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// cancelCmd cancels one task of a sidecar, or all with --all.
func cancelCmd(args []string) int {
	fs := cli.NewFlagSet("cancel")
	var d daemonFlags
	d.register(fs)
	all := fs.Bool("all", false, "cancel every running task")
	pos, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	ids := 1
	if *all {
		ids = 0
	}
	if prog.RefuseExtra("cancel", pos, ids, "one task ID, or --all") || refuseAdminFlags("cancel", &d) {
		return exitRefused
	}
	id := strings.Join(pos, "")
	if (id == "") == !*all {
		fmt.Fprintln(os.Stderr, "slotmover cancel: give one task ID, or --all")
		return exitRefused
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	reply, err := d.ask(ctx, "cancel", id)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slotmover cancel:", err)
		return exitFailed
	}
	n := len(reply)
	if len(reply) == 1 && reply[0]["count"] != nil {
		n = int(reply[0]["count"].(int64))
	}
	fmt.Printf("cancelled: %d (a cancelled task rolls back; 'slotmover status' shows when it is done)\n", n)
	return 0
}
