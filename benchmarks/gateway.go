package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The gateway suite: net/http/httputil.ReverseProxy in a child process, its
// Transport the row's (net/http, pipelined, fasthttp's engines behind
// RoundTripper), in front of a backend (the program's own servers, or
// nginx where it is installed), driven by gatewayCallers callers on as many
// keep-alive net/http connections. Its CPU is the gateway's alone: the
// child reports its own usage (usagePath) at the window's edges.
const (
	// modeGateway is the -serve child that runs the reverse proxy.
	modeGateway = "gateway"
	// modeNginx is the backend nginx, started by the run when installed.
	modeNginx = "nginx"
	// usagePath answers the gateway child's usage (usage.go) as JSON.
	usagePath = "/_bench/usage"

	gatewayCallers = 128
	gatewayConns   = 16 // the gateway's connections to its backend, C
)

// gatewayRows are the gateway suite's rows: the transports behind the proxy.
var gatewayRows = []string{clientNetHTTP, clientPipelined, clientFastHostRT, clientFastPipelineRT}

// gatewayUsage is the gateway child's answer on usagePath: its usage, the
// connections its transport dialed to the backend and has open now
// (Stats for pipelined, the dial counter for the others).
type gatewayUsage struct {
	Usage usage `json:"usage"`
	Dials int64 `json:"dials"`
	Open  int64 `json:"open"`
}

// serveGateway runs the gateway child: a ReverseProxy to cfg.Backend over
// the transport of the row cfg.Transport, C connections to the backend
// (pipelined and fasthttp's PipelineClient: depth K).
func serveGateway(cfg serverConfig) error {
	dc := newDialCounter()
	cl, err := newClient(cfg.Transport, clientConfig{Addrs: []string{cfg.Backend}, C: cfg.C, K: cfg.K, Timeout: cfg.Timeout, Dialer: dc})
	if err != nil {
		return err
	}
	hc, ok := cl.(*httpClient)
	if !ok {
		return fmt.Errorf("gateway: %s is not an http.RoundTripper", cfg.Transport)
	}
	backend := &url.URL{Scheme: "http", Host: cfg.Backend}
	var bufs sync.Pool
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(backend) },
		Transport: hc.client.Transport,
		// A pool of copy buffers, as a production gateway keeps: without
		// one, every response allocates 32 KiB, the same for each row.
		BufferPool: gatewayBuffers{&bufs},
		ErrorLog:   log.New(io.Discard, "", 0), // a failure is a 502 the load counts
	}
	mux := http.NewServeMux()
	mux.Handle("/", proxy)
	mux.HandleFunc(usagePath, func(w http.ResponseWriter, r *http.Request) {
		gu := gatewayUsage{Usage: readUsage(), Dials: dc.dials.Load(), Open: dc.open.Load()}
		if ps, ok := cl.PoolStats(); ok {
			gu.Open = int64(ps.Open)
		}
		json.NewEncoder(w).Encode(gu)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	fmt.Fprintf(os.Stdout, "LISTEN %s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	cl.Close()
	return nil
}

// gatewayBuffers is a httputil.BufferPool over a sync.Pool.
type gatewayBuffers struct{ p *sync.Pool }

func (b gatewayBuffers) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b gatewayBuffers) Put(buf []byte) { b.p.Put(&buf) }

// gateway is a running gateway child and the load's view of it.
type gateway struct {
	child *childServer
	http  *http.Client
}

// startGateway starts the gateway child for the row name in front of the
// backend at addr.
func startGateway(name, backend string, sc scenario, timeout time.Duration) (*gateway, error) {
	child, err := startChildServer(serverConfig{Mode: modeGateway, Transport: name, Backend: backend, C: sc.C, K: sc.K, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	return &gateway{child: child, http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}}, nil
}

// usage asks the gateway child for its usage.
func (g *gateway) usage() (gatewayUsage, error) {
	var gu gatewayUsage
	resp, err := g.http.Get("http://" + g.child.Addr + usagePath)
	if err != nil {
		return gu, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return gu, fmt.Errorf("gateway usage: %s", resp.Status)
	}
	return gu, json.NewDecoder(resp.Body).Decode(&gu)
}

func (g *gateway) Close() {
	g.http.CloseIdleConnections()
	g.child.Close()
}

// errNginxMissing: the nginx rows are skipped.
var errNginxMissing = errors.New("nginx not found (install nginx or nginx-light): its rows are skipped")

// findNginx returns the nginx program: on PATH, or where distributions
// put it.
func findNginx() (string, error) {
	if bin, err := exec.LookPath("nginx"); err == nil {
		return bin, nil
	}
	for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errNginxMissing
}

// nginxBackend is an nginx started by the run: one worker on 127.0.0.1
// answering every request at once with body bytes, keep-alive connections
// kept for the whole run.
type nginxBackend struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// startNginxBackend starts nginx in the foreground with a configuration
// of its own in a temporary directory (the temporary paths of its modules
// there too: their defaults may not exist or be writable).
func startNginxBackend(body int) (*nginxBackend, error) {
	bin, err := findNginx()
	if err != nil {
		return nil, err
	}
	v, _ := exec.Command(bin, "-V").CombinedOutput()
	for try := 0; ; try++ {
		dir, err := os.MkdirTemp("", "pipelined-benchmarks-nginx")
		if err != nil {
			return nil, err
		}
		var temps strings.Builder
		for _, m := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
			if m != "client_body" && bytes.Contains(v, []byte("--without-http_"+m+"_module")) {
				continue
			}
			tdir := filepath.Join(dir, m)
			if err := os.Mkdir(tdir, 0o700); err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
			fmt.Fprintf(&temps, "\t%s_temp_path %s;\n", m, tdir)
		}
		// A free port: another process may take it before nginx binds
		// it, hence the retries.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		addr := l.Addr().String()
		l.Close()
		conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
%[2]s	keepalive_requests 1000000;
	keepalive_timeout 60s;
	server {
		listen %[3]s;
		location / { default_type text/plain; return 200 "%[4]s"; }
	}
}
`, dir, temps.String(), addr, strings.Repeat("x", body))
		confPath := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		var out bytes.Buffer
		cmd := exec.Command(bin, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("starting nginx: %w", err)
		}
		n := &nginxBackend{Addr: addr, cmd: cmd, dir: dir, done: make(chan struct{})}
		go func() { cmd.Wait(); close(n.done) }()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			select {
			case <-n.done:
			default:
				if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
					c.Close()
					return n, nil
				}
				continue
			}
			break
		}
		n.Close()
		if try >= 2 {
			return nil, fmt.Errorf("nginx did not start on %s: %s", addr, out.String())
		}
	}
}

// Close stops nginx (a fast shutdown) and removes its directory.
func (n *nginxBackend) Close() {
	n.cmd.Process.Signal(os.Interrupt)
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
		n.cmd.Process.Kill()
		<-n.done
	}
	os.RemoveAll(n.dir)
}
