package main

import (
	"context"
	"testing"
	"time"
)

// TestGateway: each row's transport behind the reverse proxy child
// answers the load, and the child reports its own usage and backend
// connections; nginx as the backend where it is installed.
func TestGateway(t *testing.T) {
	srv, err := startServer(serverConfig{Mode: modeSerial, Body: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	backends := map[string]string{modeSerial: srv.Addr}
	if n, err := startNginxBackend(100); err == nil {
		defer n.Close()
		backends[modeNginx] = n.Addr
	} else {
		t.Log(err)
	}
	sc := scenario{Gateway: true, C: 2, K: 3, P: 4}
	for backend, addr := range backends {
		for _, name := range gatewayRows {
			t.Run(backend+"/"+name, func(t *testing.T) {
				gw, err := startGateway(name, addr, sc, 10*time.Second)
				if err != nil {
					t.Skip(err) // pipelined built out (-tags nopipelined)
				}
				defer gw.Close()
				before, err := gw.usage()
				if err != nil {
					t.Fatal(err)
				}
				cl, err := newClient(clientNetHTTP, clientConfig{Addrs: []string{gw.child.Addr}, C: 4, Timeout: 10 * time.Second, Dialer: newDialCounter()})
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				for range 5 {
					n, err := cl.Do(context.Background())
					if err != nil || n != 100 {
						t.Fatalf("through the gateway: %d bytes, %v; want 100", n, err)
					}
				}
				after, err := gw.usage()
				if err != nil {
					t.Fatal(err)
				}
				if d := after.Usage.sub(before.Usage); d.Allocs == 0 || d.Goroutines == 0 {
					t.Errorf("gateway usage over 5 requests: %+v, want allocations and goroutines", d)
				}
				if after.Dials < 1 || after.Dials > 2 || after.Open < 1 {
					t.Errorf("gateway dialed %d, has %d open; want 1 or 2 dials (C=2), some open", after.Dials, after.Open)
				}
			})
		}
	}
}
