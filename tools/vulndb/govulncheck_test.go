package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"
)

// govulncheckVersion is the govulncheck that .ci/run installs.
const govulncheckVersion = "v1.8.0"

// TestGovulncheckReadsDatabase runs the real govulncheck with a database
// built from the fixture entries, on a fixture module that calls their
// symbols: it must report an entry below its fixed version and not at it.
func TestGovulncheckReadsDatabase(t *testing.T) {
	govulncheck := installGovulncheck(t)
	db := t.TempDir()
	if _, err := build("testdata/osv", db, testSnapshot); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("testdata/vulnerable/vulnerable.go")
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	writeProxy(t, proxy, "example.com/vulnerable", map[string]string{"vulnerable.go": string(src)}, "v1.0.0", "v1.1.0")
	useProxy(t, proxy)

	tests := []struct {
		name    string
		require string // the version of example.com/vulnerable the fixture requires
		pkg     string // the fixture package to check
		code    int    // govulncheck's exit code: 3 when it reports a vulnerability
		ids     []string
	}{
		{"module below its fixed version", "v1.0.0", "./module", 3, []string{"GO-9999-0001"}},
		{"module at its fixed version", "v1.1.0", "./module", 0, nil},
		// GO-9999-0002 is fixed in no Go yet; GO-9999-0003 is fixed in
		// Go 1.26.0, which every Go that builds this module has.
		{"standard library", "v1.1.0", "./stdlib", 3, []string{"GO-9999-0002"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := t.TempDir()
			if err := os.CopyFS(app, os.DirFS("testdata/app")); err != nil {
				t.Fatal(err)
			}
			gomod := "module example.com/app\n\ngo 1.26.0\n\nrequire example.com/vulnerable " + tt.require + "\n"
			if err := os.WriteFile(filepath.Join(app, "go.mod"), []byte(gomod), 0o644); err != nil {
				t.Fatal(err)
			}
			goCmd(t, app, "mod", "tidy")

			cmd := exec.Command(govulncheck, "-db", "file://"+filepath.ToSlash(db), tt.pkg)
			cmd.Dir = app
			out, err := cmd.CombinedOutput()
			code := 0
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range reportedRE.FindAllStringSubmatch(string(out), -1) {
				ids = append(ids, m[1])
			}
			slices.Sort(ids)
			if code != tt.code || !reflect.DeepEqual(ids, tt.ids) {
				t.Errorf("govulncheck %s with %s: exit code %d, reported %v; want %d, %v\n%s",
					tt.pkg, tt.require, code, ids, tt.code, tt.ids, out)
			}
		})
	}
}

// reportedRE matches the heading govulncheck prints for each
// vulnerability that the code calls.
var reportedRE = regexp.MustCompile(`(?m)^Vulnerability #\d+: (GO-\d+-\d+)$`)

// installGovulncheck builds govulncheck through the module proxy into a
// temporary directory. Without it the test skips, or fails when CI=true.
func installGovulncheck(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	cmd := exec.Command("go", "install", "golang.org/x/vuln/cmd/govulncheck@"+govulncheckVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := "cannot install govulncheck " + govulncheckVersion + ": " + err.Error() + "\n" + string(out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return filepath.Join(bin, "govulncheck")
}

// goCmd runs the go command in dir and fails the test if it fails.
func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
}
