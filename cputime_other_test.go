//go:build !linux

package pipelined

import "time"

// processCPU is not measured here: the benchmarks report no CPU metric.
func processCPU() time.Duration { return 0 }
