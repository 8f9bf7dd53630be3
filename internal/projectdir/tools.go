package projectdir

// HostTool is a file in a project that a tool on the host loads by itself
// and that can make it run a command: what the exit report lists when the
// agent added or changed it. The same table is in SECURITY.md.
type HostTool struct {
	// Path is relative to any directory of the tree; a trailing "/" is a
	// directory, looked at whole.
	Path string
	// Loader says who loads it and what it can run.
	Loader string
}

// HostTools are the project files that tools on the host load by
// themselves, each with what would load it. Git's own files and agent
// settings (.claude/, .mcp.json) are protected read-only instead; these
// stay writable, since the agent edits them as part of its work.
var HostTools = []HostTool{
	{".vscode/tasks.json", `VS Code runs its tasks marked "runOn": "folderOpen" when it opens the folder`},
	{".vscode/settings.json", "VS Code and its extensions read it when they open the folder (terminal profiles, interpreter and tool paths)"},
	{".vscode/mcp.json", "VS Code starts the MCP servers it names"},
	{".vscode/launch.json", "VS Code runs its launch configurations and their preLaunchTask"},
	{".cursor/mcp.json", "Cursor starts the MCP servers it names"},
	{".devcontainer/", "VS Code and the devcontainer CLI run its initializeCommand on this machine"},
	{".gemini/settings.json", "Gemini CLI starts the MCP servers and runs the hooks it names"},
	{".codex/config.toml", "Codex starts the MCP servers it names"},
	{".mise.toml", "mise runs its hooks and tasks, and sets its environment, once trusted"},
	{"mise.toml", "mise runs its hooks and tasks, and sets its environment, once trusted"},
	{".envrc", "direnv runs it when you enter the directory, once allowed"},
	{".lfsconfig", "git-lfs takes its server and transfer settings from it"},
	{".pre-commit-config.yaml", "pre-commit runs the hooks it names at your next commit"},
	{"lefthook.yml", "lefthook runs the commands it names from git's hooks"},
	{".lefthook.yml", "lefthook runs the commands it names from git's hooks"},
	{"lefthook-local.yml", "lefthook runs the commands it names from git's hooks"},
	{".husky/", "husky's hooks (git runs them through core.hooksPath)"},
	{".npmrc", "npm reads it in this directory (node-options, script-shell and the registry run or fetch code)"},
	{".yarnrc.yml", "yarn runs the yarnPath it names at every yarn command"},
}

// toolLoader is what loads the tool file at rel, by its path's end.
func toolLoader(rel string) (string, bool) {
	for _, t := range HostTools {
		if hasPathSuffix(rel, t.Path) {
			return t.Loader, true
		}
	}
	return "", false
}

func hasPathSuffix(rel, suffix string) bool {
	if len(suffix) > 0 && suffix[len(suffix)-1] == '/' {
		suffix = suffix[:len(suffix)-1]
	}
	if rel == suffix {
		return true
	}
	return len(rel) > len(suffix) && rel[len(rel)-len(suffix)-1] == '/' && rel[len(rel)-len(suffix):] == suffix
}
