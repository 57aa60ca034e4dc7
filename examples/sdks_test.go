//lint:file-ignore SA1019 go-elasticsearch v9 deprecates Config and NewClient in favour of New, but they are what its users call, and they keep working: the recipe shows them.

package examples

// The recipes of docs/sdks.md: SDKs that assume an *http.Transport, run over
// the pipelined transport against local servers (127.0.0.1 only).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/elastic/go-elasticsearch/v9"
	"github.com/go-resty/resty/v2"
	"github.com/google/go-github/v89/github"
	"github.com/pipelined/pipelined"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// tlsConfigFor returns the TLS configuration that trusts srv's
// certificate: what a CA file or CA bundle option would do.
func tlsConfigFor(srv *httptest.Server) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return &tls.Config{RootCAs: pool}
}

// newTLSServer is httptest.NewTLSServer without the log lines of the
// handshakes the tests make fail on purpose.
func newTLSServer(h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	return srv
}

// certPEM returns srv's certificate in PEM, as an SDK's CA option takes it.
func certPEM(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func newPipelined(t *testing.T, opts pipelined.TransportOptions) *pipelined.Transport {
	tr := pipelined.NewTransport(opts)
	t.Cleanup(func() { tr.Close() })
	return tr
}

// forwardProxy is an HTTP forward proxy for http:// targets: it answers
// itself, naming the absolute URL it was asked for.
func forwardProxy(t *testing.T) (*httptest.Server, *sync.Map) {
	seen := new(sync.Map)
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.URL.String(), true)
		fmt.Fprintf(w, "proxied %s", r.URL)
	}))
	t.Cleanup(p.Close)
	return p, seen
}

// errLogger records resty's error logs.
type errLogger struct {
	mu   sync.Mutex
	errs []string
}

func (l *errLogger) Errorf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf(format, v...))
}
func (l *errLogger) Warnf(string, ...any)  {}
func (l *errLogger) Debugf(string, ...any) {}

// resty: SetTLSClientConfig, SetProxy, SetRootCertificate and
// SetCertificates only log "current transport is not an *http.Transport
// instance" and change nothing; the TLS and proxy settings go in
// TransportOptions.
func TestRestyTLSAndProxy(t *testing.T) {
	tlsSrv := newTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secure")
	}))
	defer tlsSrv.Close()
	proxy, seen := forwardProxy(t)
	proxyURL, _ := url.Parse(proxy.URL)

	// What does not work: resty's setters after SetTransport.
	logs := &errLogger{}
	broken := resty.New().SetLogger(logs).
		SetTransport(newPipelined(t, pipelined.TransportOptions{})).
		SetTLSClientConfig(tlsConfigFor(tlsSrv)).
		SetRootCertificateFromString(string(certPEM(tlsSrv))).
		SetProxy(proxy.URL)
	if _, err := broken.R().Get(tlsSrv.URL); err == nil {
		t.Error("resty's SetTLSClientConfig took effect on a pipelined transport; docs/sdks.md says it does not")
	}
	if len(logs.errs) != 3 || !strings.Contains(logs.errs[0], "not an *http.Transport") {
		t.Errorf("resty logged %q, want three 'not an *http.Transport' errors", logs.errs)
	}

	// What works: TLS and proxy in TransportOptions.
	client := resty.New().SetTransport(newPipelined(t, pipelined.TransportOptions{
		TLSClientConfig: tlsConfigFor(tlsSrv),
		Proxy: func(r *http.Request) (*url.URL, error) {
			if r.URL.Host == "backend.test" {
				return proxyURL, nil
			}
			return nil, nil
		},
	}))
	resp, err := client.R().Get(tlsSrv.URL)
	if err != nil || resp.String() != "secure" {
		t.Fatalf("TLS through TransportOptions: %v %q", err, resp.String())
	}
	resp, err = client.R().Get("http://backend.test/x")
	if err != nil || resp.String() != "proxied http://backend.test/x" {
		t.Fatalf("proxy through TransportOptions: %v %q", err, resp.String())
	}
	if _, ok := seen.Load("http://backend.test/x"); !ok {
		t.Error("the proxy did not see the request")
	}
}

// elasticServer answers like an Elasticsearch node's root endpoint.
func elasticServer(t *testing.T) *httptest.Server {
	srv := newTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Elastic-Product", "Elasticsearch")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"name":"node-1","cluster_name":"test","version":{"number":"9.0.0"},"tagline":"You Know, for Search"}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// go-elasticsearch: Config.CACert fails NewClient with a transport that is
// not an *http.Transport, and Config.CertificateFingerprint is silently
// ignored. Put the CA in TransportOptions.TLSClientConfig, and check a
// fingerprint with tls.Config.VerifyConnection.
func TestElasticsearchCA(t *testing.T) {
	srv := elasticServer(t)

	_, err := elasticsearch.NewClient(elasticsearch.Config{
		Addresses: []string{srv.URL},
		CACert:    certPEM(srv),
		Transport: newPipelined(t, pipelined.TransportOptions{}),
	})
	if err == nil || !strings.Contains(err.Error(), "unable to set CA certificate for transport of type *pipelined.Transport") {
		t.Fatalf("NewClient with CACert: %v", err)
	}

	// The CA in TransportOptions.
	es, err := elasticsearch.NewClient(elasticsearch.Config{
		Addresses: []string{srv.URL},
		Transport: newPipelined(t, pipelined.TransportOptions{TLSClientConfig: tlsConfigFor(srv)}),
	})
	if err != nil {
		t.Fatal(err)
	}
	checkInfo(t, es)

	// A wrong CertificateFingerprint is not checked with a custom
	// transport: the request succeeds.
	es, err = elasticsearch.NewClient(elasticsearch.Config{
		Addresses:              []string{srv.URL},
		CertificateFingerprint: strings.Repeat("00", 32),
		Transport:              newPipelined(t, pipelined.TransportOptions{TLSClientConfig: tlsConfigFor(srv)}),
	})
	if err != nil {
		t.Fatal(err)
	}
	checkInfo(t, es)

	// The fingerprint check in the TLS configuration instead.
	sum := sha256.Sum256(srv.Certificate().Raw)
	for _, tc := range []struct {
		name, fingerprint string
		ok                bool
	}{
		{"matching", hex.EncodeToString(sum[:]), true},
		{"wrong", strings.Repeat("00", 32), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, err := elasticsearch.NewClient(elasticsearch.Config{
				Addresses:  []string{srv.URL},
				MaxRetries: -1,
				Transport: newPipelined(t, pipelined.TransportOptions{
					TLSClientConfig: fingerprintTLS(tc.fingerprint),
				}),
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := es.Info()
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
			} else if err == nil || !strings.Contains(err.Error(), "fingerprint mismatch") {
				t.Fatalf("Info with a wrong fingerprint: %v", err)
			}
		})
	}
}

// fingerprintTLS accepts a server whose chain has a certificate with the
// given SHA-256 fingerprint (hex), as go-elasticsearch's
// CertificateFingerprint does with an *http.Transport.
func fingerprintTLS(fingerprint string) *tls.Config {
	want, _ := hex.DecodeString(fingerprint)
	return &tls.Config{
		InsecureSkipVerify: true, // replaced by VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			for _, c := range cs.PeerCertificates {
				if sum := sha256.Sum256(c.Raw); bytes.Equal(sum[:], want) {
					return nil
				}
			}
			return errors.New("fingerprint mismatch")
		},
	}
}

func checkInfo(t *testing.T, es *elasticsearch.Client) {
	t.Helper()
	res, err := es.Info()
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var info struct {
		ClusterName string `json:"cluster_name"`
	}
	if err := json.NewDecoder(res.Body).Decode(&info); err != nil || res.StatusCode != 200 || info.ClusterName != "test" {
		t.Fatalf("Info: %v %d %+v", err, res.StatusCode, info)
	}
}

// AWS SDK v2: aws.Config.HTTPClient takes any *http.Client. A custom CA
// bundle (config.WithCustomCABundle, AWS_CA_BUNDLE) needs the SDK's
// BuildableClient and fails LoadDefaultConfig: the CA goes in
// TransportOptions.TLSClientConfig.
func TestAWSS3(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_CA_BUNDLE", "")
	t.Setenv("AWS_ENDPOINT_URL", "")

	srv := newTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || r.URL.Path != "/bucket/key.txt" || !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKID/") {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello from s3")
	}))
	defer srv.Close()
	ctx := context.Background()
	// The SDK's transport settings (TLS 1.2 minimum, proxy from the
	// environment, dial and handshake timeouts), with the CA added.
	opts := pipelined.OptionsFrom(awshttp.NewBuildableClient().GetTransport())
	opts.TLSClientConfig.RootCAs = tlsConfigFor(srv).RootCAs
	httpClient := &http.Client{Transport: newPipelined(t, opts)}
	creds := config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))

	_, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"), creds,
		config.WithHTTPClient(httpClient), config.WithCustomCABundle(bytes.NewReader(certPEM(srv))))
	if err == nil || !strings.Contains(err.Error(), "unable to add custom RootCAs HTTPClient") {
		t.Fatalf("LoadDefaultConfig with a CA bundle and a custom client: %v", err)
	}

	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"), creds, config.WithHTTPClient(httpClient))
	if err != nil {
		t.Fatal(err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(srv.URL)
		o.UsePathStyle = true
	})
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket"), Key: aws.String("key.txt")})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	if b, _ := io.ReadAll(out.Body); string(b) != "hello from s3" {
		t.Fatalf("GetObject body %q", b)
	}
}

// go-github: WithTransport (or WithHTTPClient) takes the transport;
// WithAuthToken wraps it. WithEnvProxy fails NewClient with a transport
// that is not an *http.Transport: set TransportOptions.Proxy to
// http.ProxyFromEnvironment instead.
func TestGitHub(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/users/octocat" || r.Header.Get("Authorization") != "Bearer t0ken" {
			http.Error(w, `{"message":"unexpected"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"login":"octocat","id":1}`)
	}))
	defer srv.Close()
	tr := newPipelined(t, pipelined.TransportOptions{Proxy: http.ProxyFromEnvironment})

	if _, err := github.NewClient(github.WithTransport(tr), github.WithEnvProxy()); err == nil ||
		err.Error() != "cannot set environment proxy on non-http transport" {
		t.Fatalf("NewClient with WithEnvProxy: %v", err)
	}

	base := srv.URL + "/"
	gh, err := github.NewClient(github.WithTransport(tr), github.WithAuthToken("t0ken"), github.WithURLs(&base, &base))
	if err != nil {
		t.Fatal(err)
	}
	user, _, err := gh.Users.Get(context.Background(), "octocat")
	if err != nil {
		t.Fatal(err)
	}
	if user.GetLogin() != "octocat" {
		t.Fatalf("login %q", user.GetLogin())
	}
}

// golang.org/x/oauth2: the token endpoint and the API are both reached
// through the pipelined transport: oauth2.Transport{Base: ...} for a token
// source, or the oauth2.HTTPClient context value for flows that fetch
// tokens (clientcredentials, Config.Exchange).
func TestOAuth2(t *testing.T) {
	var tokenFetches int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/token":
			tokenFetches++
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"access_token":"fetched","token_type":"Bearer","expires_in":3600}`)
		default:
			io.WriteString(w, r.Header.Get("Authorization"))
		}
	}))
	defer srv.Close()
	tr := newPipelined(t, pipelined.TransportOptions{})

	get := func(c *http.Client) string {
		t.Helper()
		resp, err := c.Get(srv.URL + "/api")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}

	static := &http.Client{Transport: &oauth2.Transport{
		Base:   tr,
		Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "static"}),
	}}
	if got := get(static); got != "Bearer static" {
		t.Errorf("oauth2.Transport: Authorization %q", got)
	}

	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Transport: tr})
	cc := &clientcredentials.Config{ClientID: "id", ClientSecret: "secret", TokenURL: srv.URL + "/token"}
	client := cc.Client(ctx)
	if got := get(client); got != "Bearer fetched" {
		t.Errorf("clientcredentials: Authorization %q", got)
	}
	if _, ok := client.Transport.(*oauth2.Transport).Base.(*pipelined.Transport); !ok || tokenFetches != 1 {
		t.Errorf("clientcredentials: base %T, %d token fetches", client.Transport.(*oauth2.Transport).Base, tokenFetches)
	}
}

// otelhttp: otelhttp.NewTransport wraps the pipelined transport; spans and
// the traceparent header work as over net/http. Its own metrics duplicate
// otelpipelined's http.client.request.duration: with both, give otelhttp a
// no-op MeterProvider.
func TestOtelHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("Traceparent"))
	}))
	defer srv.Close()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	client := &http.Client{Transport: otelhttp.NewTransport(
		newPipelined(t, pipelined.TransportOptions{}),
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
	)}
	resp, err := client.Get(srv.URL + "/traced")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	sc := ended[0].SpanContext()
	if want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID()); string(b) != want {
		t.Errorf("server saw traceparent %q, want %q", b, want)
	}
}

// httputil.ReverseProxy: the pipelined transport in its Transport field
// carries the proxied requests to the backend, pipelined.
func TestReverseProxy(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "backend %s from %s", r.URL.Path, r.Header.Get("X-Forwarded-For"))
	}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: newPipelined(t, pipelined.TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 8}),
	}
	front := httptest.NewServer(proxy)
	defer front.Close()

	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			resp, err := http.Get(fmt.Sprintf("%s/item/%d", front.URL, i))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if want := fmt.Sprintf("backend /item/%d from 127.0.0.1", i); string(b) != want {
				errs <- fmt.Errorf("got %q, want %q", b, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// httputil.ReverseProxy forwards protocol upgrades (101 Switching
// Protocols) only if the transport's response body is writable: the
// pipelined transport's is, as net/http's.
func TestReverseProxyUpgrade(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade required", http.StatusUpgradeRequired)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		io.WriteString(brw, "echo: "+line)
		brw.Flush()
	}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: newPipelined(t, pipelined.TransportOptions{}),
	})
	defer front.Close()

	conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: front\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade through the proxy: %v %v", err, resp)
	}
	io.WriteString(conn, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		t.Fatalf("after the upgrade: %q %v", line, err)
	}
}
