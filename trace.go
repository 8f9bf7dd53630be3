package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/containers/podman/v5/pkg/specgen"
	"go.podman.io/common/libnetwork/types"
)

// tracer prints how long each step of a session took when
// AGENT_SANDBOX_TRACE is set: the first thing to look at when start-up is slow.
type tracer struct {
	start time.Time
	on    bool
	out   io.Writer
}

func newTracer(on bool, out io.Writer) *tracer {
	return &tracer{start: time.Now(), on: on, out: out}
}

// step returns a func that reports the step's duration when called.
func (t *tracer) step(name string) func() {
	if !t.on {
		return func() {}
	}
	begin := time.Now()
	return func() {
		fmt.Fprintf(t.out, "agent-sandbox: trace %6.1fms %6.1fms %s\n",
			float64(time.Since(t.start).Microseconds())/1000, float64(time.Since(begin).Microseconds())/1000, name)
	}
}

// tracedEngine times every call of the engine it wraps.
type tracedEngine struct {
	engine
	t *tracer
}

func (e tracedEngine) NetworkCreate(ctx context.Context, n *types.Network, ignore bool) (types.Network, error) {
	defer e.t.step("network create " + n.Name)()
	return e.engine.NetworkCreate(ctx, n, ignore)
}

func (e tracedEngine) NetworkRemove(ctx context.Context, name string) error {
	defer e.t.step("network remove " + name)()
	return e.engine.NetworkRemove(ctx, name)
}

func (e tracedEngine) VolumeInspect(ctx context.Context, name string) (volumeInfo, bool, error) {
	defer e.t.step("volume inspect " + name)()
	return e.engine.VolumeInspect(ctx, name)
}

func (e tracedEngine) VolumeCreate(ctx context.Context, name string, labels map[string]string) error {
	defer e.t.step("volume create " + name)()
	return e.engine.VolumeCreate(ctx, name, labels)
}

func (e tracedEngine) ContainerCreate(ctx context.Context, s *specgen.SpecGenerator) error {
	defer e.t.step("container create " + s.Name)()
	return e.engine.ContainerCreate(ctx, s)
}

func (e tracedEngine) ContainerStartReady(ctx context.Context, name, ready string) error {
	defer e.t.step("container start+ready " + name)()
	return e.engine.ContainerStartReady(ctx, name, ready)
}

func (e tracedEngine) ContainerRun(ctx context.Context, name string, tty bool) (int, error) {
	defer e.t.step("container run " + name)()
	return e.engine.ContainerRun(ctx, name, tty)
}

func (e tracedEngine) ContainerStop(ctx context.Context, name string, timeout time.Duration) error {
	defer e.t.step("container stop " + name)()
	return e.engine.ContainerStop(ctx, name, timeout)
}

func (e tracedEngine) ContainerRemove(ctx context.Context, name string) error {
	defer e.t.step("container remove " + name)()
	return e.engine.ContainerRemove(ctx, name)
}

func (e tracedEngine) PodCreate(ctx context.Context, p *specgen.PodSpecGenerator) error {
	defer e.t.step("pod create " + p.Name)()
	return e.engine.PodCreate(ctx, p)
}

func (e tracedEngine) PodRemove(ctx context.Context, name string) error {
	defer e.t.step("pod remove " + name)()
	return e.engine.PodRemove(ctx, name)
}
