package pipelined

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// nginxOptions configures startNginxServer.
type nginxOptions struct {
	keepaliveRequests int  // keepalive_requests
	master            bool // run a master process (needed for reloads)
	accessLog         bool // log "$request_method $request_uri" lines to nginxServer.accessLog
	// tlsPEM, if set, is a file with a certificate and its key: nginx
	// listens with TLS and offers HTTP/2 (base is https://).
	tlsPEM string
}

// nginxServer is a running nginx (see startNginxServer).
type nginxServer struct {
	base      string // http://127.0.0.1:port, or https://
	accessLog string // path of the access log, if enabled
	cmd       *exec.Cmd
	stop      func() // stops nginx; idempotent, also run at the end of the test
}

// reload asks nginx to reload its configuration, as nginx -s reload does:
// SIGHUP to the master process, which starts new workers and shuts the old
// ones down gracefully.
func (s *nginxServer) reload() error { return s.cmd.Process.Signal(syscall.SIGHUP) }

// startNginx runs nginx in the foreground on a free 127.0.0.1 port with a
// config in a temporary directory, serving the location that echoes the
// request URI, and returns its base URL. It closes every connection after
// keepaliveRequests responses (nginx then answers the last one with
// "Connection: close" and drops whatever was pipelined behind it). It skips
// the test when nginx is not installed, or fails it when CI=true. nginx is
// stopped at the end of the test.
func startNginx(t *testing.T, keepaliveRequests int) string {
	t.Helper()
	return startNginxServer(t, nginxOptions{keepaliveRequests: keepaliveRequests}).base
}

// startNginxServer is startNginx with more options.
func startNginxServer(t *testing.T, o nginxOptions) *nginxServer {
	t.Helper()
	bin := requireProgram(t, "nginx-light", "nginx", "/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx")
	// Temporary paths of the modules compiled in: their defaults are under
	// /var/lib/nginx, which may not exist or be writable.
	v, _ := exec.Command(bin, "-V").CombinedOutput()
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

	for try := 0; ; try++ {
		// Pick a free port. Another process may take it before nginx binds
		// it: retry a few times on a failed start.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		master, user, accessLog, logPath := "off", "", "access_log off;", ""
		if o.master {
			master = "on"
			if os.Geteuid() == 0 {
				user = "user root;\n" // workers read the temporary directory
			}
		}
		listen, scheme := addr, "http"
		if o.tlsPEM != "" {
			// The listen parameter, not nginx 1.25's "http2 on": Debian 12
			// ships 1.22.
			listen, scheme = fmt.Sprintf("%s ssl http2;\n\t\tssl_certificate %s;\n\t\tssl_certificate_key %[2]s", addr, o.tlsPEM), "https"
		}
		if o.accessLog {
			logPath = filepath.Join(dir, "access.log")
			accessLog = "log_format ids '$request_method $request_uri';\n\taccess_log " + logPath + " ids;"
		}
		conf := fmt.Sprintf(`daemon off;
master_process %[5]s;
%[6]sworker_processes 1;
worker_shutdown_timeout 5s;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
	%[7]s
%[2]s	keepalive_requests %[3]d;
	keepalive_timeout 30s;
	server {
		listen %[4]s;
		location / { return 200 $request_uri; }
	}
}
`, dir, temps.String(), o.keepaliveRequests, listen, master, user, accessLog)
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
		var stopOnce sync.Once
		stop := func() {
			stopOnce.Do(func() {
				cmd.Process.Signal(os.Interrupt) // SIGINT: fast shutdown
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					cmd.Process.Kill()
					<-exited
				}
			})
		}
		ready := false
		deadline := time.Now().Add(10 * time.Second)
	wait:
		for time.Now().Before(deadline) {
			select {
			case err := <-exited:
				exited <- err
				break wait
			default:
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				ready = true
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ready {
			t.Cleanup(stop)
			return &nginxServer{base: scheme + "://" + addr, accessLog: logPath, cmd: cmd, stop: stop}
		}
		stop()
		logs, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		if try >= 2 {
			t.Fatalf("nginx did not start on %s: %s\n%s", addr, out.String(), logs)
		}
		t.Logf("nginx did not start on %s, retrying: %s %s", addr, out.String(), logs)
	}
}

// TestNginxPipelinedEcho sends hundreds of concurrent GETs through pipelined
// connections to a real nginx that closes each connection after 3 requests,
// so pipelines are routinely cut short with requests written and unanswered.
// Every request must get its own path back, without error.
func TestNginxPipelinedEcho(t *testing.T) {
	base := startNginx(t, 3)
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 4, PipelineDepth: 4})
	defer tr.Close()
	client := &http.Client{Transport: tr}

	const n = 600
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 200) // concurrent callers
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			path := fmt.Sprintf("/echo/%d?q=%d", i, i*7)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
			resp, err := client.Do(req)
			if err != nil {
				errs <- fmt.Errorf("GET %s: %v", path, err)
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				errs <- fmt.Errorf("GET %s: reading body: %v", path, err)
				return
			}
			if resp.StatusCode != 200 || string(body) != path {
				errs <- fmt.Errorf("GET %s = %d %q, want 200 %q", path, resp.StatusCode, body, path)
			}
		}()
	}
	wg.Wait()
	close(errs)
	nerr := 0
	for err := range errs {
		if nerr++; nerr <= 10 {
			t.Error(err)
		}
	}
	if nerr > 10 {
		t.Errorf("... %d errors in all", nerr)
	}
}

// TestNginxHEADThenGET pipelines HEAD and GET requests on one connection
// to nginx: a HEAD response declares a Content-Length but carries no body
// (RFC 9112 §6.3 ¶1), and the GET behind it must get its own response.
func TestNginxHEADThenGET(t *testing.T) {
	base := startNginx(t, 100)
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 4})
	defer tr.Close()
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			method := http.MethodGet
			if i%2 == 0 {
				method = http.MethodHead
			}
			path := fmt.Sprintf("/mixed/%d", i)
			req, _ := http.NewRequest(method, base+path, nil)
			resp, err := client.Do(req)
			if err != nil {
				errs <- fmt.Errorf("%s %s: %v", method, path, err)
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := path
			if method == http.MethodHead {
				want = ""
			}
			if err != nil || string(body) != want {
				errs <- fmt.Errorf("%s %s = %q, %v, want %q", method, path, body, err, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
