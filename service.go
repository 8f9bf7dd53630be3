package main

import (
	"context"
	"io"
	"os"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/podman"
	"github.com/agent-sandbox/agent-sandbox/internal/trace"
)

// openService starts using the shared podman API service for a session or
// a command, and pushes what ends that use onto undo. The context it
// returns talks to the service and ends with ctx.
func openService(ctx context.Context, set settings, runtimeDir string, trace *trace.Tracer, undo *cleanupStack) (context.Context, engine, error) {
	done := trace.Step("podman service start")
	conn, eng, stop, err := podman.Open(ctx, set.podman, runtimeDir, agentWritableCwd(set), trace.Out, trace)
	done()
	undo.push("the podman API service", func(context.Context) error {
		defer trace.Step("podman service release")()
		stop()
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	opCtx, cancel := context.WithCancel(conn)
	context.AfterFunc(ctx, cancel)
	return opCtx, eng, nil
}

// withCommandService runs fn for a command other than a session (gc,
// build, log) against the shared API service, with a name like a
// session's for what it creates, so that what a killed one leaves is
// collected like a session's. A signal makes it errInterrupted.
func withCommandService(ctx context.Context, set settings, out io.Writer, fn func(ctx context.Context, eng engine, runtimeDir, name string) error) error {
	runtimeDir, err := set.requireRuntimeDir()
	if err != nil {
		return err
	}
	name := newSessionName()
	var undo cleanupStack
	opCtx, eng, err := openService(ctx, set, runtimeDir, trace.New(set.trace, out), &undo)
	if err == nil {
		err = fn(opCtx, eng, runtimeDir, name)
	}
	if uerr := undo.unwind(context.Background()); uerr != nil && err == nil {
		err = uerr
	}
	if ctx.Err() != nil {
		return errInterrupted
	}
	return err
}

// agentWritableCwd is the current dir if an agent may have written it: a
// session's launch dir, or a dir of the user's where one could have run
// (`gc` in a project). podman is never looked up there. A dir no launch
// dir can be (/, $HOME, a system dir the user does not own) is "": from
// there, PATH is taken as it is.
func agentWritableCwd(set settings) string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	dir := realpath(wd)
	fi, err := os.Stat(dir)
	if err != nil {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return ""
	}
	if checkLaunchDir(dir, set) != nil {
		return ""
	}
	return dir
}
