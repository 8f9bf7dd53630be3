package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/routerlog"
)

// watchDenials follows the routers of running sessions, including ones that
// start later, and writes one line per denial logged after since.
func watchDenials(ctx context.Context, eng engine, out io.Writer, since time.Time, poll time.Duration) error {
	var (
		mu        sync.Mutex
		following = map[string]bool{}
		wg        sync.WaitGroup
	)
	defer wg.Wait()
	emit := func(dir string, d routerlog.Denial) {
		what := "connection to"
		if d.Lookup {
			what = "lookup of"
		}
		host := strings.TrimSuffix(strings.ToLower(d.Host), ".")
		if !routerlog.PrintableHost(host) {
			host = "(a name that is not a host name)"
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%s %s: blocked %s %s\n", time.Now().Format("15:04:05"), dir, what, host)
	}
	for {
		objs, err := eng.ListLabelled(ctx, labelSession)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, o := range objs {
			// A created router has no log to follow yet: wait until it runs.
			if o.Kind != "container" || !o.Running || !strings.HasSuffix(o.Name, "-router") || following[o.Name] {
				continue
			}
			following[o.Name] = true
			dir := o.Labels[labelDir]
			wg.Go(func() {
				_ = eng.FollowLogs(ctx, o.Name, since, func(line string) {
					if d, ok := routerlog.ParseDenial(line); ok {
						emit(dir, d)
					}
				})
			})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}

// watch is `agent-sandbox log`: it runs until interrupted, which is how
// one stops following.
func watch(ctx context.Context, set settings, out, errOut io.Writer) error {
	err := withCommandService(ctx, set, errOut, func(opCtx context.Context, eng engine, _, _ string) error {
		return watchDenials(opCtx, eng, out, time.Now(), 500*time.Millisecond)
	})
	if errors.Is(err, errInterrupted) {
		return nil
	}
	return err
}
