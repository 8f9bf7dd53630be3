// Package sessionreg is the user's register of running sessions and their
// launch directories. A running agent controls every path in its launch
// dir, so a second session whose launch dir overlaps it (the same dir, one
// inside it, or one that contains it) would scan and then mount paths that
// agent can swap between the scan and the mount. The register closes that
// window instead of narrowing it: a session claims its dir under a lock
// before it scans, and holds the claim until its agent is gone, so no two
// overlapping sessions ever run.
package sessionreg

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Claim is one running session's entry. Beside what the register needs
// (the session, its dir, its owner), it holds what `agent-sandbox ps`
// shows of it.
type Claim struct {
	Session string `json:"session"`
	Dir     string `json:"dir"`
	Owner   string `json:"owner"`

	Command []string  `json:"command,omitempty"`
	Started time.Time `json:"started,omitzero"`
	Ports   []string  `json:"ports,omitempty"`
	Limits  string    `json:"limits,omitempty"`
}

// Register is a directory of claims, one file each, under the user's
// runtime dir (which no launch dir may contain: the agent cannot reach
// it).
type Register struct {
	dir string
	// Alive says whether a claim's owner still runs: a killed launcher's
	// claim is stale, and removed by the next claim.
	Alive func(owner string) bool
}

// Open is the register in runtimeDir.
func Open(runtimeDir string, alive func(string) bool) Register {
	return Register{dir: filepath.Join(runtimeDir, "agent-sandbox-sessions"), Alive: alive}
}

// Overlap means another running session's launch dir overlaps this one's.
type Overlap struct {
	Dir   string
	Other Claim
}

func (o Overlap) Error() string {
	var how string
	switch {
	case o.Dir == o.Other.Dir:
		how = "session " + o.Other.Session + " runs there already"
	case within(o.Dir, o.Other.Dir):
		how = "it lies inside " + o.Other.Dir + ", where session " + o.Other.Session + " runs"
	default:
		how = "it contains " + o.Other.Dir + ", where session " + o.Other.Session + " runs"
	}
	return fmt.Sprintf("refusing to mount %s: %s, and that session's agent could change the paths this one scans and mounts; "+
		"end that session first, or start from a directory that neither contains nor lies inside %s", o.Dir, how, o.Other.Dir)
}

// within reports whether path p is dir or lies under it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// Overlaps reports whether two launch dirs overlap.
func Overlaps(a, b string) bool { return within(a, b) || within(b, a) }

// Claim records c, under the register's lock, unless a live session's
// dir overlaps c.Dir; check is false only in the mutation check's build.
// release removes the claim.
func (r Register) Claim(c Claim, check bool) (release func() error, err error) {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot make the session register %s: %w", r.dir, err)
	}
	unlock, err := r.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	claims, err := r.read()
	if err != nil {
		return nil, err
	}
	for _, other := range claims {
		if !r.Alive(other.Owner) {
			_ = os.Remove(r.file(other.Session))
			continue
		}
		if check && Overlaps(c.Dir, other.Dir) {
			return nil, Overlap{Dir: c.Dir, Other: other}
		}
	}
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	tmp := r.file(c.Session) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return nil, fmt.Errorf("cannot write the session register: %w", err)
	}
	if err := os.Rename(tmp, r.file(c.Session)); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("cannot write the session register: %w", err)
	}
	return func() error {
		unlock, err := r.lock()
		if err != nil {
			return err
		}
		defer unlock()
		if err := os.Remove(r.file(c.Session)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}, nil
}

// Prune removes the claims of sessions whose launcher is gone (killed,
// so that it never released them) and returns their sessions.
func (r Register) Prune() []string {
	if _, err := os.Stat(r.dir); err != nil {
		return nil
	}
	unlock, err := r.lock()
	if err != nil {
		return nil
	}
	defer unlock()
	claims, _ := r.read()
	var gone []string
	for _, c := range claims {
		if !r.Alive(c.Owner) && os.Remove(r.file(c.Session)) == nil {
			gone = append(gone, c.Session)
		}
	}
	return gone
}

// Running lists the live claims.
func (r Register) Running() ([]Claim, error) {
	claims, err := r.read()
	if err != nil {
		return nil, err
	}
	var live []Claim
	for _, c := range claims {
		if r.Alive(c.Owner) {
			live = append(live, c)
		}
	}
	return live, nil
}

func (r Register) file(session string) string {
	return filepath.Join(r.dir, strings.ReplaceAll(session, "/", "_")+".json")
}

func (r Register) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(r.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot lock the session register: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot lock the session register: %w", err)
	}
	return func() { f.Close() }, nil
}

func (r Register) read() ([]Claim, error) {
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the session register: %w", err)
	}
	var out []Claim
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(r.dir, e.Name()))
		if err != nil {
			continue
		}
		var c Claim
		if json.Unmarshal(data, &c) != nil || c.Session == "" {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}
