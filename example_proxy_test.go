package pipelined_test

import (
	"fmt"
	"log"
	"net/http"
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
// (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), or a fixed URL. http://, https://,
// socks5:// and socks5h:// proxy URLs are supported; user info in the URL
// authenticates to the proxy and never reaches the origin server.
func ExampleTransportOptions_proxy() {
	fixed, _ := url.Parse("http://user:password@proxy.internal:3128")
	t := pipelined.NewTransport(pipelined.TransportOptions{
		Proxy: func(req *http.Request) (*url.URL, error) {
			if req.URL.Hostname() == "intranet.example" {
				return fixed, nil
			}
			return http.ProxyFromEnvironment(req)
		},
		// Sent with every CONNECT request (https:// targets).
		ProxyConnectHeader: http.Header{"User-Agent": {"my-client/1.0"}},
	})
	defer t.Close()
	client := &http.Client{Transport: t}

	resp, err := client.Get("https://intranet.example/status")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
}
