package h1

import (
	"syscall"
	"time"
)

// threadCPU is the CPU time of the calling OS thread (lock the goroutine
// to it first): a benchmark figure that holds better than ns/op when
// other work shares the machine.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(1, &ru) != nil { // RUSAGE_THREAD
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
