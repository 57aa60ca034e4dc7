//go:build !linux

package h1

import "time"

// threadCPU is not measured here: the benchmarks report no CPU metric.
func threadCPU() time.Duration { return 0 }
