package pipelined

import (
	"syscall"
	"time"
)

// threadCPU is the CPU time of the calling OS thread (lock the goroutine
// to it first), processCPU that of the process: benchmark figures that
// hold better than ns/op when other work shares the machine.
func threadCPU() time.Duration { return rusage(1) } // RUSAGE_THREAD

func processCPU() time.Duration { return rusage(syscall.RUSAGE_SELF) }

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(who, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
