package pipelined

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseKeepAlive(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name  string
		lines []string // Keep-Alive field lines; nil: no field
		want  keepAliveHint
	}{
		{"absent", nil, keepAliveHint{}},
		{"empty", []string{""}, keepAliveHint{}},
		{"node default", []string{"timeout=5"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true}},
		{"apache", []string{"timeout=5, max=100"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 100, hasMax: true}},
		{"max only", []string{"max=3"}, keepAliveHint{max: 3, hasMax: true}},
		{"case", []string{"TimeOut=7, MAX=9"}, keepAliveHint{timeout: 7 * time.Second, hasTimeout: true, max: 9, hasMax: true}},
		{"spaces", []string{"  timeout = 5 ,\tmax\t=\t10  "}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 10, hasMax: true}},
		{"no space after comma", []string{"timeout=5,max=10"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 10, hasMax: true}},
		{"semicolon", []string{"timeout=5; max=10"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 10, hasMax: true}},
		{"quoted", []string{`timeout="5", max="10"`}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 10, hasMax: true}},
		{"quoted with escape", []string{`timeout="\5"`}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true}},
		{"quoted comma is not a separator", []string{`junk="a, max=1", max=4`}, keepAliveHint{max: 4, hasMax: true}},
		{"unterminated quote", []string{`timeout="5`}, keepAliveHint{}},
		{"junk after quote", []string{`timeout="5"x, max=2`}, keepAliveHint{max: 2, hasMax: true}},
		{"empty elements", []string{",,timeout=5,, ,max=2,"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 2, hasMax: true}},
		{"unknown parameters", []string{"foo=bar, timeout=5, baz"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true}},
		{"bare number (request-style Keep-Alive: 300)", []string{"300"}, keepAliveHint{}},
		{"not a number", []string{"timeout=five, max=1e3"}, keepAliveHint{}},
		{"unit", []string{"timeout=5s"}, keepAliveHint{}},
		{"fraction", []string{"timeout=1.5"}, keepAliveHint{}},
		{"sign", []string{"timeout=+5, max=-1"}, keepAliveHint{}},
		{"negative", []string{"timeout=-5"}, keepAliveHint{}},
		{"empty value", []string{"timeout=, max="}, keepAliveHint{}},
		{"no name", []string{"=5"}, keepAliveHint{}},
		{"zero", []string{"timeout=0, max=0"}, keepAliveHint{timeout: 0, hasTimeout: true, max: 0, hasMax: true}},
		{"leading zeros", []string{"timeout=0005"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true}},
		{"huge timeout capped", []string{"timeout=99999999999999999999999999"}, keepAliveHint{timeout: day, hasTimeout: true}},
		{"huge max capped", []string{"max=99999999999999999999999999"}, keepAliveHint{max: maxKeepAliveMax, hasMax: true}},
		{"just over the cap", []string{"timeout=86401"}, keepAliveHint{timeout: day, hasTimeout: true}},
		{"duplicate in one line: smallest", []string{"timeout=10, timeout=3, max=5, max=50"}, keepAliveHint{timeout: 3 * time.Second, hasTimeout: true, max: 5, hasMax: true}},
		{"duplicate over lines: smallest", []string{"timeout=3", "timeout=10, max=7", "max=2"}, keepAliveHint{timeout: 3 * time.Second, hasTimeout: true, max: 2, hasMax: true}},
		{"bad duplicate ignored", []string{"timeout=5, timeout=-1, timeout=x"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true}},
		{"junk line and good line", []string{"\x00\xff;;==", "max=1"}, keepAliveHint{max: 1, hasMax: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, l := range tt.lines {
				h.Add("Keep-Alive", l)
			}
			if got := parseKeepAlive(h); got != tt.want {
				t.Errorf("parseKeepAlive(%q) = %+v, want %+v", tt.lines, got, tt.want)
			}
		})
	}
}

// FuzzParseKeepAlive: parseKeepAlive never panics, its results are within
// bounds, and adding a field line never raises what was announced (the
// smallest value of a parameter wins). The input's lines are field lines.
func FuzzParseKeepAlive(f *testing.F) {
	for _, s := range []string{"timeout=5", "timeout=5, max=100", `timeout="5"`, "max=3\ntimeout=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lines := strings.Split(s, "\n")
		got := parseKeepAlive(http.Header{"Keep-Alive": lines})
		if got.timeout < 0 || got.timeout > maxKeepAliveTimeout || got.timeout%time.Second != 0 || (!got.hasTimeout && got.timeout != 0) {
			t.Fatalf("parseKeepAlive(%q): timeout = %v (has %v), out of bounds", lines, got.timeout, got.hasTimeout)
		}
		if got.max < 0 || got.max > maxKeepAliveMax || (!got.hasMax && got.max != 0) {
			t.Fatalf("parseKeepAlive(%q): max = %d (has %v), out of bounds", lines, got.max, got.hasMax)
		}
		if len(lines) < 2 {
			return
		}
		first := parseKeepAlive(http.Header{"Keep-Alive": lines[:len(lines)-1]})
		if first.hasTimeout && (!got.hasTimeout || got.timeout > first.timeout) {
			t.Fatalf("parseKeepAlive(%q): timeout %v (has %v), more than %v without the last line", lines, got.timeout, got.hasTimeout, first.timeout)
		}
		if first.hasMax && (!got.hasMax || got.max > first.max) {
			t.Fatalf("parseKeepAlive(%q): max %d (has %v), more than %d without the last line", lines, got.max, got.hasMax, first.max)
		}
	})
}
