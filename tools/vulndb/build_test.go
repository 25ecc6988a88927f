package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var (
	// testSnapshot stands for the commit time of the fixture entries.
	testSnapshot = time.Date(2026, 11, 5, 23, 49, 57, 0, time.UTC)
	// modified0002 is the one fixture entry's own modified time.
	modified0002 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

func TestBuildFixtures(t *testing.T) {
	out := t.TempDir()
	sum, err := build("testdata/osv", out, testSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	if want := (summary{Modified: testSnapshot, Entries: 3, Modules: 2}); !reflect.DeepEqual(sum, want) {
		t.Errorf("summary = %+v, want %+v", sum, want)
	}

	var db dbMeta
	readJSON(t, filepath.Join(out, "index", "db.json"), &db)
	if !db.Modified.Equal(testSnapshot) {
		t.Errorf("db.json modified = %v, want %v", db.Modified, testSnapshot)
	}

	var mods []moduleMeta
	readJSON(t, filepath.Join(out, "index", "modules.json"), &mods)
	wantMods := []moduleMeta{
		{Path: "example.com/vulnerable", Vulns: []moduleVuln{
			{ID: "GO-9999-0001", Modified: testSnapshot, Fixed: "1.1.0"},
		}},
		{Path: "stdlib", Vulns: []moduleVuln{
			{ID: "GO-9999-0002", Modified: modified0002, Fixed: "99.0.0"},
			{ID: "GO-9999-0003", Modified: testSnapshot, Fixed: "1.26.0"},
		}},
	}
	if !reflect.DeepEqual(mods, wantMods) {
		t.Errorf("modules.json = %+v, want %+v", mods, wantMods)
	}

	var vulns []vulnMeta
	readJSON(t, filepath.Join(out, "index", "vulns.json"), &vulns)
	wantVulns := []vulnMeta{
		{ID: "GO-9999-0001", Modified: testSnapshot, Aliases: []string{"CVE-9999-0001"}},
		{ID: "GO-9999-0002", Modified: modified0002, Aliases: []string{"CVE-9999-0002", "GHSA-xxxx-xxxx-0002"}},
		{ID: "GO-9999-0003", Modified: testSnapshot},
	}
	if !reflect.DeepEqual(vulns, wantVulns) {
		t.Errorf("vulns.json = %+v, want %+v", vulns, wantVulns)
	}
}

// TestBuildEntryFiles checks that each entry is written whole under ID/,
// with a zero modified time, and only that, replaced by the snapshot's.
func TestBuildEntryFiles(t *testing.T) {
	out := t.TempDir()
	if _, err := build("testdata/osv", out, testSnapshot); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id       string
		modified string
	}{
		{"GO-9999-0001", "2026-11-05T23:49:57Z"},
		{"GO-9999-0002", "2026-01-02T03:04:05Z"},
		{"GO-9999-0003", "2026-11-05T23:49:57Z"},
	} {
		var in, got map[string]any
		readJSON(t, filepath.Join("testdata", "osv", tt.id+".json"), &in)
		readJSON(t, filepath.Join(out, "ID", tt.id+".json"), &got)
		if got["modified"] != tt.modified {
			t.Errorf("%s: modified = %v, want %s", tt.id, got["modified"], tt.modified)
		}
		in["modified"] = tt.modified
		if !reflect.DeepEqual(got, in) {
			t.Errorf("%s: got %v, want %v", tt.id, got, in)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	entry := func(id string) string {
		return `{"id": "` + id + `", "modified": "0001-01-01T00:00:00Z", "affected": []}`
	}
	tests := []struct {
		name     string
		files    map[string]string
		snapshot time.Time
		want     string
	}{
		{"no entries", map[string]string{"README.md": "no JSON here"}, testSnapshot, "no OSV entries"},
		{"not JSON", map[string]string{"GO-1.json": "{"}, testSnapshot, "GO-1.json: unexpected end of JSON input"},
		{"misnamed", map[string]string{"GO-1.json": entry("GO-2")}, testSnapshot, `its id is "GO-2"`},
		{"no id", map[string]string{"GO-1.json": entry("")}, testSnapshot, `its id is ""`},
		{"no modified time", map[string]string{"GO-1.json": entry("GO-1")}, time.Time{}, "no snapshot time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := t.TempDir()
			for name, body := range tt.files {
				if err := os.WriteFile(filepath.Join(in, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := build(in, t.TempDir(), tt.snapshot)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("build: got error %v, want one that says %q", err, tt.want)
			}
		})
	}
}

func TestLatestFix(t *testing.T) {
	semver := func(events ...event) osvRange { return osvRange{Type: "SEMVER", Events: events} }
	intro := func(v string) event { return event{Introduced: v} }
	fix := func(v string) event { return event{Fixed: v} }
	ecosystem := semver(intro("0"), fix("9.0.0"))
	ecosystem.Type = "ECOSYSTEM"

	tests := []struct {
		name   string
		ranges []osvRange
		want   string
	}{
		{"no ranges", nil, ""},
		{"never fixed", []osvRange{semver(intro("0"))}, ""},
		{"fixed", []osvRange{semver(intro("0"), fix("1.2.3"))}, "1.2.3"},
		{"latest of two fixes", []osvRange{semver(intro("0"), fix("1.26.9"), intro("1.27.0-0"), fix("1.27.2"))}, "1.27.2"},
		{"fixes in two ranges", []osvRange{semver(intro("1.27.0-0"), fix("1.27.2")), semver(intro("0"), fix("1.26.9"))}, "1.27.2"},
		{"reintroduced after the fix", []osvRange{semver(intro("0"), fix("1.2.0"), intro("1.5.0"))}, ""},
		{"reintroduced in another range", []osvRange{semver(intro("1.5.0")), semver(intro("0"), fix("1.2.0"))}, ""},
		{"prerelease below its release", []osvRange{semver(intro("0"), fix("2.0.0-rc.1"), fix("1.9.0"))}, "2.0.0-rc.1"},
		{"ECOSYSTEM ranges ignored", []osvRange{ecosystem, semver(intro("0"), fix("1.0.0"))}, "1.0.0"},
		{"unparsable fix", []osvRange{semver(intro("0"), fix("1.0"))}, ""},
		{"unparsable introduced", []osvRange{semver(intro("v1.0.0"), fix("1.1.0"))}, ""},
	}
	for _, tt := range tests {
		if got := latestFix(tt.ranges); got != tt.want {
			t.Errorf("%s: latestFix = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}
