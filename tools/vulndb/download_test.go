package main

import (
	"archive/zip"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testVersion is the version of golang.org/x/vulndb that the tests'
// proxy serves; its commit time is testSnapshot.
const testVersion = "v0.0.0-20261105234957-e22db6528018"

// writeProxy lays out, in dir, a module proxy that the go command reads
// with GOPROXY=file://dir: it serves module path at each version, each
// holding files (name to contents) and a go.mod, with testSnapshot as
// the versions' commit time.
func writeProxy(t *testing.T, dir, path string, files map[string]string, versions ...string) {
	t.Helper()
	at := filepath.Join(dir, filepath.FromSlash(path), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod := "module " + path + "\n\ngo 1.26.0\n"
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(at, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range versions {
		write(v+".info", fmt.Sprintf(`{"Version":%q,"Time":%q}`, v, testSnapshot.Format(time.RFC3339)))
		write(v+".mod", gomod)
		f, err := os.Create(filepath.Join(at, v+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		z := zip.NewWriter(f)
		entries := map[string]string{"go.mod": gomod}
		maps.Copy(entries, files)
		for name, body := range entries {
			w, err := z.Create(path + "@" + v + "/" + name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		if err := z.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write("list", strings.Join(versions, "\n")+"\n")
}

// useProxy points the go command at the proxy in dir alone, with an empty
// module cache of the test's own and no checksum database.
func useProxy(t *testing.T, dir string) {
	t.Setenv("GOPROXY", "file://"+filepath.ToSlash(dir))
	t.Setenv("GOSUMDB", "off")
	t.Setenv("GOMODCACHE", t.TempDir())
	// The module cache is read-only without this, and TempDir's
	// clean-up could not remove it.
	t.Setenv("GOFLAGS", "-modcacherw")
	t.Setenv("GOTOOLCHAIN", "local")
	t.Setenv("GOWORK", "off")
}

// fixtureEntries returns the fixture OSV files, name to contents, as
// they sit under data/osv in golang.org/x/vulndb.
func fixtureEntries(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob("testdata/osv/*.json")
	if err != nil || len(names) == 0 {
		t.Fatalf("fixture entries: %v, %v", names, err)
	}
	files := map[string]string{}
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		files["data/osv/"+filepath.Base(name)] = string(b)
	}
	return files
}

func TestDownload(t *testing.T) {
	proxy := t.TempDir()
	writeProxy(t, proxy, vulndbModule, fixtureEntries(t), testVersion)
	useProxy(t, proxy)

	s, err := download(testVersion)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != testVersion || !s.Time.Equal(testSnapshot) {
		t.Errorf("download = version %s, time %v; want %s, %v", s.Version, s.Time, testVersion, testSnapshot)
	}
	got, err := filepath.Glob(filepath.Join(s.osvDir(), "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		got[i] = filepath.Base(got[i])
	}
	if want := []string{"GO-9999-0001.json", "GO-9999-0002.json", "GO-9999-0003.json"}; !reflect.DeepEqual(got, want) {
		t.Errorf("data/osv holds %v, want %v", got, want)
	}
}

func TestDownloadUnknownVersion(t *testing.T) {
	proxy := t.TempDir()
	writeProxy(t, proxy, vulndbModule, fixtureEntries(t), testVersion)
	useProxy(t, proxy)

	const missing = "v0.0.0-20990101000000-000000000000"
	_, err := download(missing)
	if err == nil || !strings.Contains(err.Error(), "go mod download golang.org/x/vulndb@"+missing) {
		t.Errorf("download(%s): got error %v, want one that names the module and version", missing, err)
	}
}
