package bench

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CPUUse is the CPU time the host spent during a move, in seconds, by who
// spent it. On shared cores a method's wall time follows what it costs in
// all (a move that starves the writer frees CPU for itself), and wall
// times of one method vary by a fifth between runs: the seconds compare
// methods where the wall times cannot.
type CPUUse struct {
	Servers float64 `json:"servers_s"` // every redis-server of the cluster, their forks included
	Bench   float64 `json:"bench_s"`   // this process: the writer, NATS, the probes
	Mover   float64 `json:"mover_s"`   // the rest of the host: the sidecars, redis-cli, or nothing (the built-in migration)
}

// clockTicks is USER_HZ, the unit of /proc's times: 100 on every Linux
// build the project runs on.
const clockTicks = 100

// cpuMark is the host's CPU times at one moment.
type cpuMark struct {
	host, self, servers int64 // clock ticks
}

// markCPU reads the host's busy time, this process's own (not that of
// the redis-cli it ran: the mover's) and that of the servers (pids) with
// the forks they waited for.
func markCPU(pids []int) (cpuMark, error) {
	host, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuMark{}, err
	}
	m := cpuMark{}
	if m.host, err = hostBusy(string(host)); err != nil {
		return cpuMark{}, err
	}
	if m.self, _, err = processTicks("self"); err != nil {
		return cpuMark{}, err
	}
	for _, pid := range pids {
		own, forks, err := processTicks(strconv.Itoa(pid))
		if err != nil {
			return cpuMark{}, err
		}
		m.servers += own + forks
	}
	return m, nil
}

// since is the CPU spent from m to now.
func (m cpuMark) since(now cpuMark) CPUUse {
	sec := func(t int64) float64 { return float64(t) / clockTicks }
	servers, self := now.servers-m.servers, now.self-m.self
	return CPUUse{Servers: sec(servers), Bench: sec(self), Mover: sec(max(now.host-m.host-servers-self, 0))}
}

// hostBusy sums the busy times of /proc/stat's first line: user, nice,
// system, irq and softirq (not idle, iowait or the hypervisor's steal;
// guest time is in user already).
func hostBusy(stat string) (int64, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += n
	}
	return busy, nil
}

// processTicks is a process's user and system time, and that of the
// children it waited for.
func processTicks(pid string) (own, children int64, err error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, err
	}
	return statTicks(string(b))
}

// statTicks reads utime+stime and cutime+cstime of a /proc/<pid>/stat
// line: fields 14-17, counted after the command name, which may hold
// spaces and parentheses.
func statTicks(stat string) (own, children int64, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, errors.New("stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("stat: %d fields after the command name", len(f))
	}
	var t [4]int64
	for j, s := range f[11:15] {
		if t[j], err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("stat: %w", err)
		}
	}
	return t[0] + t[1], t[2] + t[3], nil
}
