package daemon

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/slotmover/slotmover/daemon/config"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/natsapi"
	"github.com/slotmover/slotmover/sidecar"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// testVersion is the version the tests' sidecars show.
const testVersion = "v0.0.0-test"

func adminClient(addr string, tlsConf *tls.Config) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, TLSConfig: tlsConf, MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// serve never logs the credentials of a NATS URL, a token's
// (nats://token@host, which url.URL.Redacted would show) nor a password,
// not at the start and not when NATS comes back; and it serves the admin
// port over TLS when given a certificate.
func TestServeHidesNATSCredentialsAndServesAdminTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cl, err := localcluster.StartCluster(ctx, dir, []string{"0-16383"}, localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	cert, key, pool, err := localcluster.WriteTestCert(dir)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, secret string
		auth         func(*server.Options)
		url          func(port int) string
	}{
		{"token", "t0ken-s3cret", func(o *server.Options) { o.Authorization = "t0ken-s3cret" },
			func(port int) string { return fmt.Sprintf("nats://t0ken-s3cret@127.0.0.1:%d", port) }},
		{"user and password", "pa55-s3cret", func(o *server.Options) { o.Username, o.Password = "sidecar", "pa55-s3cret" },
			func(port int) string { return fmt.Sprintf("nats://sidecar:pa55-s3cret@127.0.0.1:%d", port) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := t.TempDir()
			ns := harness.NATSServer(t, 0, store, tc.auth)
			port := ns.Addr().(*net.TCPAddr).Port
			c, err := config.Load([]string{"--node", cl.Nodes[0].Addr, "--admin", "127.0.0.1:0", "--metrics", "", "--state-dir", t.TempDir(),
				"--nats", tc.url(port), "--admin-tls-cert", cert, "--admin-tls-key", key, "--log-level", "debug"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var logBuf harness.SyncBuffer
			log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			sctx, stop := context.WithCancel(ctx)
			defer stop()
			ready := make(chan string, 1)
			done := make(chan error, 1)
			go func() {
				done <- Serve(sctx, c, log, Options{Version: testVersion, Ready: func(admin, _ string) { ready <- admin }})
			}()
			var adminAddr string
			select {
			case adminAddr = <-ready:
			case err := <-done:
				t.Fatalf("serve: %v\n%s", err, logBuf.String())
			case <-time.After(20 * time.Second):
				t.Fatalf("serve not ready:\n%s", logBuf.String())
			}

			tlsClient := adminClient(adminAddr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
			defer tlsClient.Close()
			if err := tlsClient.Ping(ctx).Err(); err != nil {
				t.Errorf("PING over TLS: %v", err)
			}
			plain := adminClient(adminAddr, nil)
			defer plain.Close()
			if err := plain.Ping(ctx).Err(); err == nil {
				t.Error("a plaintext client was answered")
			}
			// NATS goes away and comes back on the same port: the
			// client reconnects and serve logs where to.
			ns.Shutdown()
			ns.WaitForShutdown()
			harness.NATSServer(t, port, store, tc.auth)
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(logBuf.String(), "NATS reconnected") {
				if time.Now().After(deadline) {
					t.Fatalf("no reconnection logged:\n%s", logBuf.String())
				}
				time.Sleep(50 * time.Millisecond)
			}

			stop()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not return")
			}
			out := logBuf.String()
			if strings.Contains(out, tc.secret) {
				t.Fatalf("the log shows the NATS credentials:\n%s", out)
			}
			if want := fmt.Sprintf("xxxxx@127.0.0.1:%d", port); strings.Count(out, want) < 2 || !strings.Contains(out, "admin_tls=true") {
				t.Fatalf("the log does not name the NATS server (%s) at start and reconnection, or the admin port's TLS:\n%s", want, out)
			}
		})
	}
}

// startServe runs serve in-process with args until the test ends, and
// returns its admin port's address and its log.
func startServe(t *testing.T, args ...string) (string, *harness.SyncBuffer) {
	t.Helper()
	c, err := config.Load(args, nil)
	if err != nil {
		t.Fatal(err)
	}
	logBuf := &harness.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, c, log, Options{Version: testVersion, Ready: func(admin, _ string) { ready <- admin }})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("serve did not return")
		}
		if t.Failed() {
			t.Logf("serve's log:\n%s", logBuf)
		}
	})
	select {
	case admin := <-ready:
		return admin, logBuf
	case err := <-done:
		t.Fatalf("serve: %v\n%s", err, logBuf)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve not ready:\n%s", logBuf)
	}
	return "", nil
}

// configs/nats-accounts.conf gives each client what it needs and no more:
// the sidecar, as its user, answers, keeps its records and claims its
// node; the observer sees status and events, but its import is refused
// with nothing started; the operator's import moves the slots.
func TestNATSAccountsConfig(t *testing.T) {
	ctx := context.Background()
	passwords := map[string]string{"sidecar": "side-pw", "operator": "op-pw", "observer": "obs-pw"}
	for user, pw := range passwords {
		t.Setenv("SLOTMOVER_"+strings.ToUpper(user)+"_NATS_PASSWORD", pw)
	}
	opts, err := server.ProcessConfigFile("../configs/nats-accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	opts.Port, opts.StoreDir, opts.NoLog, opts.NoSigs = -1, t.TempDir(), true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	connect := func(user string) *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, passwords[user]))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}

	dir := t.TempDir()
	cl, err := localcluster.StartCluster(ctx, dir, []string{"0-16383", ""}, localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	target, targetID := cl.Nodes[1].Client(), cl.IDs[1]
	defer target.Close()
	src := cl.Nodes[0].Client()
	defer src.Close()
	set, _ := slots.Parse("0-99")
	for i := range 500 {
		if err := src.Set(ctx, fmt.Sprintf("{%s}:%d", tagOf(set, i), i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	admin, logBuf := startServe(t, "--node", cl.Nodes[1].Addr, "--admin", "127.0.0.1:0", "--metrics", "", "--state-dir", t.TempDir(),
		"--nats", ns.ClientURL(), "--nats-user", "sidecar", "--nats-password", passwords["sidecar"])

	observer, operator := connect("observer"), connect("operator")
	events := make(chan *nats.Msg, 1000)
	if _, err := observer.ChanSubscribe("slotmover.events.>", events); err != nil {
		t.Fatal(err)
	}
	if err := observer.Flush(); err != nil {
		t.Fatal(err)
	}

	// The observer, and the sidecars' user: their imports are refused by
	// the server, and nothing starts.
	for _, user := range []string{"observer", "sidecar"} {
		nc := observer
		if user == "sidecar" {
			nc = connect(user)
		}
		violation := make(chan error, 1)
		nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case violation <- err:
			default:
			}
		})
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := (&natsapi.Client{NC: nc}).Import(octx, targetID, natsapi.ImportRequest{Slots: "0-99"})
		cancel()
		if err == nil {
			t.Fatalf("the %s's import was answered", user)
		}
		select {
		case v := <-violation:
			if !errors.Is(v, nats.ErrPermissionViolation) || !strings.Contains(v.Error(), targetID+".import") {
				t.Fatalf("the server's refusal of the %s's import: %v", user, v)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the server did not refuse the %s's import (the request ended with %v)", user, err)
		}
	}
	obs := &natsapi.Client{NC: observer}
	if tasks, err := obs.Status(ctx, targetID, ""); err != nil || len(tasks) != 0 {
		t.Fatalf("the observer's status: %v %+v", err, tasks)
	}
	// The observer finds the sidecar as a NATS micro service.
	if msg, err := observer.Request("$SRV.PING.slotmover", nil, 5*time.Second); err != nil || !strings.Contains(string(msg.Data), targetID) {
		t.Fatalf("the observer's $SRV.PING.slotmover: %v %v", msg, err)
	}
	adm := adminClient(admin, nil)
	defer adm.Close()
	if all, err := adm.Do(ctx, "CLUSTER", "MIGRATION", "STATUS", "ALL").Slice(); err != nil || len(all) != 0 {
		t.Fatalf("tasks after the observer's import: %v %v", all, err)
	}
	if nodes := target.ClusterNodes(ctx).Val(); strings.Contains(nodes, "-<-") {
		t.Fatalf("the observer's import marked slots importing:\n%s", nodes)
	}

	// The operator: the import runs to the end.
	op := &natsapi.Client{NC: operator}
	tasks, err := op.Import(ctx, targetID, natsapi.ImportRequest{Slots: "0-99"})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("the operator's import: %v %+v", err, tasks)
	}
	id := tasks[0].ID
	// It may control its tasks (the move may have ended: none changed);
	// the observer may not (its request is refused, unanswered).
	if _, err := op.Control(ctx, targetID, natsapi.ControlRequest{ID: id, Action: "budget", Budget: "off"}); err != nil {
		t.Fatalf("the operator's control: %v", err)
	}
	octx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = obs.Control(octx, targetID, natsapi.ControlRequest{Action: "pause"})
	cancel()
	if err == nil {
		t.Fatal("the observer's pause was answered")
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := op.Status(ctx, targetID, id)
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Over() {
			if got[0].State != sidecar.StateCompleted {
				t.Fatalf("task ended %s: %s", got[0].State, got[0].LastError)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the import still runs after a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cl.WaitOwner(ctx, set, targetID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The observer saw the task's events to the final one.
	final := false
	for !final {
		select {
		case msg := <-events:
			var ev natsapi.Event
			if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.Task.ID != id {
				t.Fatalf("event %s: %v", msg.Data, err)
			}
			final = ev.Final
		case <-time.After(5 * time.Second):
			t.Fatal("the observer saw no final event")
		}
	}
	// The observer reads the task's events again from their stream, as a
	// durable consumer (at least once).
	ojs, err := jetstream.New(observer)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := ojs.CreateOrUpdateConsumer(ctx, natsapi.EventStream("slotmover"), jetstream.ConsumerConfig{Durable: "dashboard", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("the observer's consumer of the events: %v", err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for msg := range batch.Messages() {
		read++
		var ev natsapi.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil || ev.Task.ID != id || ev.Seq != 1 {
			t.Fatalf("the stream's first event %s: %v", msg.Data(), err)
		}
		if err := msg.DoubleAck(ctx); err != nil {
			t.Fatalf("the observer's ack: %v", err)
		}
	}
	if err := batch.Error(); err != nil || read != 1 {
		t.Fatalf("the observer's fetch: %d events, %v", read, err)
	}
	// The sidecar kept its record and its claim in the buckets.
	js, err := jetstream.New(connect("sidecar"))
	if err != nil {
		t.Fatal(err)
	}
	var rec sidecar.Task
	var holder natsapi.Holder
	for bucket, got := range map[string]struct {
		key string
		v   any
	}{natsapi.Bucket: {targetID + "." + id, &rec}, natsapi.ClaimBucket: {targetID, &holder}} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		e, err := kv.Get(ctx, got.key)
		if err != nil {
			t.Fatalf("bucket %s, key %s: %v", bucket, got.key, err)
		}
		if err := json.Unmarshal(e.Value(), got.v); err != nil {
			t.Fatal(err)
		}
	}
	if rec.State != sidecar.StateCompleted || holder.PID != os.Getpid() || holder.Admin != admin {
		t.Fatalf("the bucket's record %+v; the node's claim %+v", rec, holder)
	}
	if out := logBuf.String(); strings.Contains(out, "ermission") || strings.Contains(out, "not kept") {
		t.Fatalf("the sidecar was refused something:\n%s", out)
	}
}

// tagOf is a hash tag whose slot is in set.
func tagOf(set *slots.Set, n int) string {
	for i := 0; ; i++ {
		tag := fmt.Sprintf("t%d-%d", n, i)
		if set.Contains(slots.ForString(tag)) {
			return tag
		}
	}
}

// /healthz says the process serves; /readyz follows what the sidecar needs
// to take work: unready while NATS is away, ready again once the client
// reconnects. The metrics carry the build and the NATS link, and the admin
// port's INFO the same version. Asked for, the port serves Go's profiles,
// and the log says where it listens.
func TestServeReadinessFollowsNATS(t *testing.T) {
	ctx := context.Background()
	cl, err := localcluster.StartCluster(ctx, t.TempDir(), []string{"0-16383"}, localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	store := t.TempDir()
	noAuth := func(*server.Options) {}
	ns := harness.NATSServer(t, 0, store, noAuth)
	port := ns.Addr().(*net.TCPAddr).Port
	c, err := config.Load([]string{"--node", cl.Nodes[0].Addr, "--admin", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--state-dir", t.TempDir(), "--nats", fmt.Sprintf("nats://127.0.0.1:%d", port), "--pprof"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logBuf harness.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	sctx, stop := context.WithCancel(ctx)
	type addrs struct{ admin, metrics string }
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(sctx, c, log, Options{Version: testVersion, Ready: func(admin, metrics string) { ready <- addrs{admin, metrics} }})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("serve's log:\n%s", logBuf.String())
		}
	})
	var at addrs
	select {
	case at = <-ready:
	case err := <-done:
		t.Fatalf("serve: %v\n%s", err, logBuf.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("serve not ready:\n%s", logBuf.String())
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + at.metrics + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(path string, code int, body string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			got, b := get(path)
			if got == code && strings.Contains(b, body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d %q, want %d with %q", path, got, b, code, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	waitFor("/readyz", 200, "ok")
	waitFor("/metrics", 200, "slotmover_nats_connected 1\n")
	waitFor("/debug/pprof/goroutine?debug=1", 200, "daemon.Serve")
	if want := "metrics=" + at.metrics + " pprof=true"; !strings.Contains(logBuf.String(), want) {
		t.Errorf("the log does not say %q", want)
	}
	waitFor("/metrics", 200, fmt.Sprintf(`slotmover_build_info{goversion=%q,version=%q} 1`, runtime.Version(), testVersion))
	admin := adminClient(at.admin, nil)
	defer admin.Close()
	if info, err := admin.Info(ctx).Result(); err != nil || !strings.Contains(info, "slotmover_version:"+testVersion+"\r\n") {
		t.Errorf("admin INFO does not give version %s: %v\n%s", testVersion, err, info)
	}

	ns.Shutdown()
	ns.WaitForShutdown()
	waitFor("/readyz", 503, "not connected")
	waitFor("/healthz", 200, "ok")
	waitFor("/metrics", 200, "slotmover_nats_connected 0\n")

	harness.NATSServer(t, port, store, noAuth)
	waitFor("/readyz", 200, "ok")
	waitFor("/metrics", 200, "slotmover_nats_connected 1\n")
}
