//go:build !linux

package pipelined

import "time"

// threadCPU and processCPU are not measured here: the benchmarks report
// no CPU metric.
func threadCPU() time.Duration  { return 0 }
func processCPU() time.Duration { return 0 }
