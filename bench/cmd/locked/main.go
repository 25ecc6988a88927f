// Command locked counts the locked instructions a program executed: it
// joins a callgrind profile made with --dump-instr=yes to the program's
// disassembly (go tool objdump) and sums the executions of every
// LOCK-prefixed instruction and every XCHG with memory, which is how Go
// compiles an atomic store on amd64. Each is a full barrier that an
// uncontended atomic add also pays, so their count is the count of
// atomic operations a path does, whatever else the machine is doing.
//
//	go run ./cmd/locked CALLGRIND.OUT BINARY
//
// It prints the total and the functions that executed them, most first.
// bench/locked.sh runs it for a benchmark.
package main

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: locked CALLGRIND.OUT BINARY")
		os.Exit(2)
	}
	counts, err := executions(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	locked, err := lockedInstructions(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	perFunc := map[string]int64{}
	var total int64
	for addr, fn := range locked {
		total += counts[addr]
		if counts[addr] > 0 {
			perFunc[fn] += counts[addr]
		}
	}
	fmt.Println("total", total)
	fns := make([]string, 0, len(perFunc))
	for fn := range perFunc {
		fns = append(fns, fn)
	}
	slices.SortFunc(fns, func(a, b string) int { return cmp.Or(cmp.Compare(perFunc[b], perFunc[a]), strings.Compare(a, b)) })
	for _, fn := range fns {
		fmt.Println(perFunc[fn], fn)
	}
}

// executions returns how many times each instruction address ran, from
// a callgrind profile with one position per instruction ("instr line").
// Positions may be absolute, relative (+n, -n) or the same as before
// (*); the cost line after a calls= line is the call's inclusive cost
// and is skipped.
func executions(path string) (map[uint64]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	counts := map[uint64]int64{}
	var prev [2]int64
	skip := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || !strings.ContainsRune("0123456789+-*", rune(line[0])) {
			if strings.HasPrefix(line, "calls=") {
				skip = true
			}
			continue
		}
		parts := strings.Fields(line)
		if len(parts) < 3 {
			continue
		}
		for i := range 2 {
			v, err := position(parts[i], prev[i])
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", path, line, err)
			}
			prev[i] = v
		}
		if skip {
			skip = false
			continue
		}
		n, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, line, err)
		}
		counts[uint64(prev[0])] += n
	}
	return counts, sc.Err()
}

// position decodes one compressed callgrind position against the last.
func position(tok string, prev int64) (int64, error) {
	switch {
	case tok == "*":
		return prev, nil
	case tok[0] == '+' || tok[0] == '-':
		d, err := strconv.ParseInt(tok, 0, 64)
		return prev + d, err
	}
	return strconv.ParseInt(tok, 0, 64)
}

var objLine = regexp.MustCompile(`^\s*\S+:\d+\s+0x([0-9a-f]+)\s+\S+\s+(.*)$`)

// lockedInstructions returns the address and function of every locked
// instruction in the binary at path.
func lockedInstructions(path string) (map[uint64]string, error) {
	out, err := exec.Command("go", "tool", "objdump", path).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool objdump %s: %w", path, err)
	}
	locked := map[uint64]string{}
	fn := ""
	for line := range strings.Lines(string(out)) {
		if name, ok := strings.CutPrefix(line, "TEXT "); ok {
			fn = strings.Fields(name)[0]
			continue
		}
		m := objLine.FindStringSubmatch(strings.TrimRight(line, "\n"))
		if m == nil {
			continue
		}
		ins := m[2]
		if strings.HasPrefix(ins, "LOCK") || strings.HasPrefix(ins, "XCHG") && strings.Contains(ins, "(") {
			addr, err := strconv.ParseUint(m[1], 16, 64)
			if err != nil {
				return nil, err
			}
			locked[addr] = fn
		}
	}
	return locked, nil
}
