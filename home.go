package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/podman"
)

// projectHome names a project's home volume. One home for every project
// would let an agent in one project leave ~/.bashrc, ~/.gitconfig or
// Claude hooks that run in every later session of every other project;
// each project gets its own, named from its resolved path (readable
// part first, a digest for uniqueness).
func projectHome(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	base := volumeNameUnsafe.ReplaceAllString(filepath.Base(dir), "-")
	base = strings.Trim(base, "-.")
	if len(base) > 32 {
		base = base[:32]
	}
	if base == "" {
		base = "root"
	}
	return "agent-sandbox-home-" + base + "-" + hex.EncodeToString(sum[:6])
}

var (
	volumeNameUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)
	volumeName       = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
)

// homeVolumeFor picks the volume at /home/claude: --home, else
// AGENT_SANDBOX_HOME_VOLUME (both a home shared by whoever names it),
// else the project's own. It returns the labels the volume is created
// with.
func homeVolumeFor(flag, env, dir string) (string, map[string]string) {
	labels := map[string]string{labelShared: "true"}
	switch {
	case flag != "":
		return flag, labels
	case env != "":
		return env, labels
	}
	labels[labelProject] = dir
	return projectHome(dir), labels
}

// orphanHomes are the project homes whose project directory is gone.
func orphanHomes(vols []podman.VolumeInfo, exists func(string) bool) []podman.VolumeInfo {
	var out []podman.VolumeInfo
	for _, v := range vols {
		if dir := v.Labels[labelProject]; dir != "" && !exists(dir) {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// collectHomes lists (or, with remove, removes) the homes of projects that
// no longer exist. A home still in use is not removed: podman refuses.
func collectHomes(ctx context.Context, eng engine, out io.Writer, remove bool) error {
	vols, err := eng.ListVolumes(ctx, labelProject)
	if err != nil {
		return err
	}
	var failed []string
	for _, v := range orphanHomes(vols, dirExists) {
		if !remove {
			fmt.Fprintf(out, "home %s of %s, which no longer exists (agent-sandbox gc --homes removes it)\n", v.Name, v.Labels[labelProject])
			continue
		}
		if err := eng.VolumeRemove(ctx, v.Name); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", v.Name, err))
			continue
		}
		fmt.Fprintf(out, "removed home %s of %s\n", v.Name, v.Labels[labelProject])
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not remove %s", strings.Join(failed, "; "))
	}
	return nil
}
