package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// run builds the command tree and returns the process exit code.
func run(ctx context.Context, args []string) int {
	code := 0
	root := newRootCommand(ctx, &code)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		return 1
	}
	return code
}

func newRootCommand(ctx context.Context, code *int) *cobra.Command {
	root := &cobra.Command{
		Use:   "agent-sandbox [--env NAME | --home VOLUME]... [--exec CMD [ARGS...] | claude args...]",
		Short: "Run Claude Code in a rootless podman sandbox with allowlisted egress",
		Long: `agent-sandbox runs Claude Code (or, with --exec, any command) in a rootless
podman sandbox. The current directory is mounted at the same path; the only
way out is a per-session router that answers and forwards the hosts named in
the allowlist. Nothing of your environment is passed in unless you name it
with --env, before --exec or claude's own arguments; API keys in your
environment or stored with "agent-sandbox secret" are added by the router
instead, and the agent gets placeholders. Each project directory
has a home volume of its own at /home/claude; --home VOLUME (or
AGENT_SANDBOX_HOME_VOLUME) names one to share instead.`,
		Example: `  agent-sandbox                      # claude in the current directory
  agent-sandbox --resume             # arguments go to claude
  agent-sandbox --exec bash          # a shell in the sandbox
  agent-sandbox --env GITHUB_TOKEN   # pass one host variable in
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
			*code = launch(ctx, args)
			return nil
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
	root.AddCommand(newGCCommand(ctx, code))
	root.AddCommand(&cobra.Command{
		Use:     "log",
		Aliases: []string{"watch"},
		Short:   "Follow what the allowlist blocks in running sessions",
		Long: `log prints one line for each lookup or connection the allowlist blocks in any
running session (and in sessions that start while it runs), with the session's
directory, until you interrupt it.`,
		Example: `  agent-sandbox log
  agent-sandbox allow HOST    # then allow what a session needs`,
		Args: cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			*code = watch(ctx, cmd.OutOrStdout())
		},
	})
	root.AddCommand(newBuildCommand(ctx, code))
	addUserCommands(root, ctx, code)
	root.AddCommand(newSecretCommand(code))
	return root
}

func newBuildCommand(ctx context.Context, code *int) *cobra.Command {
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
		// Checked in Run: the root command silences cobra's own errors.
		Args: cobra.ArbitraryArgs,
		Run: func(_ *cobra.Command, args []string) {
			if len(args) > 0 {
				warn("build takes no arguments (got %q): name one image with --only sandbox or --only router", args[0])
				*code = exitRefused
				return
			}
			*code = buildCommand(ctx, only, noCache)
		},
	}
	cmd.Flags().StringVar(&only, "only", "", "build one image: sandbox or router")
	cmd.Flags().BoolVar(&noCache, "no-cache", false, "run every step again instead of using podman's layer cache")
	return reportFlagErrors(cmd)
}

func newGCCommand(ctx context.Context, code *int) *cobra.Command {
	var homes bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what sessions whose launcher was killed left behind",
		Long: `gc removes the containers, pods, networks and temp dirs of sessions whose
launcher no longer runs. Every session also does this when it starts. Objects
without agent-sandbox's session label, and sessions whose launcher still
runs, are never touched. It also lists the home volumes of projects whose
directory no longer exists; --homes removes them (with whatever the agent
kept there, such as a Claude login).`,
		Example: `  agent-sandbox gc
  agent-sandbox gc --homes`,
		Args: cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			*code = gc(ctx, cmd.OutOrStdout(), homes)
		},
	}
	cmd.Flags().BoolVar(&homes, "homes", false, "also remove the home volumes of projects that no longer exist")
	return reportFlagErrors(cmd)
}
