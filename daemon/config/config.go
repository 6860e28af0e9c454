// Package config is the configuration of `slotmover serve`, the sidecar
// that runs next to one master: which master it serves, how it reaches
// NATS, where its admin and metrics ports listen, how many tasks it runs at
// once and the move's tunables.
//
// A setting comes from, in rising precedence: the defaults, a YAML file
// (--config FILE or $SLOTMOVER_CONFIG), a SLOTMOVER_* environment variable,
// a flag given on the command line. Every key of the file has a flag, and
// every flag an environment variable named after it (SLOTMOVER_ and the
// flag in upper snake case: --password-file is $SLOTMOVER_PASSWORD_FILE),
// so that the daemon runs without a file as well as with one. The keys,
// their flags and their help are one table (keys.go).
//
// Load reads all of them, checks the result (unknown keys of the file are
// errors, as are bad addresses, durations that are not positive, files that
// do not exist) and reads the password files. Node.Conn, Move.Options,
// NATS.TLS.Config, Admin.TLS.Config and Log.Logger turn the sections into
// what the rest of slotmover takes.
package config

import (
	"time"

	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/mover"
)

// Serve is the whole configuration of `slotmover serve`. The yaml tags name
// the file's keys; keys.go names each key's flag.
type Serve struct {
	Node    Node    `yaml:"node"`
	NATS    NATS    `yaml:"nats"`
	Admin   Admin   `yaml:"admin"`
	Metrics Metrics `yaml:"metrics"`
	Tasks   Tasks   `yaml:"tasks"`
	State   State   `yaml:"state"`
	Move    Move    `yaml:"move"`
	Log     Log     `yaml:"log"`

	file string            // the YAML file read, "" for none
	from map[string]origin // where each key that is not a default came from
}

// Node is the local master: the target of every import this sidecar runs.
// The sources are reached with the same credentials and TLS settings
// (cluster.Conn.With).
type Node struct {
	Address string `yaml:"address"` // HOST:PORT, required
	User    string `yaml:"user"`    // ACL user; "" for the default user
	// Password, or PasswordFile to read it from (one line; a trailing
	// newline is dropped). Load reads the file into Password.
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	TLS          TLS    `yaml:"tls"`
}

// TLS is how a client section (node, nats) uses TLS. It is off unless
// Enabled; naming a file with it off is an error, so that a config never
// looks encrypted and is not.
type TLS struct {
	Enabled bool   `yaml:"enabled"`
	CA      string `yaml:"ca"`   // PEM CA certificates to trust; "" for the system's
	Cert    string `yaml:"cert"` // PEM client certificate, with Key, for servers that ask for one
	Key     string `yaml:"key"`
	// ServerName is the name verified in the server's certificate; "" for
	// the host dialled.
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// NATS is how the sidecar reaches NATS. No servers: NATS is off and the
// sidecar answers on its admin port only. At most one way to authenticate:
// user and password, token, nkey seed file or creds file.
type NATS struct {
	Servers      []string `yaml:"servers"` // nats://HOST:PORT (tls://, ws://, wss://, or a bare HOST:PORT)
	User         string   `yaml:"user"`
	Password     string   `yaml:"password"`
	PasswordFile string   `yaml:"password_file"`
	Token        string   `yaml:"token"`
	TokenFile    string   `yaml:"token_file"`
	NKeyFile     string   `yaml:"nkey_file"`  // a file holding the user's nkey seed (SU…)
	CredsFile    string   `yaml:"creds_file"` // a .creds file: user JWT and nkey seed
	TLS          TLS      `yaml:"tls"`
	// SubjectPrefix starts every subject: <prefix>.<node>.import, …
	SubjectPrefix string `yaml:"subject_prefix"`
	// Alias is a second <node> the sidecar answers to besides the master's
	// cluster node ID (a name an operator can type, like "shard-a").
	Alias string `yaml:"alias"`
}

// Admin is the RESP admin port (CLUSTER MIGRATION IMPORT/STATUS/CANCEL).
type Admin struct {
	Listen string `yaml:"listen"` // HOST:PORT; a port of 0 picks a free one
	// Password that AUTH must give before any other command; "" for none,
	// which is allowed on a loopback address only. Or PasswordFile.
	Password     string    `yaml:"password"`
	PasswordFile string    `yaml:"password_file"`
	TLS          ServerTLS `yaml:"tls"`
}

// ServerTLS is how a port this process serves uses TLS: on when Cert and
// Key are set, and then the port speaks TLS only.
type ServerTLS struct {
	Cert string `yaml:"cert"` // PEM server certificate (chain)
	Key  string `yaml:"key"`  // its PEM private key
	// ClientCA, when set, makes every client present a certificate signed
	// by one of the PEM CA certificates of this file.
	ClientCA string `yaml:"client_ca"`
}

// Metrics is the HTTP port of /metrics and /healthz; an empty Listen turns
// it off.
type Metrics struct {
	Listen string `yaml:"listen"`
	// Pprof also serves Go's profiles there, on /debug/pprof/.
	Pprof bool `yaml:"pprof"`
}

// Tasks bounds the work the sidecar takes on.
type Tasks struct {
	Max int `yaml:"max"` // tasks running at once
	// Nice is the nice value the sidecar raises itself to, so that when
	// CPU runs short the master beside it runs first; 0 leaves it.
	Nice int `yaml:"nice"`
}

// State is where the sidecar keeps its task records and its lock on the
// node, so that a restart repairs an interrupted task without NATS.
type State struct {
	// Dir is the state directory; "" for systemd's $STATE_DIRECTORY,
	// else $XDG_STATE_HOME/slotmover, else ~/.local/state/slotmover (see
	// DirOrDefault).
	Dir string `yaml:"dir"`
}

// Move holds the tunables of every move the sidecar runs, with the names
// and meanings of `slotmover move`'s flags.
type Move struct {
	MaxLag           int64         `yaml:"max_lag"`
	PauseBudget      time.Duration `yaml:"pause_budget"`
	FenceTimeout     time.Duration `yaml:"fence_timeout"`
	MaxAttempts      int           `yaml:"max_attempts"`
	MaxCatchUp       time.Duration `yaml:"max_catch_up"`
	ReplicaWait      time.Duration `yaml:"replica_wait"`
	Window           int           `yaml:"window"`
	BigKeyElements   uint64        `yaml:"big_key_elements"`
	Chunk            int           `yaml:"chunk"`
	ChunkTime        time.Duration `yaml:"chunk_time"`
	ReplyPerKey      bool          `yaml:"reply_per_key"`
	CleanupBatch     int           `yaml:"cleanup_batch"`
	CleanupSleep     time.Duration `yaml:"cleanup_sleep"`
	SpoolDir         string        `yaml:"spool_dir"`
	MaxSpool         int64         `yaml:"max_spool"`
	AllowEviction    bool          `yaml:"allow_eviction"`
	KeepSourceConfig bool          `yaml:"keep_source_config"`
	Snapshot         string        `yaml:"snapshot"`
	Budget           string        `yaml:"budget"`
}

// Log is the daemon's log.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn or error
	Format string `yaml:"format"` // text or json
}

// Defaults of the keys that have one.
const (
	DefaultAdminListen   = "127.0.0.1:7100"
	DefaultMetricsListen = "127.0.0.1:7101"
	DefaultSubjectPrefix = "slotmover"
	DefaultMaxTasks      = 2
	DefaultNice          = 19
	DefaultCleanupSleep  = time.Millisecond // as `slotmover move --cleanup-sleep`
	DefaultLogLevel      = "info"
	DefaultLogFormat     = "text"
)

// Defaults returns the configuration before any file, variable or flag:
// admin and metrics on loopback, NATS off, no node (which Load requires),
// the move's tunables as `slotmover move` has them.
func Defaults() *Serve {
	return &Serve{
		NATS:    NATS{SubjectPrefix: DefaultSubjectPrefix},
		Admin:   Admin{Listen: DefaultAdminListen},
		Metrics: Metrics{Listen: DefaultMetricsListen},
		Tasks:   Tasks{Max: DefaultMaxTasks, Nice: DefaultNice},
		Move: Move{
			MaxLag:         mover.DefaultMaxLag,
			PauseBudget:    mover.DefaultPauseBudget,
			FenceTimeout:   mover.DefaultFenceTimeout,
			MaxAttempts:    mover.DefaultMaxAttempts,
			MaxCatchUp:     mover.DefaultMaxCatchUp,
			ReplicaWait:    mover.DefaultReplicaWait,
			Window:         mover.DefaultWindow,
			BigKeyElements: mover.DefaultBigKeyElements,
			Chunk:          mover.DefaultChunk,
			ChunkTime:      mover.DefaultChunkTime,
			CleanupBatch:   cutover.DefaultBatch,
			CleanupSleep:   DefaultCleanupSleep,
			MaxSpool:       mover.DefaultMaxSpool,
			Snapshot:       mover.SnapshotAuto,
			Budget:         "default",
		},
		Log: Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
	}
}

// File is the YAML file the configuration was read from, "" for none.
func (c *Serve) File() string { return c.file }

// Origin says where the value of a key (its YAML path, "node.address")
// came from: "default", "FILE:LINE", "$SLOTMOVER_…" or "--flag".
func (c *Serve) Origin(path string) string {
	if o, ok := c.from[path]; ok {
		return o.where
	}
	return "default"
}
