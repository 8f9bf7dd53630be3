package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/keeper"
	"github.com/agent-sandbox/agent-sandbox/internal/limits"
	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/forge"
	"github.com/spf13/cobra"
)

// run is the command line layer: it reads the environment once, builds the
// command tree, and turns what the command returned into the one report on
// stderr and the process exit code.
//
// link is the keeper's link to the foreground (keeper.Foreground), nil
// when the command runs in the process the shell started.
//
// stopRequests delivers `agent-sandbox stop`'s requests (nil: none come).
func run(ctx context.Context, args []string, getenv func(string) (string, bool), streams *iostreams.Streams, link *keeper.Link, stopRequests <-chan os.Signal) int {
	set := newSettings(getenv)
	set.keeper = link
	set.stopRequests = stopRequests
	set.streams = streams
	root := newRootCommand(ctx, set)
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	err := root.Execute()
	if !link.Returned() {
		report(streams.Err, err)
	}
	return exitCode(err)
}

// isLaunch says whether args start a session rather than run a command.
func isLaunch(args []string) bool {
	root := newRootCommand(context.Background(), settings{lookup: func(string) (string, bool) { return "", false }})
	cmd, _, err := root.Find(args)
	return err == nil && cmd == root
}

func newRootCommand(ctx context.Context, set settings) *cobra.Command {
	root := &cobra.Command{
		Use:   "agent-sandbox [--env NAME | --home VOLUME | --repo OWNER/NAME | --pids N | --memory SIZE | --cpus N | --publish [HOST_PORT:]PORT | --agent claude|codex|gemini]... [--exec CMD [ARGS...] | claude args...]",
		Short: "Run Claude Code in a rootless podman sandbox with allowlisted egress",
		Long: `agent-sandbox runs Claude Code (or, with --exec, any command) in a rootless
podman sandbox. The current directory is mounted at the same path; the only
way out is a per-session router that answers and forwards the hosts named in
the allowlist. Nothing of your environment is passed in unless you name it
with --env, before --exec or claude's own arguments; API keys in your
environment or stored with "agent-sandbox secret" are added by the router
instead, and the agent gets placeholders. Each project directory
has a home volume of its own at /home/claude; --home VOLUME (or
AGENT_SANDBOX_HOME_VOLUME) names one to share instead. With a GitHub token
(GH_TOKEN, GITHUB_TOKEN or "agent-sandbox secret set github") the router
adds it on GitHub's hosts and admits writes only to the repositories git
pushes to from this directory; --repo OWNER/NAME admits another for the
session. The agent is limited to 4096 processes, half the memory and all
CPUs but one; --pids, --memory and --cpus change that (a limit this host
cannot enforce is refused; agent-sandbox doctor says which). --publish
[HOST_PORT:]PORT makes a server the agent runs on PORT reachable at
127.0.0.1:HOST_PORT on this machine (in a browser as DIR.localhost:HOST_PORT),
and nowhere else. --agent codex or
--agent gemini (or AGENT_SANDBOX_AGENT) runs that agent instead of Claude
Code: its image is built on first use, and its hosts are allowed for the
session.`,
		Example: `  agent-sandbox                      # claude in the current directory
  agent-sandbox --resume             # arguments go to claude
  agent-sandbox --exec bash          # a shell in the sandbox
  agent-sandbox --env AWS_PROFILE    # pass one host variable in
  agent-sandbox --repo me/docs       # also admit GitHub writes to me/docs
  agent-sandbox --pids 1024 --memory 4g --exec make -j8
  agent-sandbox --publish 8000 --exec npm run dev   # open http://127.0.0.1:8000
  agent-sandbox --agent codex        # OpenAI's Codex CLI instead of Claude Code
  agent-sandbox version`,
		Args: cobra.ArbitraryArgs,
		// Every argument belongs to claude or to the --exec command.
		DisableFlagParsing: true,
		SilenceUsage:       true,
		SilenceErrors:      true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
				return cmd.Help()
			}
			return launch(ctx, set, cmd.ErrOrStderr(), args)
		},
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			v := version
			if commit != "" {
				v += " (" + commit + ")"
			}
			fmt.Fprintln(cmd.OutOrStdout(), v)
		},
	})
	root.AddCommand(newGCCommand(ctx, set), newLogCommand(ctx, set), newBuildCommand(ctx, set), newPsCommand(set), newStopCommand(ctx, set))
	addUserCommands(root, ctx, set)
	root.AddCommand(newSecretCommand(set), newKubeCommand(set))
	return root
}

// reportFlagErrors makes a bad flag a refusal that names the help: the root
// command silences cobra's own error output.
func reportFlagErrors(c *cobra.Command) *cobra.Command {
	c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return refusef("%v; see %s --help", err, c.CommandPath())
	})
	return c
}

func newLogCommand(ctx context.Context, set settings) *cobra.Command {
	return &cobra.Command{
		Use:     "log",
		Aliases: []string{"watch"},
		Short:   "Follow what the allowlist blocks in running sessions",
		Long: `log prints one line for each lookup or connection the allowlist blocks in any
running session (and in sessions that start while it runs), with the session's
directory, until you interrupt it.`,
		Example: `  agent-sandbox log
  agent-sandbox allow HOST    # then allow what a session needs`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return watch(ctx, set, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

func newBuildCommand(ctx context.Context, set settings) *cobra.Command {
	var only string
	var noCache bool
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build the sandbox and router images",
		Long: `build (re)builds the sandbox and router images from the Containerfiles inside
agent-sandbox, under agent-sandbox's own names; it refuses when
AGENT_SANDBOX_IMAGE or AGENT_SANDBOX_ROUTER_IMAGE names another image, which
it would replace. A session builds a missing image by itself
the first time; build is for refreshing them, for example for a newer Claude
Code or Debian packages (with --no-cache). Unchanged steps come from podman's
layer cache. AGENT_SANDBOX_BASE_IMAGE names the base image (default
` + defaultBaseImage + `).`,
		Example: `  agent-sandbox build                 # both images
  agent-sandbox build --only router   # just the router
  agent-sandbox build --no-cache      # every step again`,
		// Checked in RunE, to say what to do instead.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return refusef("build takes no arguments (got %q): name one image with --only sandbox or --only router", args[0])
			}
			return buildCommand(ctx, set, cmd.ErrOrStderr(), only, noCache)
		},
	}
	cmd.Flags().StringVar(&only, "only", "", "build one image: sandbox or router, or an agent's: codex or gemini")
	cmd.Flags().BoolVar(&noCache, "no-cache", false, "run every step again instead of using podman's layer cache")
	return reportFlagErrors(cmd)
}

func newGCCommand(ctx context.Context, set settings) *cobra.Command {
	var homes bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what sessions whose launcher was killed left behind",
		Long: `gc removes the containers, pods, networks and temp dirs of sessions whose
launcher no longer runs. Every session also does this when it starts. Objects
without agent-sandbox's session label, and sessions whose launcher still
runs, are never touched. It also lists the home volumes of projects whose
directory no longer exists; --homes removes them (with whatever the agent
kept there, such as a Claude login). It exits 125 when it could not remove
something.`,
		Example: `  agent-sandbox gc
  agent-sandbox gc --homes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return gc(ctx, set, cmd.OutOrStdout(), cmd.ErrOrStderr(), homes)
		},
	}
	cmd.Flags().BoolVar(&homes, "homes", false, "also remove the home volumes of projects that no longer exist")
	return reportFlagErrors(cmd)
}

// launchArgs are the launcher's own leading options and the agent command.
type launchArgs struct {
	cmd []string
	// env is passed into the agent explicitly; nothing of the host's
	// environment is by default.
	env map[string]string
	// home is the volume --home names; "" for the default.
	home string
	// repos are --repo's repositories, "owner/name", which GitHub writes
	// are admitted for besides the launch dir's remotes.
	repos []string
	// limits are --pids, --memory and --cpus (zero where not given), and
	// asked which of them were.
	limits limits.Limits
	asked  limits.Asked
	// publish are the ports --publish makes reachable from the host.
	publish []publishedPort
	// agent is --agent's name, "" for the default; exec says the command
	// came from --exec rather than being the agent's with its arguments.
	agent string
	exec  bool
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// launchOptions are the launcher's own options, each with a value: what
// the value is and an example, for the refusal of one given none.
var launchOptions = map[string]struct{ value, example string }{
	"--env":     {"a variable name", "--env ANTHROPIC_API_KEY"},
	"--home":    {"a volume name", "--home agent-sandbox-home"},
	"--repo":    {"a repository", "--repo octocat/hello-world"},
	"--pids":    {"a number of processes", "--pids 2048"},
	"--memory":  {"a size", "--memory 4g"},
	"--cpus":    {"a number of CPUs", "--cpus 1.5"},
	"--publish": {"a port", "--publish 8000"},
	"--agent":   {"an agent", "--agent codex"},
}

// parseLaunchArgs takes `[OPTION VALUE]... [--exec CMD ARGS... | claude args...]`
// for the options in launchOptions. Everything after the launcher's
// options belongs to the agent.
func parseLaunchArgs(args []string, getenv func(string) (string, bool)) (launchArgs, error) {
	la := launchArgs{env: map[string]string{}}
	for len(args) > 0 {
		opt, value, inline := strings.Cut(args[0], "=")
		o, ok := launchOptions[opt]
		if !ok || claudesOwnAgent(opt, value, inline, args) {
			break
		}
		if inline {
			args = args[1:]
		} else {
			if len(args) < 2 {
				return la, fmt.Errorf("%s needs %s, as in: agent-sandbox %s", opt, o.value, o.example)
			}
			value, args = args[1], args[2:]
		}
		if err := la.set(opt, value, getenv); err != nil {
			return la, err
		}
	}
	la.cmd = append([]string{"claude"}, args...)
	if len(args) > 0 && args[0] == "--exec" {
		la.exec = true
		la.cmd = args[1:]
		if len(la.cmd) == 0 {
			return la, errors.New("--exec needs a command, as in: agent-sandbox --exec bash")
		}
	}
	return la, nil
}

// claudesOwnAgent says that an --agent at args[0] is Claude Code's own
// (run as one of its subagents), not the launcher's: its value names no
// agent of ours. The alias claude=agent-sandbox keeps it working.
func claudesOwnAgent(opt, value string, inline bool, args []string) bool {
	if opt != "--agent" {
		return false
	}
	if !inline {
		if len(args) < 2 {
			return false
		}
		value = args[1]
	}
	_, err := lookupAgent(value, opt)
	return err != nil
}

// set takes one option's value.
func (la *launchArgs) set(opt, value string, getenv func(string) (string, bool)) error {
	var err error
	switch opt {
	case "--home":
		if !volumeName.MatchString(value) {
			return fmt.Errorf("--home %s: not a volume name (letters, digits, _ . -), as in --home agent-sandbox-home", value)
		}
		la.home = value
	case "--repo":
		repo, err := forge.ParseRepo(value)
		if err != nil {
			return fmt.Errorf("--repo: %v", err)
		}
		la.repos = append(la.repos, repo)
	case "--pids":
		la.limits.Pids, err = limits.ParsePids(value)
		la.asked.Pids = true
	case "--memory":
		la.limits.Memory, err = limits.ParseMemory(value)
		la.asked.Memory = true
	case "--cpus":
		la.limits.CPUs, err = limits.ParseCPUs(value, runtime.NumCPU())
		la.asked.CPUs = true
	case "--agent":
		la.agent = value
	case "--publish":
		p, err := parsePublishedPort(value)
		if err != nil {
			return err
		}
		la.publish = append(la.publish, p)
	case "--env":
		if !envName.MatchString(value) {
			return fmt.Errorf("--env %s: not a variable name; pass the name only, as in --env ANTHROPIC_API_KEY", value)
		}
		v, ok := getenv(value)
		if !ok {
			return fmt.Errorf("--env %s: %s is not set in your environment", value, value)
		}
		la.env[value] = v
	}
	return err
}
