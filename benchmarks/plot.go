package main

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// plotGroup is one panel: the scenarios that differ only in P, or, for
// the bodies and chunked suites, only in the body size.
type plotGroup struct {
	Suite    string
	Server   string
	C, K     int
	Delay    time.Duration
	Body     int // 0 in a bodies panel
	Method   string
	Hosts    int
	TLS      bool
	SlowFrac float64
	Defaults bool
}

// bySize reports whether the panel plots MB/s against the body size
// instead of req/s against P.
func (g plotGroup) bySize() bool { return g.Suite == "bodies" || g.Suite == "chunked" }

// x and y are a result's coordinates in its panel.
func (g plotGroup) x(r result) int {
	if g.bySize() {
		return r.Scenario.Body
	}
	return r.Scenario.P
}

func (g plotGroup) y(r result) float64 {
	if g.bySize() {
		return r.MBPerSec
	}
	return r.ReqPerSec
}

func (g plotGroup) title() string {
	sc := scenario{Server: g.Server, C: g.C, K: g.K, P: 0, Delay: g.Delay, Body: g.Body, Method: g.Method,
		Hosts: g.Hosts, TLS: g.TLS, SlowFrac: g.SlowFrac, Defaults: g.Defaults, Chunked: g.Suite == "chunked"}
	t := strings.Replace(sc.String(), " P=0", "", 1)
	t = strings.Replace(t, " clients' defaults", " defaults", 1)
	if g.bySize() {
		t = strings.Replace(t, " body=0B", "", 1) + ", MB/s"
	}
	return t
}

func groupOf(s scenario) plotGroup {
	g := plotGroup{s.Suite, s.Server, s.C, s.K, s.Delay, s.Body, s.Method, s.Hosts, s.TLS, s.SlowFrac, s.Defaults}
	if g.bySize() {
		g.Body = 0
	}
	return g
}

var clientColors = map[string]string{
	clientNetHTTP:       "#1f77b4",
	clientPipelined:     "#d62728",
	clientFastHost:      "#2ca02c",
	clientFastPipeline:  "#ff7f0e",
	clientNetHTTPNoKA:   "#9467bd",
	clientPipelinedNoKA: "#8c564b",

	clientNetHTTPDefaults:   "#17becf",
	clientPipelinedDefaults: "#e377c2",
	clientNetHTTPH2:         "#7f7f7f",
	clientNetHTTPH1:         "#1f77b4",
	clientPipelinedH2:       "#bcbd22",
	clientPipelinedH1:       "#d62728",
}

// plotSVG draws throughput against P, one line per client, one panel per
// (server, C, K, delay). Panels with a single P are left out unless no
// panel has more.
func plotSVG(rs []result) string {
	byGroup := map[plotGroup][]result{}
	for _, r := range rs {
		if r.Skipped != "" {
			continue
		}
		g := groupOf(r.Scenario)
		byGroup[g] = append(byGroup[g], r)
	}
	var groups []plotGroup
	for g, rows := range byGroup {
		ps := map[int]bool{}
		for _, r := range rows {
			ps[g.x(r)] = true
		}
		if len(ps) > 1 {
			groups = append(groups, g)
		}
	}
	if len(groups) == 0 {
		for g := range byGroup {
			groups = append(groups, g)
		}
	}
	slices.SortFunc(groups, func(a, b plotGroup) int {
		return cmp.Or(
			cmp.Compare(slices.Index(suiteNames, a.Suite), slices.Index(suiteNames, b.Suite)),
			-cmp.Compare(a.Delay, b.Delay), -cmp.Compare(a.K, b.K), cmp.Compare(a.C, b.C),
			cmp.Compare(a.Body, b.Body), cmp.Compare(serverOrder(a.Server), serverOrder(b.Server)))
	})

	// Clients present, in table order.
	var clients []string
	for _, n := range allClients {
		for _, r := range rs {
			if r.Client == n && r.Skipped == "" {
				clients = append(clients, n)
				break
			}
		}
	}

	const (
		pw, ph             = 480, 320 // panel
		ml, mr, mt, mb     = 70, 20, 40, 50
		cols               = 2
		legendH, legendRow = 30, 18
	)
	rows := (len(groups) + cols - 1) / cols
	nCols := min(cols, max(1, len(groups)))
	legendLines := (len(clients) + 2) / 3
	top := legendH + legendLines*legendRow
	W, H := nCols*pw, top+max(1, rows)*ph

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">Throughput: req/s against parallel goroutines P (bodies, chunked: MB/s against body size)</text>`+"\n", 10)
	for i, c := range clients {
		x := 10 + (i%3)*(W/3)
		y := legendH + (i/3)*legendRow
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`, x, y, x+24, y, clientColors[c])
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x+30, y+4, html.EscapeString(c))
	}
	if len(groups) == 0 {
		fmt.Fprintf(&b, `<text x="20" y="%d">no results</text>`+"\n", top+40)
	}

	for gi, g := range groups {
		ox := (gi % cols) * pw
		oy := top + (gi/cols)*ph
		rows := byGroup[g]
		var ps []int
		maxY := 0.0
		for _, r := range rows {
			if !slices.Contains(ps, g.x(r)) {
				ps = append(ps, g.x(r))
			}
			maxY = max(maxY, g.y(r))
			if !g.bySize() {
				maxY = max(maxY, r.Ideal)
			}
		}
		slices.Sort(ps)
		yTop, yStep := niceScale(maxY)
		lx0, lx1 := math.Log(float64(ps[0])), math.Log(float64(ps[len(ps)-1]))
		x0, x1 := float64(ox+ml), float64(ox+pw-mr)
		y0, y1 := float64(oy+ph-mb), float64(oy+mt)
		xOf := func(p int) float64 {
			if lx1 == lx0 {
				return (x0 + x1) / 2
			}
			return x0 + 20 + (math.Log(float64(p))-lx0)/(lx1-lx0)*(x1-x0-40)
		}
		yOf := func(v float64) float64 { return y0 - v/yTop*(y0-y1) }

		title := g.title()
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" font-weight="bold">%s</text>`+"\n", x0, oy+mt-14, html.EscapeString(title))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#888"/>`+"\n", x0, y1, x1-x0, y0-y1)
		for v := 0.0; v <= yTop+yStep/2; v += yStep {
			y := yOf(v)
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`, x0, y, x1, y)
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, fmtCount(v))
		}
		for _, p := range ps {
			x := xOf(p)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ddd"/>`, x, y0, x, y1)
			label := strconv.Itoa(p)
			if g.bySize() {
				label = fmtBytes(p)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x, y0+16, label)
		}
		axis := "P (log scale)"
		if g.bySize() {
			axis = "response body (log scale)"
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, y0+34, axis)

		// The ideal, dashed.
		var ideal []string
		for _, p := range ps {
			for _, r := range rows {
				if !g.bySize() && g.x(r) == p && r.Ideal > 0 {
					ideal = append(ideal, fmt.Sprintf("%.1f,%.1f", xOf(p), yOf(r.Ideal)))
					break
				}
			}
		}
		if len(ideal) == 1 { // one P: a short dash
			xy := strings.Split(ideal[0], ",")
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%s" x2="%.1f" y2="%s" stroke="#555" stroke-width="2" stroke-dasharray="6 4"/>`+"\n",
				(x0+x1)/2-40, xy[1], (x0+x1)/2+40, xy[1])
		}
		if len(ideal) > 0 {
			drawLine(&b, ideal, "#555", `stroke-dasharray="6 4"`)
			last := ideal[len(ideal)-1]
			xy := strings.Split(last, ",")
			fmt.Fprintf(&b, `<text x="%s" y="%s" dy="-6" text-anchor="end" fill="#555">ideal</text>`+"\n", xy[0], xy[1])
		}
		for _, c := range clients {
			var pts []string
			for _, p := range ps {
				for _, r := range rows {
					if r.Client == c && g.x(r) == p {
						pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(p), yOf(g.y(r))))
					}
				}
			}
			drawLine(&b, pts, clientColors[c], "")
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func drawLine(b *strings.Builder, pts []string, color, extra string) {
	if len(pts) == 0 {
		return
	}
	if len(pts) > 1 {
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2" %s/>`+"\n", strings.Join(pts, " "), color, extra)
	}
	if extra == "" {
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`, xy[0], xy[1], color)
		}
		b.WriteString("\n")
	}
}

func serverOrder(s string) int {
	if s == modeSerial {
		return 0
	}
	return 1
}

// niceScale returns an axis top at or above v and a round step.
func niceScale(v float64) (top, step float64) {
	if v <= 0 {
		return 1, 0.25
	}
	raw := v * 1.05 / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	return math.Ceil(v*1.05/step) * step, step
}

func fmtCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", math.Round(v/1e4)/100)
	case v >= 1e3:
		return fmt.Sprintf("%gk", math.Round(v/10)/100)
	}
	return fmt.Sprintf("%g", v)
}
