package main

import "testing"

// TestAgentWritableCwd: podman is never looked up in a dir an agent may
// have written (a launch dir, or one like it), but from / or a dir the
// user does not own PATH is taken as it is: excluding / would exclude
// every entry.
func TestAgentWritableCwd(t *testing.T) {
	env := map[string]string{"HOME": "/nonexistent/home", "XDG_RUNTIME_DIR": "/nonexistent/run"}
	set := settingsFrom(env)
	project := realpath(t.TempDir())
	t.Chdir(project)
	if got := agentWritableCwd(set); got != project {
		t.Errorf("in a project dir: %q, want %q", got, project)
	}
	t.Chdir("/")
	if got := agentWritableCwd(set); got != "" {
		t.Errorf("in /: %q, want none", got)
	}
}
