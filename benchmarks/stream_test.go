package main

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestItemURL: itemURL(base, id) = base + "items/" + id in 16 hex digits.
func TestItemURL(t *testing.T) {
	for _, c := range []struct {
		base string
		id   uint64
		want string
	}{
		{"http://h/", 0, "http://h/items/0000000000000000"},
		{"http://h/", 0xab, "http://h/items/00000000000000ab"},
		{"https://127.0.0.1:80/", 1<<64 - 1, "https://127.0.0.1:80/items/ffffffffffffffff"},
	} {
		if got := itemURL(c.base, c.id); got != c.want {
			t.Errorf("itemURL(%q, %#x) = %q, want %q", c.base, c.id, got, c.want)
		}
	}
	tg := newTargets(clientConfig{Addrs: []string{"h:1"}, IDs: true})
	a, b := tg.next(), tg.next()
	if !strings.HasPrefix(a, "http://h:1/items/") || len(a) != len("http://h:1/items/")+16 || a == b {
		t.Errorf("targets with IDs: %q then %q, want two different http://h:1/items/<16 hex digits>", a, b)
	}
}

// TestRESTServers: both servers answer any /items/<id> path with the body,
// and /stream with ndjson lines until the client closes, after which the
// stream's runner counts no failure; every client row sends the ids.
func TestRESTServers(t *testing.T) {
	for _, mode := range []string{modeSerial, modeConcurrent} {
		srv, err := startServer(serverConfig{Mode: mode, Body: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{clientNetHTTP, clientPipelined, clientFastHost, clientFastPipeline} {
			cfg := clientConfig{Addrs: []string{srv.Addr}, C: 2, K: 2, Timeout: 10 * time.Second, Dialer: newDialCounter(), IDs: true}
			cl, err := newClient(name, cfg)
			if err != nil {
				t.Fatalf("%s %s: %v", mode, name, err)
			}
			if n, err := cl.Do(context.Background()); n != 100 || err != nil {
				t.Errorf("%s %s: Do = %d, %v; want 100, nil", mode, name, n, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), streamPeriod+streamPeriod/2)
			st := runStream(ctx, cl, cfg, name)
			cancel()
			if st.Opened < 1 || st.Lines < st.Opened || st.Failed != 0 {
				t.Errorf("%s %s: stream %+v, want opened, lines read, none failed", mode, name, *st)
			}
			cl.Close()
		}
		resp, err := http.Get("http://" + srv.Addr + streamPath)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" || line != `{"n":0}`+"\n" || err != nil {
			t.Errorf("%s: stream %q, first line %q, %v", mode, ct, line, err)
		}
		resp.Body.Close()
		http.DefaultClient.CloseIdleConnections()
		srv.Close()
	}
}
