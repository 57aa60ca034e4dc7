package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"syscall"
	"time"
)

// usage is what a process has spent so far, as far as it can tell itself
// cheaply: a few reads of counters the kernel and the Go runtime keep
// anyway, taken at the start and the end of a measured window. The
// difference, divided by the window's requests, is the breakdown of a row
// (-breakdown; the breakdown suite): where a client's CPU per request goes,
// not only how much of it there is.
type usage struct {
	User time.Duration `json:"user_ns"` // getrusage(RUSAGE_SELF)
	Sys  time.Duration `json:"sys_ns"`
	// Voluntary context switches (getrusage's ru_nvcsw): an OS thread of
	// the process blocked in the kernel (a futex wait, an epoll wait that
	// had nothing, a nanosleep) and was woken again. Involuntary ones
	// (ru_nivcsw): a thread preempted by the kernel.
	VolCsw   int64 `json:"voluntary_ctx_switches"`
	InvolCsw int64 `json:"involuntary_ctx_switches"`
	// Reads and Writes are the read-family and write-family system calls
	// (/proc/self/io syscr and syscw: read, readv, pread; write, writev,
	// pwrite), failed ones (EAGAIN) included. Socket calls of the
	// recv/send family (a look with recv(MSG_PEEK), sendmsg) and
	// epoll_wait are not counted there.
	Reads  int64 `json:"read_syscalls"`
	Writes int64 `json:"write_syscalls"`
	// From runtime/metrics: heap allocations (objects and bytes), GC
	// cycles, goroutines created, and goroutine switches: the runtime
	// samples one in gTrackingPeriod (8) of each goroutine's moves out of
	// running (parking, yielding, preemption) into /sched/latencies, so
	// 8 times its count estimates them. MutexWait is the time goroutines
	// waited for a sync.Mutex or RWMutex (also sampled and scaled).
	Allocs     uint64  `json:"allocs"`
	AllocBytes uint64  `json:"alloc_bytes"`
	GCs        uint64  `json:"gc_cycles"`
	Goroutines uint64  `json:"goroutines_created"`
	GoSwitches uint64  `json:"goroutine_switches"`
	MutexWait  float64 `json:"mutex_wait_seconds"`
}

// gTrackingPeriod is the runtime's sampling period of goroutine state
// changes (runtime2.go): one in 8 of a goroutine's moves out of running is
// tracked, and recorded in /sched/latencies when it runs again.
const gTrackingPeriod = 8

var usageMetrics = []string{
	"/gc/heap/allocs:objects",
	"/gc/heap/allocs:bytes",
	"/gc/cycles/total:gc-cycles",
	"/sched/goroutines-created:goroutines",
	"/sched/latencies:seconds",
	"/sync/mutex/wait/total:seconds",
}

// readUsage reads this process's usage.
func readUsage() usage {
	var u usage
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		u.User, u.Sys = time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
		u.VolCsw, u.InvolCsw = int64(ru.Nvcsw), int64(ru.Nivcsw)
	}
	u.Reads, u.Writes = procIO()
	s := make([]metrics.Sample, len(usageMetrics))
	for i, n := range usageMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	u64 := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	u.Allocs, u.AllocBytes, u.GCs, u.Goroutines = u64(0), u64(1), u64(2), u64(3)
	if s[4].Value.Kind() == metrics.KindFloat64Histogram {
		var n uint64
		for _, c := range s[4].Value.Float64Histogram().Counts {
			n += c
		}
		u.GoSwitches = gTrackingPeriod * n
	}
	if s[5].Value.Kind() == metrics.KindFloat64 {
		u.MutexWait = s[5].Value.Float64()
	}
	return u
}

// procIO returns the read and write system calls of this process so far
// (/proc/self/io: the whole process, exited threads included), or zeros
// where the system does not say.
func procIO() (reads, writes int64) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		switch string(k) {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

// sub returns u less an earlier reading.
func (u usage) sub(b usage) usage {
	return usage{
		User: u.User - b.User, Sys: u.Sys - b.Sys,
		VolCsw: u.VolCsw - b.VolCsw, InvolCsw: u.InvolCsw - b.InvolCsw,
		Reads: u.Reads - b.Reads, Writes: u.Writes - b.Writes,
		Allocs: u.Allocs - b.Allocs, AllocBytes: u.AllocBytes - b.AllocBytes,
		GCs: u.GCs - b.GCs, Goroutines: u.Goroutines - b.Goroutines,
		GoSwitches: u.GoSwitches - b.GoSwitches, MutexWait: u.MutexWait - b.MutexWait,
	}
}

// add returns the sum of two windows' usage (rounds of one row).
func (u usage) add(b usage) usage {
	return usage{
		User: u.User + b.User, Sys: u.Sys + b.Sys,
		VolCsw: u.VolCsw + b.VolCsw, InvolCsw: u.InvolCsw + b.InvolCsw,
		Reads: u.Reads + b.Reads, Writes: u.Writes + b.Writes,
		Allocs: u.Allocs + b.Allocs, AllocBytes: u.AllocBytes + b.AllocBytes,
		GCs: u.GCs + b.GCs, Goroutines: u.Goroutines + b.Goroutines,
		GoSwitches: u.GoSwitches + b.GoSwitches, MutexWait: u.MutexWait + b.MutexWait,
	}
}

// cpu is the user and system CPU of the window.
func (u usage) cpu() time.Duration { return u.User + u.Sys }

// breakdown is a window's usage per successful request: the breakdown
// columns (README.md#columns).
type breakdown struct {
	SysUs       float64 `json:"sys_us"`                   // system CPU, µs (part of CPU/req)
	Reads       float64 `json:"reads"`                    // read-family system calls
	Writes      float64 `json:"writes"`                   // write-family system calls
	CtxSw       float64 `json:"ctx_switches"`             // voluntary context switches (thread sleeps)
	GoSwitches  float64 `json:"goroutine_switches"`       // goroutine switches, estimated (sampled 1 in 8)
	Goroutines  float64 `json:"goroutines_created"`       // goroutines started
	Allocs      float64 `json:"allocs"`                   // heap allocations
	AllocBytes  float64 `json:"alloc_bytes"`              // heap bytes allocated
	GCPer1k     float64 `json:"gc_per_1k_requests"`       // GC cycles per 1000 requests
	MutexUs     float64 `json:"mutex_wait_us"`            // time waited on sync.Mutex, µs
	Involuntary float64 `json:"involuntary_ctx_switches"` // preemptions by the kernel
}

// per divides a window's usage by its successful requests.
func (u usage) per(requests int64) *breakdown {
	if requests <= 0 {
		return nil
	}
	n := float64(requests)
	return &breakdown{
		SysUs:       float64(u.Sys.Nanoseconds()) / 1e3 / n,
		Reads:       float64(u.Reads) / n,
		Writes:      float64(u.Writes) / n,
		CtxSw:       float64(u.VolCsw) / n,
		Involuntary: float64(u.InvolCsw) / n,
		GoSwitches:  float64(u.GoSwitches) / n,
		Goroutines:  float64(u.Goroutines) / n,
		Allocs:      float64(u.Allocs) / n,
		AllocBytes:  float64(u.AllocBytes) / n,
		GCPer1k:     1000 * float64(u.GCs) / n,
		MutexUs:     u.MutexWait * 1e6 / n,
	}
}

// breakdownCols are the breakdown's columns, after CPU/req.
var breakdownCols = []string{"sys/req", "reads", "writes", "csw", "g-sw", "g-new", "allocs", "B/req", "GC/1k", "lock"}

// cells prints a breakdown as its columns.
func (b *breakdown) cells() []string {
	if b == nil {
		out := make([]string, len(breakdownCols))
		for i := range out {
			out[i] = "-"
		}
		return out
	}
	return []string{
		fmt.Sprintf("%.1fµs", b.SysUs),
		fmt.Sprintf("%.2f", b.Reads),
		fmt.Sprintf("%.2f", b.Writes),
		fmt.Sprintf("%.2f", b.CtxSw),
		fmt.Sprintf("%.1f", b.GoSwitches),
		fmt.Sprintf("%.3f", b.Goroutines),
		fmt.Sprintf("%.1f", b.Allocs),
		fmt.Sprintf("%.0f", b.AllocBytes),
		fmt.Sprintf("%.2f", b.GCPer1k),
		fmt.Sprintf("%.2fµs", b.MutexUs),
	}
}
