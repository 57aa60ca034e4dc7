//go:build nopipelined

package main

import "errors"

// Built with -tags nopipelined: the library is left out (for when the root
// package does not build).
func newPipelinedClient(name string, cfg clientConfig) (benchClient, error) {
	return nil, errors.New("built with -tags nopipelined")
}
