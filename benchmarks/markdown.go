package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// regenerate is the command that writes the committed benchmark page, its
// results and its plot, from the repository's root.
const regenerate = "go -C benchmarks run . -suite all -markdown ../docs/benchmarks.md -json ../docs/benchmarks.json -plot ../docs/benchmarks.svg -readme ../README.md"

// README markers: -readme replaces what lies between them.
const (
	readmeBegin = "<!-- benchmarks:begin (written by the benchmarks program: -readme) -->"
	readmeEnd   = "<!-- benchmarks:end -->"
)

// readmeSuites are the suites whose summary goes into the README: those
// that "go -C benchmarks run ." runs.
var readmeSuites = defaultSuites

// runInfo says where and how a run was made, for the page and the JSON.
type runInfo struct {
	GoVersion  string    `json:"go_version"`
	OS         string    `json:"os"`
	Arch       string    `json:"arch"`
	CPU        string    `json:"cpu,omitempty"` // model name, from /proc/cpuinfo
	NumCPU     int       `json:"num_cpu"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	Memory     string    `json:"memory,omitempty"`
	Kernel     string    `json:"kernel,omitempty"`
	Engine     string    `json:"engine,omitempty"` // git describe of the working tree
	Args       []string  `json:"args"`
	Env        []string  `json:"env,omitempty"` // the settings given by environment
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	LoadStart  string    `json:"load_start,omitempty"` // /proc/loadavg's three averages
	LoadEnd    string    `json:"load_end,omitempty"`
}

// newRunInfo describes this machine and process at the start of a run.
func newRunInfo() runInfo {
	ri := runInfo{
		GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Args: os.Args[1:], Start: time.Now().UTC(), LoadStart: loadAverage(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				ri.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			var kb int64
			if _, err := fmt.Sscanf(l, "MemTotal: %d kB", &kb); err == nil {
				ri.Memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		ri.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12").Output(); err == nil {
		ri.Engine = strings.TrimSpace(string(b))
	}
	for _, e := range []string{"CONNECTIONS", "PIPELINING", "PARALLEL", "DELAY", "DURATION", "WARMUP", "TIMEOUT",
		"BODY", "SERVER", "CLIENTS", "NOKEEPALIVE", "ROUNDS", "SUITE"} {
		if v := strings.TrimSpace(os.Getenv(e)); v != "" {
			ri.Env = append(ri.Env, e+"="+v)
		}
	}
	return ri
}

// loadAverage returns the 1, 5 and 15 minute load averages, where the
// system says them.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// command is the run's command line, as typed from the repository's root.
func (ri runInfo) command() string {
	var b strings.Builder
	for _, e := range ri.Env {
		b.WriteString(e + " ")
	}
	b.WriteString("go -C benchmarks run .")
	for _, a := range ri.Args {
		b.WriteString(" " + a)
	}
	return b.String()
}

// netHTTPTwin is the net/http row each pipelined row stands beside: the
// same configuration through net/http.
var netHTTPTwin = map[string]string{
	clientPipelined:         clientNetHTTP,
	clientPipelinedNoKA:     clientNetHTTPNoKA,
	clientPipelinedDefaults: clientNetHTTPDefaults,
	clientPipelinedH2:       clientNetHTTPH2,
	clientPipelinedH1:       clientNetHTTPH1,
	clientPipelinedHedge:    clientNetHTTP,
}

// isPeer reports whether the ratio compares like with like: a pipelined
// row with its net/http twin, and the rows held to C connections with
// fasthttp's clients (and their engines behind the net/http API).
func (r ratio) isPeer() bool {
	if netHTTPTwin[r.Row] == r.Peer {
		return true
	}
	switch r.Row {
	case clientPipelined, clientPipelinedH1, clientPipelinedHedge:
		return strings.HasPrefix(r.Peer, "fasthttp.")
	}
	return false
}

// behind reports whether a ratio is on the wrong side of 1 in any figure,
// as printed: fewer requests per second, more CPU per request, a longer
// p99 (or p99.9, where measured).
func (r ratio) behind() bool {
	return lower(r.ReqPerSec) || higher(r.CPUPerReq) || higher(r.P99) || higher(r.P999)
}

// lower and higher compare a ratio with 1 as the page prints it, to two
// decimals: 0.998 prints 1.00 and is level.
func lower(v float64) bool  { return math.Round(v*100) < 100 }
func higher(v float64) bool { return math.Round(v*100) > 100 }

// scenarioRows are the rows of one table, in the order the run made them.
type scenarioRows struct {
	sc   scenario
	rows []result
}

// byScenario groups a run's results into its tables.
func byScenario(rs []result) []scenarioRows {
	var out []scenarioRows
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].sc.String() == r.Scenario.String() && out[n-1].sc.Suite == r.Scenario.Suite {
			out[n-1].rows = append(out[n-1].rows, r)
			continue
		}
		out = append(out, scenarioRows{r.Scenario, []result{r}})
	}
	return out
}

// tail reports whether the scenario's tables show p99.9.
func (s scenarioRows) tail() bool { return s.sc.SlowFrac > 0 || s.sc.Track }

// fmtRatio prints a ratio to two decimals, in bold when worse.
func fmtRatio(v float64, worse bool) string {
	if worse {
		return fmt.Sprintf("**%.2f**", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// compactName shortens a scenario's name for the README's table.
var compactName = strings.NewReplacer(" server,", ",", " body=128B", "", "clients' defaults", "defaults", "delay=0s", "no delay", "delay=", "")

// summaryRows writes, for every table of the named suites (all suites if
// none), each pipelined row's ratios to its net/http twin and to the
// fastest fasthttp client of the table. compact (the README) keeps one
// pipelined row per table (its first), without the suite and with short
// scenario names.
func summaryRows(w io.Writer, tables []scenarioRows, suites []string, compact bool) {
	if compact {
		fmt.Fprintln(w, "| scenario | row | ÷ net/http twin: req/s, CPU/req, p99 | ÷ fastest fasthttp: req/s, CPU/req | ÷ fastest fasthttp behind RoundTripper: req/s, CPU/req |")
		fmt.Fprintln(w, "|---|---|---|---|---|")
	} else {
		fmt.Fprintln(w, "| suite | scenario | row | ÷ net/http twin: req/s, CPU/req, p99 | ÷ fastest fasthttp client: req/s, CPU/req | ÷ fastest fasthttp client behind RoundTripper: req/s, CPU/req |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
	}
	for _, t := range tables {
		if suites != nil && !slices.Contains(suites, t.sc.Suite) || t.sc.Download {
			continue // a download's figures are per MB, not per request
		}
		// The fastest fasthttp client of the table, and the fastest of
		// fasthttp's engines behind the net/http API: the like-for-like
		// peer of a drop-in transport.
		var fast, fastRT *result
		for i, r := range t.rows {
			if !strings.HasPrefix(r.Client, "fasthttp.") || !measured(r) {
				continue
			}
			f := &fast
			if strings.HasSuffix(r.Client, rtSuffix) {
				f = &fastRT
			}
			if *f == nil || r.ReqPerSec > (*f).ReqPerSec {
				*f = &t.rows[i]
			}
		}
		for _, p := range t.rows {
			twin := netHTTPTwin[p.Client]
			if twin == "" || !measured(p) {
				continue
			}
			cell := "-"
			for _, q := range t.rows {
				if q.Client == twin && measured(q) {
					rq, rc, r99 := p.ReqPerSec/q.ReqPerSec, p.CPUPerReq/q.CPUPerReq, p.P99Ms/q.P99Ms
					cell = fmt.Sprintf("%s, %s, %s", fmtRatio(rq, lower(rq)), fmtRatio(rc, higher(rc)), fmtRatio(r99, higher(r99)))
				}
			}
			fcell, rtcell := "-", "-"
			vs := func(f *result) string {
				rq, rc := p.ReqPerSec/f.ReqPerSec, p.CPUPerReq/f.CPUPerReq
				return fmt.Sprintf("%s, %s (%s)", fmtRatio(rq, lower(rq)), fmtRatio(rc, higher(rc)), f.Client)
			}
			if p.Client == clientPipelined || p.Client == clientPipelinedH1 {
				if fast != nil {
					fcell = vs(fast)
				}
				if fastRT != nil {
					rtcell = vs(fastRT)
				}
			}
			if compact {
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", compactName.Replace(t.sc.String()), p.Client, cell, fcell, rtcell)
				break
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", t.sc.Suite, t.sc, p.Client, cell, fcell, rtcell)
		}
	}
}

// writeMarkdown writes the run's page: how it was made, the summary, what
// is not ahead yet, and every table with its ratios.
func writeMarkdown(file string, rs []result, o *options, ri runInfo) error {
	tables := byScenario(rs)
	var b bytes.Buffer
	w := &b
	fmt.Fprintf(w, "# Benchmarks\n\n")
	fmt.Fprintf(w, "<!-- Written by the benchmarks program (benchmarks/markdown.go) from one run: do not edit. -->\n\n")
	fmt.Fprintf(w, "One run of the benchmarks program, %s to %s UTC. Regenerate it from the\n", ri.Start.Format("2006-01-02 15:04"), ri.End.Format("15:04"))
	fmt.Fprintf(w, "repository's root with:\n\n```sh\n%s\n```\n\n", regenerate)
	fmt.Fprintf(w, "How the figures are made and how to read them: [benchmarking.md](benchmarking.md).\n\n")

	fmt.Fprintf(w, "## Machine and run\n\n| | |\n|---|---|\n")
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "| %s | %s |\n", k, v)
		}
	}
	row("Go", fmt.Sprintf("%s %s/%s", ri.GoVersion, ri.OS, ri.Arch))
	cpu := fmt.Sprintf("%d logical CPUs, GOMAXPROCS=%d", ri.NumCPU, ri.GOMAXPROCS)
	if ri.CPU != "" {
		cpu = ri.CPU + ", " + cpu
	}
	row("CPU", cpu)
	row("memory", ri.Memory)
	row("kernel", ri.Kernel)
	if ri.LoadStart != "" {
		row("load average (1, 5, 15 min)", fmt.Sprintf("%s at the start, %s at the end", ri.LoadStart, ri.LoadEnd))
	}
	row("engine", ri.Engine)
	row("command", "`"+ri.command()+"`")
	row("duration", ri.End.Sub(ri.Start).Round(time.Second).String())
	fmt.Fprintln(w)

	fmt.Fprintf(w, "## Method\n\n")
	fmt.Fprintf(w, "Each table is one scenario: a server, C connections per host, pipeline depth K, P callers in a\n")
	fmt.Fprintf(w, "closed loop. Every client of the table runs %d round(s) of %v, %v in all (suites with a duration of their\n", o.rounds, o.duration, o.duration*time.Duration(o.rounds))
	fmt.Fprintf(w, "own, `concurrency` and `slow`, run it instead unless DURATION is given), each after an unmeasured\n")
	fmt.Fprintf(w, "warm-up of %v that lasts until every caller has had an answer; the clients' order rotates\n", o.warmup)
	fmt.Fprintf(w, "every round. The server runs in a child process on 127.0.0.1, so CPU/req is the clients' own user\n")
	fmt.Fprintf(w, "and system CPU per successful request. A ratio divides a pipelined row's figure by its peer's in\n")
	fmt.Fprintf(w, "the same table: above 1 is better for req/s, below 1 for CPU/req and latency.\n\n")

	if o.plotFile != "" {
		if rel, err := filepath.Rel(filepath.Dir(file), o.plotFile); err == nil {
			fmt.Fprintf(w, "![req/s against P per client; MB/s against body size for the bodies suites](%s)\n\n", filepath.ToSlash(rel))
		}
	}

	fmt.Fprintf(w, "## Summary\n\n")
	fmt.Fprintf(w, "Each pipelined row against its net/http twin (the same configuration through net/http),\n")
	fmt.Fprintf(w, "against the fastest fasthttp client of its table, and against the fastest of fasthttp's engines\n")
	fmt.Fprintf(w, "behind `http.RoundTripper` (the net/http API on fasthttp's engine: a drop-in transport's like-for-like\n")
	fmt.Fprintf(w, "peer). In bold: a figure on the wrong side of 1.\n\n")
	summaryRows(w, tables, nil, false)
	fmt.Fprintln(w)

	fmt.Fprintf(w, "## Not ahead yet\n\n")
	fmt.Fprintf(w, "Every comparison of like with like (a pipelined row with its net/http twin; the rows held to C\n")
	fmt.Fprintf(w, "connections also with fasthttp's clients) where pipelined is behind in any figure, noise\n")
	fmt.Fprintf(w, "included: benchmarking.md says how far a ratio moves between runs.\n\n")
	listed := false
	for _, t := range tables {
		for _, r := range ratiosOf(t.rows, t.tail()) {
			if !r.isPeer() || !r.behind() {
				continue
			}
			if !listed {
				fmt.Fprintln(w, "| suite | scenario | row ÷ peer | req/s | CPU/req | p99 | p99.9 |")
				fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
				listed = true
			}
			p999 := "-"
			if t.tail() {
				p999 = fmtRatio(r.P999, higher(r.P999))
			}
			fmt.Fprintf(w, "| %s | %s | %s ÷ %s | %s | %s | %s | %s |\n", t.sc.Suite, t.sc, r.Row, r.Peer,
				fmtRatio(r.ReqPerSec, lower(r.ReqPerSec)), fmtRatio(r.CPUPerReq, higher(r.CPUPerReq)), fmtRatio(r.P99, higher(r.P99)), p999)
		}
	}
	if !listed {
		fmt.Fprintln(w, "Nothing in this run.")
	}
	fmt.Fprintln(w)

	suite := ""
	for _, t := range tables {
		if t.sc.Suite != suite {
			suite = t.sc.Suite
			name := cmp.Or(suite, "scenarios")
			fmt.Fprintf(w, "## Suite `%s`\n\n", name)
			if about := suiteAbout[suite]; about != "" {
				fmt.Fprintf(w, "%s\n\n", about)
			}
		}
		writeMarkdownTable(w, t)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		return err
	}
	return nil
}

// writeMarkdownTable writes one scenario's table, its notes and its
// ratios to its peers.
func writeMarkdownTable(w io.Writer, s scenarioRows) {
	t := makeTable(s.sc, s.rows)
	fmt.Fprintf(w, "### %s\n\n", t.title)
	fmt.Fprintf(w, "| %s |\n|---|%s\n", strings.Join(t.cols, " | "), strings.Repeat("---:|", len(t.cols)-1))
	for _, c := range t.cells {
		fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
	}
	fmt.Fprintln(w)
	for _, n := range t.notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	var peers []ratio
	for _, r := range ratiosOf(s.rows, s.tail()) {
		if r.isPeer() {
			peers = append(peers, r)
		}
	}
	if len(peers) > 0 {
		if len(t.notes) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, "| row ÷ peer | req/s | CPU/req | p99 | p99.9 |")
		fmt.Fprintln(w, "|---|---|---|---|---|")
		for _, r := range peers {
			p999 := "-"
			if s.tail() {
				p999 = fmtRatio(r.P999, higher(r.P999))
			}
			fmt.Fprintf(w, "| %s ÷ %s | %s | %s | %s | %s |\n", r.Row, r.Peer,
				fmtRatio(r.ReqPerSec, lower(r.ReqPerSec)), fmtRatio(r.CPUPerReq, higher(r.CPUPerReq)), fmtRatio(r.P99, higher(r.P99)), p999)
		}
	}
	for _, l := range apiCostLines(s.rows) {
		fmt.Fprintf(w, "\n%s\n", l)
	}
	if s.sc.Download { // its ratios are per MB (downloadTable)
		for _, l := range t.ratios {
			fmt.Fprintf(w, "\n%s\n", l)
		}
	}
	fmt.Fprintln(w)
}

// writeReadme replaces what lies between the README's markers with the
// summary of the suites "go -C benchmarks run ." runs (one pipelined row
// per table), the run's date and machine, and a link to the full page.
func writeReadme(file, page string, rs []result, ri runInfo) error {
	old, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, readmeBegin), strings.Index(s, readmeEnd)
	if i < 0 || j < i {
		return fmt.Errorf("-readme: %s has no %q ... %q", file, readmeBegin, readmeEnd)
	}
	var b strings.Builder
	b.WriteString(readmeBegin + "\n\n")
	tables := byScenario(rs)
	has := slices.ContainsFunc(tables, func(t scenarioRows) bool { return slices.Contains(readmeSuites, t.sc.Suite) })
	suites := readmeSuites
	if !has {
		suites = nil // the run had none of them: summarise what it had
	}
	summaryRows(&b, tables, suites, true)
	fmt.Fprintf(&b, "\n%s, %s, %d CPUs, %s: `%s`", ri.GoVersion, cmp.Or(ri.CPU, ri.OS+"/"+ri.Arch), ri.NumCPU, ri.Start.Format("2006-01-02"), ri.command())
	if page != "" {
		if rel, err := filepath.Rel(filepath.Dir(file), page); err == nil {
			fmt.Fprintf(&b, " ([%s](%s))", filepath.ToSlash(rel), filepath.ToSlash(rel))
		}
	}
	b.WriteString(".\n\n")
	s = s[:i] + b.String() + s[j:]
	return os.WriteFile(file, []byte(s), 0o644)
}
