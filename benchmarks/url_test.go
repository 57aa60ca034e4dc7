package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// runURL runs the -url table against base with small bounds (maxRequests
// per client and scenario) and returns the results and the printed output.
func runURL(t *testing.T, base, maxRequests string) ([]result, string) {
	t.Helper()
	o, err := parseOptions("2", "2", "4", "", "300ms", "0s", "5s", "", "", "", "", "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.setRunFlags("", base, "", maxRequests, "300ms", ""); err != nil {
		t.Fatal(err)
	}
	o.urlPause = 0
	o.jsonFile = filepath.Join(t.TempDir(), "url.json")
	var warn strings.Builder
	printURLWarning(&warn, o)
	if !strings.Contains(warn.String(), "WARNING: this sends load to "+base) {
		t.Errorf("warning does not name the URL:\n%s", warn.String())
	}
	var out strings.Builder
	if err := run(o, &out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	b, err := os.ReadFile(o.jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Results []result }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != 2 || doc.Results[0].Client != clientNetHTTP || doc.Results[1].Client != clientPipelined {
		t.Fatalf("results %+v, want net/http and pipelined", doc.Results)
	}
	for _, r := range doc.Results {
		if r.Requests == 0 || r.Errors != 0 {
			t.Errorf("%s: %d requests, %d errors (%s)", r.Client, r.Requests, r.Errors, r.FirstError)
		}
	}
	return doc.Results, out.String()
}

// TestURLAgainstLocalServer runs -url against an httptest server and checks
// that the request bound holds (no client sends more than -max-requests).
func TestURLAgainstLocalServer(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Write([]byte("hello"))
	}))
	defer srv.Close()
	rs, _ := runURL(t, srv.URL+"/x", "40")
	if got := n.Load(); got > 2*40 {
		t.Errorf("server got %d requests, want at most 2 clients x 40", got)
	}
	for _, r := range rs {
		if r.Bytes != 5*r.Requests {
			t.Errorf("%s: %d body bytes for %d requests, want 5 each", r.Client, r.Bytes, r.Requests)
		}
	}
}

// TestURLRedirectNotFollowed: -url sends load to the URL it names only; a
// redirect is an error, not a request elsewhere.
func TestURLRedirectNotFollowed(t *testing.T) {
	var other atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { other.Add(1) }))
	defer target.Close()
	srv := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusFound))
	defer srv.Close()
	cl, err := newClient(clientPipelined, clientConfig{URL: srv.URL, C: 1, K: 1, Timeout: 5 * time.Second, Dialer: newDialCounter()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Do(t.Context()); err == nil || !strings.Contains(err.Error(), "302") {
		t.Errorf("Do = %v, want a status 302 error", err)
	}
	if other.Load() != 0 {
		t.Error("the redirect was followed")
	}
}

// TestURLRefused: only an explicit http(s) URL with a host is accepted.
func TestURLRefused(t *testing.T) {
	for _, u := range []string{"example.com", "localhost:8080", "/path", "ftp://127.0.0.1/", "http://", "http:///x", "https://user:pw@127.0.0.1/", "127.0.0.1"} {
		if err := checkURL(u); err == nil {
			t.Errorf("checkURL(%q) = nil, want an error", u)
		}
	}
	for _, u := range []string{"http://127.0.0.1:8080/", "https://example.com/a?b=c", "http://[::1]:80/"} {
		if err := checkURL(u); err != nil {
			t.Errorf("checkURL(%q) = %v, want nil", u, err)
		}
	}
	o, err := parseOptions("", "", "", "", "", "", "", "", "", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range [][4]string{
		{"", "http://127.0.0.1/", "POST", ""},        // GET or HEAD only
		{"", "http://127.0.0.1/", "", "0"},           // a positive bound
		{"", "http://127.0.0.1/", "", "99999999999"}, // a bounded bound
		{"bodies", "http://127.0.0.1/", "", ""},      // no suite with -url
		{"nosuch", "", "", ""},
	} {
		if err := o.setRunFlags(tc[0], tc[1], tc[2], tc[3], "", ""); err == nil {
			t.Errorf("setRunFlags(%q) = nil, want an error", tc)
		}
	}
}

// TestURLAgainstNginx runs -url against a local nginx (127.0.0.1, started
// by the test) and counts the requests nginx logged: at most the bound. It
// skips when nginx is not installed, and fails then under CI=true.
func TestURLAgainstNginx(t *testing.T) {
	base, accessLog, stop := startNginx(t)
	rs, _ := runURL(t, base+"/bench", "60")
	stop()
	b, err := os.ReadFile(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	logged := bytes.Count(b, []byte("\n"))
	if logged == 0 || logged > 2*60 {
		t.Errorf("nginx logged %d requests, want 1 to 2 clients x 60", logged)
	}
	if n := rs[0].Requests + rs[1].Requests; int64(logged) < n {
		t.Errorf("nginx logged %d requests, the clients counted %d successes", logged, n)
	}
}

// startNginx runs nginx in the foreground on a free 127.0.0.1 port,
// answering 200 "ok" to everything and logging each request to the
// returned file; stop ends it (also at the end of the test). As the root
// module's nginx test, it skips when nginx is missing unless CI=true.
func startNginx(t *testing.T) (base, accessLog string, stop func()) {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nginx not found (CI=true requires it): %v", err)
		}
		t.Skipf("nginx not found: %v (install nginx-light)", err)
	}
	v, _ := exec.Command(bin, "-V").CombinedOutput()
	for try := 0; ; try++ {
		dir := t.TempDir()
		var temps strings.Builder
		for _, m := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
			if m != "client_body" && bytes.Contains(v, []byte("--without-http_"+m+"_module")) {
				continue
			}
			tdir := filepath.Join(dir, m)
			if err := os.Mkdir(tdir, 0o700); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&temps, "\t%s_temp_path %s;\n", m, tdir)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		accessLog = filepath.Join(dir, "access.log")
		conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
	log_format plain "$request";
	access_log %[2]s plain;
%[3]s	keepalive_timeout 30s;
	server {
		listen %[4]s;
		location / { return 200 "ok"; }
	}
}
`, dir, accessLog, temps.String(), addr)
		confPath := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(bin, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting nginx: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			cmd.Process.Signal(os.Interrupt) // fast shutdown, the log flushed
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		}
		ready := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				ready = true
				break
			}
			select {
			case err := <-exited:
				exited <- err
			default:
				continue
			}
			break
		}
		if ready {
			t.Cleanup(stop)
			return "http://" + addr, accessLog, stop
		}
		stop()
		if try >= 2 {
			logs, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx did not start on %s: %s\n%s", addr, out.String(), logs)
		}
	}
}
