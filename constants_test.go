package pipelined

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
)

// modelDir is the host model's package, whose constants the tables hold
// beside this package's.
const modelDir = "internal/model"

// byteSize marks a constant of fixedValues that counts bytes: its value is
// written "256 KiB" when it is a multiple of 1024. Other integers (counts of
// requests, samples, codes) are written in decimal.
type byteSize int64

// fixedValues holds every numeric constant of the package's source and of
// its internal packages' (named pkg.Name), by name, with its value as the
// compiler sees it. Each has one row in the table of
// docs/model.md (Tuning values) or of docs/design.md (Fixed values), whose
// value cell is the value's canonical form (canonical). A constant added
// gets an entry here and a row in one table: wrapped in byteSize if it
// counts bytes, converted to uint64 if it overflows int. The constants of
// internal/model, which this package cannot name, are read from its source
// by the type checker instead (modelValues).
var fixedValues = map[string]any{
	// addrs.go
	"fallbackDelay": fallbackDelay,
	"ejectBase":     ejectBase,
	"ejectMax":      ejectMax,
	// dialer.go
	"connectTimeout": connectTimeout,
	"dialTimeout":    dialTimeout,
	"tcpKeepAlive":   tcpKeepAlive,
	// keepalive.go
	"keepAliveMarginMax": keepAliveMarginMax,
	// conn_direct.go
	"restWatch": restWatch,
	// request_body_probe.go
	"probeDelay": probeDelay,
	// h2.go
	"h2MaxDials":          h2MaxDials,
	"h2MaxRetries":        h2MaxRetries,
	"h2CodeProtocol":      h2CodeProtocol,
	"h2CodeRefusedStream": h2CodeRefusedStream,
	// holprotect.go
	"DefaultHeadOfLineTimeout": DefaultHeadOfLineTimeout,
	// internal/h1/keepalive.go
	"MaxKeepAliveTimeout": h1.MaxKeepAliveTimeout,
	"MaxKeepAliveMax":     h1.MaxKeepAliveMax,
	// conn_write.go, conn_read.go (ackStall)
	"bodyCopySize":         byteSize(bodyCopySize),
	"ackStall":             ackStall,
	"writeWaitBeforeReuse": writeWaitBeforeReuse,
	"maxInlineBody":        byteSize(maxInlineBody),
	"maxSmallBody":         byteSize(maxSmallBody),
	// pool_events.go
	"quickClose": quickClose,
	// request.go
	"riskyHeadFields": riskyHeadFields,
	"riskyHeadBytes":  byteSize(riskyHeadBytes),
	"maxBodyWrite":    byteSize(maxBodyWrite),
	// resolve.go
	"resolveEvery": resolveEvery,
	// retry.go
	"maxMoves":           maxMoves,
	"maxRetries":         maxRetries,
	"maxProtocolChanges": maxProtocolChanges,
	// transport.go
	"DefaultPipelineConnsPerHost":   DefaultPipelineConnsPerHost,
	"DefaultIdleConnTimeout":        DefaultIdleConnTimeout,
	"DefaultMaxConnLifetime":        DefaultMaxConnLifetime,
	"DefaultPipelineDepth":          DefaultPipelineDepth,
	"DefaultMaxResponseHeaderBytes": byteSize(DefaultMaxResponseHeaderBytes),
	"defaultBufferSize":             byteSize(defaultBufferSize),
	"maxBufferedBody":               byteSize(maxBufferedBody),
	"maxReadAhead":                  byteSize(maxReadAhead),
	"maxDrain":                      byteSize(maxDrain),
}

// canonical is how a value is written in the tables: a duration in the
// largest unit it is a whole number of ("50 ms", "2 min"), a byte size in
// KiB or MiB when it is a multiple of 1024, any other integer in decimal,
// a float as Go's %g.
func canonical(v any) string {
	switch v := v.(type) {
	case time.Duration:
		for _, u := range []struct {
			d    time.Duration
			name string
		}{
			{time.Hour, "h"}, {time.Minute, "min"}, {time.Second, "s"},
			{time.Millisecond, "ms"}, {time.Microsecond, "µs"},
		} {
			if v != 0 && v%u.d == 0 {
				return fmt.Sprintf("%d %s", v/u.d, u.name)
			}
		}
		return fmt.Sprintf("%d ns", int64(v))
	case byteSize:
		switch {
		case v != 0 && v%(1<<20) == 0:
			return fmt.Sprintf("%d MiB", v>>20)
		case v != 0 && v%(1<<10) == 0:
			return fmt.Sprintf("%d KiB", v>>10)
		}
		return fmt.Sprintf("%d B", int64(v))
	case float64:
		return fmt.Sprintf("%g", v)
	case int, int64, uint64:
		return fmt.Sprintf("%d", v)
	}
	return fmt.Sprintf("%T %v (no canonical form)", v, v)
}

func TestCanonical(t *testing.T) {
	for _, tt := range []struct {
		v    any
		want string
	}{
		{50 * time.Millisecond, "50 ms"},
		{time.Second, "1 s"},
		{90 * time.Second, "90 s"},
		{2 * time.Minute, "2 min"},
		{250 * time.Microsecond, "250 µs"},
		{24 * time.Hour, "24 h"},
		{36 * time.Hour, "36 h"},
		{1500 * time.Millisecond, "1500 ms"},
		{1200 * time.Nanosecond, "1200 ns"},
		{time.Duration(0), "0 ns"},
		{byteSize(256 << 10), "256 KiB"},
		{byteSize(10 << 20), "10 MiB"},
		{byteSize(1536 << 10), "1536 KiB"},
		{byteSize(100), "100 B"},
		{128, "128"},
		{1 << 20, "1048576"},
		{uint64(14695981039346656037), "14695981039346656037"},
		{0.02, "0.02"},
		{0.75, "0.75"},
		{1.0, "1"},
		{"text", "string text (no canonical form)"},
	} {
		if got := canonical(tt.v); got != tt.want {
			t.Errorf("canonical(%T %v) = %q, want %q", tt.v, tt.v, got, tt.want)
		}
	}
}

// sourceConstants lists the numeric constants of the package's non-test
// files and of its internal packages', by name, with the file each is
// declared in (an internal package's with its directory). It leaves out groups that use
// iota (enumerations) and string constants; a constant declared in a
// function is listed with the file "func:" and its file, since it cannot
// be named from here.
func sourceConstants(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	internal, err := filepath.Glob("internal/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	add := func(c, name string) {
		if other, ok := consts[c]; ok {
			t.Errorf("%s: constant %s is declared in %s too: the tables name constants without their package", name, c, other)
		}
		consts[c] = name
	}
	fset := token.NewFileSet()
	for _, name := range append(files, internal...) {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		top := map[*ast.GenDecl]bool{}
		for _, d := range f.Decls {
			if d, ok := d.(*ast.GenDecl); ok && d.Tok == token.CONST {
				top[d] = true
				for _, c := range numericConsts(d) {
					add(c, name)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if d, ok := n.(*ast.GenDecl); ok && d.Tok == token.CONST && !top[d] {
				for _, c := range numericConsts(d) {
					add(c, "func:"+name)
				}
			}
			return true
		})
	}
	return consts
}

// modelValues returns the values of internal/model's package-level
// constants, by name, as the type checker computes them from its source,
// in the types fixedValues gives: a time.Duration for a duration, an int
// (uint64 if it overflows int) for an integer, a float64 for a float. (No
// constant of the model counts bytes: one that did would need a byteSize
// marking here.)
func modelValues(t *testing.T) map[string]any {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(modelDir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check("github.com/pipelined/pipelined/"+modelDir, fset, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		c, ok := scope.Lookup(name).(*types.Const)
		if !ok {
			continue
		}
		v := c.Val()
		switch {
		case types.TypeString(c.Type(), nil) == "time.Duration":
			d, _ := constant.Int64Val(v)
			values[name] = time.Duration(d)
		case v.Kind() == constant.Int:
			if i, exact := constant.Int64Val(v); exact {
				values[name] = int(i)
			} else {
				u, _ := constant.Uint64Val(v)
				values[name] = u
			}
		case v.Kind() == constant.Float:
			f, _ := constant.Float64Val(v)
			values[name] = f
		}
	}
	return values
}

// numericConsts returns the names d declares, but none if d uses iota,
// and none whose value is a string.
func numericConsts(d *ast.GenDecl) []string {
	usesIota := false
	ast.Inspect(d, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == "iota" {
			usesIota = true
		}
		return !usesIota
	})
	if usesIota {
		return nil
	}
	var names []string
	for _, s := range d.Specs {
		s := s.(*ast.ValueSpec)
		if id, ok := s.Type.(*ast.Ident); ok && id.Name == "string" {
			continue
		}
		for i, name := range s.Names {
			if i < len(s.Values) {
				if lit, ok := s.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					continue
				}
			}
			if name.Name != "_" {
				names = append(names, name.Name)
			}
		}
	}
	return names
}

// tableRow is a row of a constants table: the constants it names, their
// value cells, and its file cell (empty where the table has none).
type tableRow struct {
	names, values []string
	file          string
	line          int
}

// readTable returns the rows of the first table under the heading of the
// Markdown file doc, by constant name. The first column names constants in
// backquotes ("`serialOn`, `serialOff`"), the second gives their values in
// the same order ("0.6, 0.35"); with withFile, the third names the file.
func readTable(t *testing.T, doc, heading string, withFile bool) map[string]tableRow {
	t.Helper()
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(text), "\n")
	start := slices.Index(lines, heading)
	if start < 0 {
		t.Fatalf("%s: no heading %q", doc, heading)
	}
	rows := map[string]tableRow{}
	inTable := false
	for i := start + 1; i < len(lines); i++ {
		line := lines[i]
		if !strings.HasPrefix(line, "|") {
			if inTable || strings.HasPrefix(line, "#") {
				break
			}
			continue
		}
		if !inTable { // the header row and the line under it
			inTable = true
			i++
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			t.Errorf("%s:%d: a row of fewer than three cells", doc, i+1)
			continue
		}
		var r tableRow
		r.line = i + 1
		for n := range strings.SplitSeq(cells[0], ",") {
			n = strings.TrimSpace(n)
			if len(n) < 3 || n[0] != '`' || n[len(n)-1] != '`' {
				t.Errorf("%s:%d: %q is not a constant's name in backquotes", doc, i+1, n)
				continue
			}
			r.names = append(r.names, n[1:len(n)-1])
		}
		for v := range strings.SplitSeq(cells[1], ",") {
			r.values = append(r.values, strings.TrimSpace(v))
		}
		if len(r.values) != len(r.names) {
			t.Errorf("%s:%d: %d names, %d values", doc, i+1, len(r.names), len(r.values))
			continue
		}
		if withFile {
			r.file = strings.Trim(strings.TrimSpace(cells[2]), "`")
		}
		for _, n := range r.names {
			if _, ok := rows[n]; ok {
				t.Errorf("%s:%d: %s has a row already", doc, i+1, n)
			}
			rows[n] = r
		}
	}
	if len(rows) == 0 {
		t.Errorf("%s: no table under %q", doc, heading)
	}
	return rows
}

// TestConstantTables holds the tables of docs/model.md (the model's tuning
// values) and docs/design.md (every other fixed value) to the source: each
// numeric constant has one row, in one of them, that says its value.
func TestConstantTables(t *testing.T) {
	src := sourceConstants(t)
	values := maps.Clone(fixedValues)
	modelValue := modelValues(t)
	for name, file := range src {
		if strings.HasPrefix(file, "func:") {
			t.Errorf("%s: %s is a constant declared in a function: declare it at package level, then add it to fixedValues and to its table row", strings.TrimPrefix(file, "func:"), name)
			continue
		}
		if strings.HasPrefix(file, modelDir+"/") {
			if _, ok := fixedValues[name]; ok {
				t.Errorf("fixedValues names %s, a constant of %s: its value is read from there", name, file)
			}
			values[name] = modelValue[name]
			continue
		}
		if _, ok := fixedValues[name]; !ok {
			t.Errorf("%s: constant %s is not in fixedValues: add it to the map and to its table row (docs/model.md, Tuning values, or docs/design.md, Fixed values)", file, name)
		}
	}
	for name := range fixedValues {
		if _, ok := src[name]; !ok {
			t.Errorf("fixedValues names %s, which is no numeric constant of the source any more: remove it from the map and its table row", name)
		}
	}

	const model, design = "docs/model.md", "docs/design.md"
	tuning := readTable(t, model, "## Tuning values", false)
	fixed := readTable(t, design, "## Fixed values", true)
	for name, v := range values {
		r, inTuning := tuning[name]
		doc := model
		if f, inFixed := fixed[name]; inFixed {
			if inTuning {
				t.Errorf("%s has a row in %s:%d and in %s:%d: one table only", name, model, r.line, design, f.line)
				continue
			}
			r, doc = f, design
		} else if !inTuning {
			t.Errorf("%s (%s) has no row: add one to %s (Fixed values), or to %s (Tuning values) if it is a tuning value of the model", name, canonical(v), design, model)
			continue
		}
		want := canonical(v)
		if got := r.values[slices.Index(r.names, name)]; got != want {
			t.Errorf("%s:%d: %s is %q, the table says %q", doc, r.line, name, want, got)
		}
		if file := src[name]; doc == design && r.file != file {
			t.Errorf("%s:%d: %s is declared in %s, the table says %s", doc, r.line, name, file, r.file)
		}
	}
	for doc, rows := range map[string]map[string]tableRow{model: tuning, design: fixed} {
		for name, r := range rows {
			if _, ok := values[name]; !ok {
				t.Errorf("%s:%d: the row names %s, which is no numeric constant of the source (fixedValues, or internal/model)", doc, r.line, name)
			}
		}
	}
}
