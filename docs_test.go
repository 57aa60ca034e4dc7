package pipelined

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// designFiles returns the files named in the first column of the tables
// under docs/design.md's "Files" heading, each as a path from the
// repository's root.
func designFiles(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## Files\n")
	if start < 0 {
		t.Fatal(`docs/design.md has no "## Files" section`)
	}
	s = s[start+1:]
	if end := strings.Index(s, "\n## "); end >= 0 {
		s = s[:end]
	}
	cell := regexp.MustCompile("(?m)^\\| `([^`]+\\.go)` \\|")
	var files []string
	for _, m := range cell.FindAllStringSubmatch(s, -1) {
		files = append(files, m[1])
	}
	return files
}

// TestDesignFiles holds docs/design.md's file tables to the source: every Go
// file of the module's core (the root package and internal/) has a row, and
// every row names a file that exists, so that a file added, moved or
// renamed without its line in the tables fails here.
func TestDesignFiles(t *testing.T) {
	var have []string
	for _, pattern := range []string{"*.go", "internal/*/*.go"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		have = append(have, m...)
	}
	listed := designFiles(t)
	for _, f := range have {
		if !slices.Contains(listed, f) {
			t.Errorf("%s has no row in docs/design.md's Files tables", f)
		}
	}
	for _, f := range listed {
		if !slices.Contains(have, f) {
			t.Errorf("docs/design.md's Files tables name %s, which does not exist", f)
		}
	}
	slices.Sort(listed)
	if d := slices.Compact(slices.Clone(listed)); len(d) != len(listed) {
		t.Errorf("docs/design.md's Files tables name a file twice")
	}
}
