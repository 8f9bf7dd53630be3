// agent-sandbox runs Claude Code, or any command, in a rootless podman
// sandbox whose only way out is a per-session router that answers and
// forwards allowlisted hosts.
package main

import (
	"context"
	_ "embed"
	"os"
	"os/signal"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/keeper"
)

// version and registry are set at build time with -ldflags -X. A dev build
// uses images built locally; a release build pulls its tagged images.
var (
	version  = "dev"
	commit   = ""
	registry = ""
)

//go:embed allowed-hosts
var defaultAllowlist []byte

func main() {
	// A closed stdout must end the session through teardown, not kill us.
	signal.Ignore(syscall.SIGPIPE)
	args := os.Args[1:]
	// A session runs in a keeper, so that the shell gets its prompt back
	// as soon as the exit is reported, not after the teardown.
	link := keeper.Inherited()
	if link == nil && isLaunch(args) {
		os.Exit(keeper.Foreground(args, os.Stdin, os.Stdout, os.Stderr, exitSignal))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	// `agent-sandbox stop` asks a session to stop its agent (ps.go).
	stopRequests := make(chan os.Signal, 1)
	signal.Notify(stopRequests, stopSignal)
	// A terminal that hangs up ends it as SIGHUP does, SIGHUP or not.
	streams := iostreams.System()
	ctx, stopHangup := withHangup(ctx, streams.Err, int(os.Stdin.Fd()), int(os.Stdout.Fd()))
	code := run(ctx, args, os.LookupEnv, streams, link, stopRequests)
	stopHangup()
	stop()
	os.Exit(code)
}
