package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	proxy := t.TempDir()
	writeProxy(t, proxy, vulndbModule, fixtureEntries(t), testVersion)
	useProxy(t, proxy)

	out := filepath.Join(t.TempDir(), "db")
	got, err := run(testVersion, out)
	if err != nil {
		t.Fatal(err)
	}
	want := "golang.org/x/vulndb@" + testVersion + " (modified 2026-11-05T23:49:57Z, 3 entries, 2 modules)"
	if got != want {
		t.Errorf("run = %q, want %q", got, want)
	}
	for _, name := range []string{"index/db.json", "index/modules.json", "index/vulns.json", "ID/GO-9999-0001.json"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Error(err)
		}
	}
}

func TestRunErrors(t *testing.T) {
	proxy := t.TempDir()
	writeProxy(t, proxy, vulndbModule, map[string]string{"README.md": "no data/osv"}, testVersion)
	useProxy(t, proxy)

	for _, tt := range []struct{ version, want string }{
		{testVersion, "no OSV entries"},
		{"v0.0.0-20990101000000-000000000000", "go mod download"},
	} {
		_, err := run(tt.version, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%s): got error %v, want one that says %q", tt.version, err, tt.want)
		}
	}
}
