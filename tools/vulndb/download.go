package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// vulndbModule is the module whose data/osv directory holds the Go
// vulnerability database's entries, one OSV file per entry.
const vulndbModule = "golang.org/x/vulndb"

// snapshot is a downloaded version of golang.org/x/vulndb: its version,
// the time of its commit, and the directory of its files.
type snapshot struct {
	Version string
	Time    time.Time
	Dir     string
}

// download fetches golang.org/x/vulndb at version with the go command,
// so through GOPROXY and the checksum database, into the module cache.
func download(version string) (snapshot, error) {
	var s snapshot
	tmp, err := os.MkdirTemp("", "vulndb-download-")
	if err != nil {
		return s, err
	}
	defer os.RemoveAll(tmp)
	// Run outside any module, so that no go.mod or go.work takes part.
	cmd := exec.Command("go", "mod", "download", "-json", vulndbModule+"@"+version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var mod struct{ Version, Info, Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Error != "" || runErr != nil {
		msg := mod.Error
		if msg == "" {
			msg = strings.TrimSpace(stderr.String() + " " + fmt.Sprint(runErr))
		}
		return s, fmt.Errorf("vulndb: go mod download %s@%s: %s", vulndbModule, version, msg)
	}
	info, err := os.ReadFile(mod.Info)
	if err != nil {
		return s, err
	}
	var meta struct{ Time time.Time }
	if err := json.Unmarshal(info, &meta); err != nil {
		return s, fmt.Errorf("vulndb: %s: %w", mod.Info, err)
	}
	return snapshot{Version: mod.Version, Time: meta.Time, Dir: mod.Dir}, nil
}

// osvDir is the directory of a snapshot that holds its OSV entries.
func (s snapshot) osvDir() string { return filepath.Join(s.Dir, "data", "osv") }
