package h1

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
		want  KeepAlive
	}{
		{"absent", nil, KeepAlive{}},
		{"empty", []string{""}, KeepAlive{}},
		{"node default", []string{"timeout=5"}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true}},
		{"apache", []string{"timeout=5, max=100"}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true, Max: 100, HasMax: true}},
		{"max only", []string{"max=3"}, KeepAlive{Max: 3, HasMax: true}},
		{"case", []string{"TimeOut=7, MAX=9"}, KeepAlive{Timeout: 7 * time.Second, HasTimeout: true, Max: 9, HasMax: true}},
		{"spaces", []string{"  timeout = 5 ,\tmax\t=\t10  "}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true, Max: 10, HasMax: true}},
		{"no space after comma", []string{"timeout=5,max=10"}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true, Max: 10, HasMax: true}},
		{"semicolon", []string{"timeout=5; max=10"}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true, Max: 10, HasMax: true}},
		{"quoted", []string{`timeout="5", max="10"`}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true, Max: 10, HasMax: true}},
		{"quoted with escape", []string{`timeout="\5"`}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true}},
		{"quoted comma is not a separator", []string{`junk="a, max=1", max=4`}, KeepAlive{Max: 4, HasMax: true}},
		{"unterminated quote", []string{`timeout="5`}, KeepAlive{}},
		{"junk after quote", []string{`timeout="5"x, max=2`}, KeepAlive{Max: 2, HasMax: true}},
		{"empty elements", []string{",,timeout=5,, ,max=2,"}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true, Max: 2, HasMax: true}},
		{"unknown parameters", []string{"foo=bar, timeout=5, baz"}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true}},
		{"bare number (request-style Keep-Alive: 300)", []string{"300"}, KeepAlive{}},
		{"not a number", []string{"timeout=five, max=1e3"}, KeepAlive{}},
		{"unit", []string{"timeout=5s"}, KeepAlive{}},
		{"fraction", []string{"timeout=1.5"}, KeepAlive{}},
		{"sign", []string{"timeout=+5, max=-1"}, KeepAlive{}},
		{"negative", []string{"timeout=-5"}, KeepAlive{}},
		{"empty value", []string{"timeout=, max="}, KeepAlive{}},
		{"no name", []string{"=5"}, KeepAlive{}},
		{"zero", []string{"timeout=0, max=0"}, KeepAlive{Timeout: 0, HasTimeout: true, Max: 0, HasMax: true}},
		{"leading zeros", []string{"timeout=0005"}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true}},
		{"huge timeout capped", []string{"timeout=99999999999999999999999999"}, KeepAlive{Timeout: day, HasTimeout: true}},
		{"huge max capped", []string{"max=99999999999999999999999999"}, KeepAlive{Max: MaxKeepAliveMax, HasMax: true}},
		{"just over the cap", []string{"timeout=86401"}, KeepAlive{Timeout: day, HasTimeout: true}},
		{"duplicate in one line: smallest", []string{"timeout=10, timeout=3, max=5, max=50"}, KeepAlive{Timeout: 3 * time.Second, HasTimeout: true, Max: 5, HasMax: true}},
		{"duplicate over lines: smallest", []string{"timeout=3", "timeout=10, max=7", "max=2"}, KeepAlive{Timeout: 3 * time.Second, HasTimeout: true, Max: 2, HasMax: true}},
		{"bad duplicate ignored", []string{"timeout=5, timeout=-1, timeout=x"}, KeepAlive{Timeout: 5 * time.Second, HasTimeout: true}},
		{"junk line and good line", []string{"\x00\xff;;==", "max=1"}, KeepAlive{Max: 1, HasMax: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, l := range tt.lines {
				h.Add("Keep-Alive", l)
			}
			if got := ParseKeepAlive(h); got != tt.want {
				t.Errorf("ParseKeepAlive(%q) = %+v, want %+v", tt.lines, got, tt.want)
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
		got := ParseKeepAlive(http.Header{"Keep-Alive": lines})
		if got.Timeout < 0 || got.Timeout > MaxKeepAliveTimeout || got.Timeout%time.Second != 0 || (!got.HasTimeout && got.Timeout != 0) {
			t.Fatalf("ParseKeepAlive(%q): timeout = %v (has %v), out of bounds", lines, got.Timeout, got.HasTimeout)
		}
		if got.Max < 0 || got.Max > MaxKeepAliveMax || (!got.HasMax && got.Max != 0) {
			t.Fatalf("ParseKeepAlive(%q): max = %d (has %v), out of bounds", lines, got.Max, got.HasMax)
		}
		if len(lines) < 2 {
			return
		}
		first := ParseKeepAlive(http.Header{"Keep-Alive": lines[:len(lines)-1]})
		if first.HasTimeout && (!got.HasTimeout || got.Timeout > first.Timeout) {
			t.Fatalf("ParseKeepAlive(%q): timeout %v (has %v), more than %v without the last line", lines, got.Timeout, got.HasTimeout, first.Timeout)
		}
		if first.HasMax && (!got.HasMax || got.Max > first.Max) {
			t.Fatalf("ParseKeepAlive(%q): max %d (has %v), more than %d without the last line", lines, got.Max, got.HasMax, first.Max)
		}
	})
}
