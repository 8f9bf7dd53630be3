package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/apiservice"
	"github.com/agent-sandbox/agent-sandbox/internal/podman"
	"github.com/agent-sandbox/agent-sandbox/internal/sessionreg"
)

// ownerID names the launcher process that owns a session: its pid and its
// start time, so that a reused pid is not mistaken for the owner.
func ownerID(pid int) string {
	return strconv.Itoa(pid) + "@" + processStart(pid)
}

// processStart is field 22 of /proc/PID/stat: when the process started, in
// clock ticks since boot. Empty if the process does not exist.
func processStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name may hold spaces and parentheses; fields start
	// after the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// ownerAlive reports whether the owner recorded in a label still runs.
func ownerAlive(owner string) bool {
	pid, start, ok := strings.Cut(owner, "@")
	n, err := strconv.Atoi(pid)
	if !ok || err != nil || n <= 0 {
		// Not ours to judge: keep it.
		return true
	}
	cur := processStart(n)
	return cur != "" && cur == start
}

// staleSessions groups labelled objects by session and returns the
// sessions whose owner is gone, each with its objects in removal order:
// pods, then containers, then networks.
func staleSessions(objs []podman.Object, alive func(owner string) bool) map[string][]podman.Object {
	stale := map[string][]podman.Object{}
	for _, o := range objs {
		session, owner := o.Labels[labelSession], o.Labels[labelOwner]
		if session == "" || owner == "" || alive(owner) {
			continue
		}
		stale[session] = append(stale[session], o)
	}
	rank := map[string]int{"pod": 0, "container": 1, "network": 2}
	for _, list := range stale {
		sort.SliceStable(list, func(i, j int) bool { return rank[list[i].Kind] < rank[list[j].Kind] })
	}
	return stale
}

// collectGarbage removes what sessions whose launcher died left behind:
// labelled podman objects and temp dirs under runtimeDir. It never touches
// a session whose owner runs, nor anything without our label.
func collectGarbage(ctx context.Context, eng engine, runtimeDir string) ([]string, error) {
	objs, err := eng.ListLabelled(ctx, labelSession)
	if err != nil {
		return nil, err
	}
	return removeStale(ctx, eng, objs, runtimeDir)
}

// removeStale removes the objects in objs whose session's launcher died,
// and their temp dirs. It returns what it removed, and names what it could
// not.
func removeStale(ctx context.Context, eng engine, objs []podman.Object, runtimeDir string) ([]string, error) {
	var (
		removed []string
		failed  []error
	)
	// First the API services whose sessions were all killed: they serve
	// nobody, and one may still be busy with its dead session's objects.
	removed = append(removed, apiservice.Collect(runtimeDir)...)
	stale := staleSessions(objs, ownerAlive)
	sessions := make([]string, 0, len(stale))
	for s := range stale {
		sessions = append(sessions, s)
	}
	sort.Strings(sessions)
	for _, s := range sessions {
		for _, o := range stale[s] {
			var err error
			switch o.Kind {
			case "pod":
				err = eng.PodRemove(ctx, o.Name)
			case "container":
				err = eng.ContainerRemove(ctx, o.Name)
			case "network":
				err = removeNetworkOnceFree(ctx, eng, o.Name)
			}
			if err != nil {
				failed = append(failed, cleanupFailed{o.Kind + " " + o.Name, err})
				continue
			}
			removed = append(removed, o.Kind+" "+o.Name)
		}
	}
	removed = append(removed, removeStaleDirs(runtimeDir)...)
	return removed, errors.Join(failed...)
}

// removeNetworkOnceFree removes a dead session's network, trying again
// for up to 5 s: its router may still be on it for a moment (a container
// started with its own removal on exit is being removed by its exit
// command when the collector gets there, and podman refuses the network
// until that is done). The collection runs beside a session's start or in
// gc, never on the user's path.
func removeNetworkOnceFree(ctx context.Context, eng engine, name string) error {
	err := eng.NetworkRemove(ctx, name)
	for try := 0; err != nil && try < 25 && ctx.Err() == nil; try++ {
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
		err = eng.NetworkRemove(ctx, name)
	}
	return err
}

// gc removes what killed sessions left behind and lists (with homes,
// removes) the homes of projects that no longer exist. It fails when it
// could not remove something.
func gc(ctx context.Context, set settings, out, errOut io.Writer, homes bool) error {
	return withCommandService(ctx, set, errOut, func(opCtx context.Context, eng engine, dir, _ string) error {
		removed, err := collectGarbage(opCtx, eng, dir)
		for _, r := range removed {
			fmt.Fprintln(out, "removed", r)
		}
		if err != nil {
			return err
		}
		return collectHomes(opCtx, eng, out, homes)
	})
}

// sessionDir matches the temp dirs a session makes: NAME.RANDOM and
// NAME-cred.RANDOM (and NAME-api.RANDOM, which sessions made before the
// API service was shared), where NAME is agent-sandbox-UNIXTIME-PID.
var sessionDir = regexp.MustCompile(`^agent-sandbox-(\d+)-(\d+)(-api|-cred)?\.[^/]+$`)

func removeStaleDirs(runtimeDir string) []string {
	if runtimeDir == "" {
		return nil
	}
	entries, err := os.ReadDir(runtimeDir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, s := range sessionreg.Open(runtimeDir, ownerAlive).Prune() {
		removed = append(removed, "the launch dir claim of "+s)
	}
	for _, e := range entries {
		m := sessionDir.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		created, _ := strconv.ParseInt(m[1], 10, 64)
		pid, _ := strconv.Atoi(m[2])
		if launcherRuns(pid, created) {
			continue
		}
		if os.RemoveAll(filepath.Join(runtimeDir, e.Name())) == nil {
			removed = append(removed, "dir "+e.Name())
		}
	}
	return removed
}

// launcherRuns reports whether the launcher that named its dir with pid
// at unix time created still runs. A process with that pid that started
// no later than the dir was named is that launcher: had the launcher died,
// whoever got its pid would have started after. Going by the name of the
// executable instead would take a launcher run as `claude` (a symlink) or
// under another name for dead, and remove a live session's files.
func launcherRuns(pid int, created int64) bool {
	started, ok := processStartUnix(pid)
	return ok && started <= created+1
}

// processStartUnix is when pid started, in unix seconds, from its start
// time in clock ticks after boot (USER_HZ is 100 on Linux).
func processStartUnix(pid int) (int64, bool) {
	ticks, err := strconv.ParseInt(processStart(pid), 10, 64)
	if err != nil {
		return 0, false
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, false
			}
			return boot + ticks/100, true
		}
	}
	return 0, false
}
