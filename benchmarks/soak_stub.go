//go:build nopipelined

package main

import (
	"errors"
	"io"
	"time"
)

// Built with -tags nopipelined: there is no soak (it drives the library).

const modeFault = "fault"

type soakConfig struct {
	Duration  time.Duration
	Conns     int
	Depth     int
	Parallel  int
	FaultRate float64
	Faults    string
	Seed      uint64
	Stall     time.Duration
	Timeout   time.Duration
	Progress  time.Duration
}

func defaultSoakConfig() soakConfig { return soakConfig{} }

type soakResult struct{}

func (*soakResult) Passed() bool { return false }

func runSoak(soakConfig, io.Writer) (*soakResult, error) {
	return nil, errors.New("soak: built with -tags nopipelined")
}

func serveFaultChild(soakConfig) error {
	return errors.New("soak: built with -tags nopipelined")
}
