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
	{".yarnrc", "yarn 1 runs the yarn-path it names at every yarn command"},
	{".pnpmfile.cjs", "pnpm runs its hooks at every install"},
	{"bunfig.toml", "bun runs the preload scripts it names"},
	{".cargo/config.toml", "cargo takes rustc wrappers, runners and aliases from it at every build"},
	{".cargo/config", "cargo takes rustc wrappers, runners and aliases from it at every build"},
	{".idea/workspace.xml", "JetBrains IDEs read its run configurations and startup tasks"},
	{".devcontainer.json", "VS Code and the devcontainer CLI run its initializeCommand on this machine"},
	{"lefthook.yaml", "lefthook runs the commands it names from git's hooks"},
	{"lefthook.toml", "lefthook runs the commands it names from git's hooks"},
	{"lefthook.json", "lefthook runs the commands it names from git's hooks"},
	{".config/lefthook.yml", "lefthook runs the commands it names from git's hooks"},
	{".lintstagedrc", "lint-staged runs the commands it names from git's hooks"},
	{".lintstagedrc.json", "lint-staged runs the commands it names from git's hooks"},
	{".lintstagedrc.yaml", "lint-staged runs the commands it names from git's hooks"},
	{".lintstagedrc.js", "lint-staged runs it from git's hooks"},
	{"lint-staged.config.js", "lint-staged runs it from git's hooks"},
	{"mise.local.toml", "mise runs its hooks and tasks, and sets its environment, once trusted"},
	{".mise.local.toml", "mise runs its hooks and tasks, and sets its environment, once trusted"},
	{".config/mise.toml", "mise runs its hooks and tasks, and sets its environment, once trusted"},
	{".mise/", "mise runs its tasks and hooks"},
	{".zed/", "Zed reads its tasks and settings when it opens the folder"},
	{".helix/", "Helix reads its language servers and commands from it"},
	{".nvim.lua", "Neovim runs it on open when exrc is on"},
	{".exrc", "Vim and Neovim run it on open when exrc is on"},
	{".lazy.lua", "lazy.nvim runs it on open"},
	{".dir-locals.el", "Emacs evaluates it when it opens a file below"},
	{".gemini/", "Gemini CLI loads its settings, commands and extensions"},
	{".codex/", "Codex loads its config and prompts"},
	{".amazonq/mcp.json", "Amazon Q starts the MCP servers it names"},
	{".roo/mcp.json", "Roo Code starts the MCP servers it names"},
	{".kiro/settings/mcp.json", "Kiro starts the MCP servers it names"},
	{".windsurf/", "Windsurf loads its rules and workflows"},
	{"opencode.json", "opencode starts the MCP servers and commands it names"},
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
