package pipelined_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"

	"github.com/pipelined/pipelined"
	"golang.org/x/net/proxy"
)

// A golang.org/x/net/proxy dialer implements proxy.ContextDialer, whose
// DialContext plugs straight into TransportOptions.DialContext: every
// connection, TLS included, then goes through the SOCKS5 proxy. (The
// Proxy option does the same per request, with pools per proxy.)
func ExampleTransportOptions_socks5() {
	dialer, err := proxy.SOCKS5("tcp", "127.0.0.1:1080",
		&proxy.Auth{User: "user", Password: "password"}, proxy.Direct)
	if err != nil {
		log.Fatal(err)
	}
	t := pipelined.NewTransport(pipelined.TransportOptions{
		DialContext: dialer.(proxy.ContextDialer).DialContext,
	})
	defer t.Close()
	client := &http.Client{Transport: t}

	resp, err := client.Get("https://example.com/")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
}

// Proxies are chosen per request, as with net/http: from the environment
// (http.ProxyFromEnvironment: HTTP_PROXY, HTTPS_PROXY, NO_PROXY), or a
// fixed URL. http://, https://, socks5:// and socks5h:// proxy URLs are
// supported; user info in the URL authenticates to the proxy and never
// reaches the origin server. Here a local server plays an HTTP forward
// proxy for one host: it receives the request in absolute form, with the
// proxy's credentials.
func ExampleTransportOptions_proxy() {
	fwd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proxy got %s %s (%s)", r.Method, r.URL, r.Header.Get("Proxy-Authorization"))
	}))
	defer fwd.Close()
	fixed, _ := url.Parse(fwd.URL)
	fixed.User = url.UserPassword("user", "password")

	t := pipelined.NewTransport(pipelined.TransportOptions{
		Proxy: func(req *http.Request) (*url.URL, error) {
			if req.URL.Hostname() == "intranet.example" {
				return fixed, nil
			}
			return http.ProxyFromEnvironment(req)
		},
		// Sent with every CONNECT request (https:// targets through an
		// HTTP proxy).
		ProxyConnectHeader: http.Header{"User-Agent": {"my-client/1.0"}},
	})
	defer t.Close()
	client := &http.Client{Transport: t}

	resp, err := client.Get("http://intranet.example/status")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: proxy got GET http://intranet.example/status (Basic dXNlcjpwYXNzd29yZA==)
}
