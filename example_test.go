package pipelined_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/pipelined/pipelined"
)

// The Transport goes where an *http.Transport would: in http.Client's
// Transport field. Everything http.Client does (redirects, cookies,
// Client.Timeout) works on top of it. Install it per client; do not
// replace http.DefaultTransport, which much code asserts to be an
// *http.Transport.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.URL.Path)
	}))
	defer srv.Close()

	t := pipelined.NewTransport(pipelined.TransportOptions{})
	defer t.Close()
	client := &http.Client{Transport: t, Timeout: 30 * time.Second}

	resp, err := client.Get(srv.URL + "/greeting")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Proto, resp.Status)
	fmt.Println(string(body))
	// Output:
	// HTTP/1.1 200 OK
	// hello from /greeting
}

// OptionsFrom swaps an existing *http.Transport for a pipelined one in one
// line, carrying its dialer, TLS, proxy, timeout and limit settings.
func ExampleOptionsFrom() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()

	t := pipelined.NewTransport(pipelined.OptionsFrom(http.DefaultTransport.(*http.Transport)))
	defer t.Close()
	client := &http.Client{Transport: t}

	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: ok
}

// An http.Transport's proxy settings come along with OptionsFrom. Here a
// local server plays an HTTP forward proxy: it receives the request in
// absolute form.
func ExampleOptionsFrom_proxy() {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proxied %s %s", r.Method, r.URL)
	}))
	defer proxy.Close()
	proxyURL, _ := url.Parse(proxy.URL)

	old := &http.Transport{Proxy: http.ProxyURL(proxyURL), IdleConnTimeout: 90 * time.Second}
	t := pipelined.NewTransport(pipelined.OptionsFrom(old))
	defer t.Close()
	client := &http.Client{Transport: t}

	resp, err := client.Get("http://origin.example/page")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: proxied GET http://origin.example/page
}

// Clone returns an independent Transport with the same options, as
// http.Transport's Clone does.
func ExampleTransport_Clone() {
	base := pipelined.NewTransport(pipelined.TransportOptions{PipelineDepth: 2})
	defer base.Close()
	other := base.Clone() // same options, its own connections
	defer other.Close()
	fmt.Println(other != base)
	// Output: true
}
