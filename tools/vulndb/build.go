package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// entry is the part of an OSV entry that the database's indexes need.
type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
		Ranges []osvRange `json:"ranges"`
	} `json:"affected"`
}

// osvRange is one range of affected versions: events that introduce and
// fix the vulnerability, in SEMVER or another type the index ignores.
type osvRange struct {
	Type   string  `json:"type"`
	Events []event `json:"events"`
}

// event is one end of a range: the version that introduces the
// vulnerability, or the version that fixes it ("0" is the beginning).
type event struct {
	Introduced string `json:"introduced"`
	Fixed      string `json:"fixed"`
}

// dbMeta is index/db.json: when the database was last modified.
type dbMeta struct {
	Modified time.Time `json:"modified"`
}

// moduleMeta is one element of index/modules.json: a module and the
// entries that affect it.
type moduleMeta struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

// moduleVuln is one entry in a module's list: govulncheck fetches the
// entry only when the module's version is below Fixed, or Fixed is empty.
type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Fixed    string    `json:"fixed,omitempty"`
}

// vulnMeta is one element of index/vulns.json.
type vulnMeta struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
}

// summary says what a built database holds: its last modification and
// how many entries and modules it indexes.
type summary struct {
	Modified time.Time
	Entries  int
	Modules  int
}

// build reads every <ID>.json OSV entry in osvDir and writes the
// govulncheck v1 database layout into outDir, which it creates: the
// entries under ID/ and the three indexes under index/. An entry whose
// modified time is zero (the vulndb repository leaves it so, and fills it
// from git history only when it deploys) takes the snapshot time, the
// commit time of the version read, in its file and in the indexes.
func build(osvDir, outDir string, snapshot time.Time) (summary, error) {
	var sum summary
	names, err := filepath.Glob(filepath.Join(osvDir, "*.json"))
	if err != nil {
		return sum, err
	}
	if len(names) == 0 {
		return sum, fmt.Errorf("vulndb: no OSV entries (*.json) in %s", osvDir)
	}
	for _, dir := range []string{"ID", "index"} {
		if err := os.MkdirAll(filepath.Join(outDir, dir), 0o755); err != nil {
			return sum, err
		}
	}
	modules := map[string]*moduleMeta{}
	var vulns []vulnMeta
	for _, name := range names {
		e, raw, err := readEntry(name, snapshot)
		if err != nil {
			return sum, err
		}
		if err := os.WriteFile(filepath.Join(outDir, "ID", e.ID+".json"), raw, 0o644); err != nil {
			return sum, err
		}
		vulns = append(vulns, vulnMeta{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		if e.Modified.After(sum.Modified) {
			sum.Modified = e.Modified
		}
		for path, ranges := range rangesByModule(e) {
			m := modules[path]
			if m == nil {
				m = &moduleMeta{Path: path}
				modules[path] = m
			}
			m.Vulns = append(m.Vulns, moduleVuln{ID: e.ID, Modified: e.Modified, Fixed: latestFix(ranges)})
		}
	}
	// Glob sorts names, so vulns and each module's list are in ID order.
	mods := make([]*moduleMeta, 0, len(modules))
	for _, m := range modules {
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b *moduleMeta) int { return strings.Compare(a.Path, b.Path) })
	sum.Entries, sum.Modules = len(vulns), len(mods)
	for file, v := range map[string]any{
		"db.json":      dbMeta{Modified: sum.Modified},
		"modules.json": mods,
		"vulns.json":   vulns,
	} {
		b, err := json.Marshal(v)
		if err != nil {
			return sum, err
		}
		if err := os.WriteFile(filepath.Join(outDir, "index", file), b, 0o644); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// readEntry reads one OSV file, checks that it is named after its ID,
// and returns the entry with the file's bytes to write under ID/, its
// zero modified time replaced by snapshot.
func readEntry(name string, snapshot time.Time) (entry, []byte, error) {
	var e entry
	raw, err := os.ReadFile(name)
	if err != nil {
		return e, nil, err
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return e, nil, fmt.Errorf("vulndb: %s: %w", name, err)
	}
	if e.ID == "" || filepath.Base(name) != e.ID+".json" {
		return e, nil, fmt.Errorf("vulndb: %s: an entry's file must be named <id>.json, its id is %q", name, e.ID)
	}
	if !e.Modified.IsZero() {
		return e, raw, nil
	}
	if snapshot.IsZero() {
		return e, nil, errors.New("vulndb: an entry has no modified time and no snapshot time was given")
	}
	e.Modified = snapshot.UTC()
	// Rewrite the top level only; nested values keep their bytes.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return e, nil, err
	}
	if fields["modified"], err = json.Marshal(e.Modified); err != nil {
		return e, nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err = enc.Encode(fields)
	return e, buf.Bytes(), err
}

// rangesByModule gathers an entry's ranges per module path: an entry
// may list one module in several affected items.
func rangesByModule(e entry) map[string][]osvRange {
	m := map[string][]osvRange{}
	for _, a := range e.Affected {
		m[a.Package.Name] = append(m[a.Package.Name], a.Ranges...)
	}
	return m
}

// latestFix returns the latest fixed version among the SEMVER ranges, or
// "" when there is none, when a later version introduces the
// vulnerability again, or when a version does not parse: govulncheck
// then fetches the entry whatever the module's version.
func latestFix(ranges []osvRange) string {
	var fixed, introduced string
	for _, r := range ranges {
		if r.Type != "SEMVER" {
			continue
		}
		for _, ev := range r.Events {
			var ok bool
			if fixed, ok = later(fixed, ev.Fixed); !ok {
				return ""
			}
			if introduced, ok = later(introduced, ev.Introduced); !ok {
				return ""
			}
		}
	}
	if introduced != "" && compareSemver(introduced, fixed) > 0 {
		return ""
	}
	return fixed
}

// later returns the later of latest and v, passing over an empty v and
// "0" (the beginning of time); ok is false when v does not parse.
func later(latest, v string) (_ string, ok bool) {
	if v == "" || v == "0" {
		return latest, true
	}
	if _, ok := parseSemver(v); !ok {
		return "", false
	}
	if latest == "" || compareSemver(v, latest) > 0 {
		return v, true
	}
	return latest, true
}
