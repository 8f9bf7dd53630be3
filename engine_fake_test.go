package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/podman"
	"github.com/containers/podman/v5/pkg/specgen"
	"go.podman.io/common/libnetwork/types"
)

// fakeEngine records every call as "Method arg" and can fail one of them.
type fakeEngine struct {
	mu    sync.Mutex
	calls []string
	// failOn makes the call with this exact record fail.
	failOn string
	// cancelOn cancels (with cancel) once the call with this exact record
	// was made: a signal that arrives during that step.
	cancelOn string
	cancel   func()
	// cancelFails makes the call at cancelOn fail with the cancellation
	// although it did its work, as a request podman finished after the
	// client gave up on it.
	cancelFails bool
	// notReady names a helper container that exits before it is ready.
	notReady string
	// buildHook sees each build while its context exists.
	buildHook func(podman.ImageBuild)
	// logLines records how many lines each ContainerLogs asked for.
	logLines map[string][]int
	// runCode is what the agent exits with; runHook runs inside ContainerRun.
	runCode int
	runHook func(ctx context.Context) error
	// beforeBegin runs inside ContainerRun before it begins the
	// container (starts it, or opens its gate).
	beforeBegin func()

	// stopped[name], once closed, makes ContainerWait(name) return: the
	// helper container died. ContainerWait is not recorded, since it runs
	// beside the agent.
	stopped map[string]chan struct{}
	// imageUsers are images' users; any other image runs as claude.
	imageUsers map[string]string
	// missingImages are reported absent by ImageExists, until built or
	// pulled.
	missingImages map[string]bool
	// builds are the image builds asked for; buildOutput is what each
	// writes as podman's output.
	builds      []podman.ImageBuild
	buildOutput string
	// logs are containers' logs; any other container logs a fake line.
	logs map[string]string
	// foreignVolumes exist without agent-sandbox's label, with these users.
	foreignVolumes map[string][]string
	// labelled is what ListLabelled returns, volumes what ListVolumes does.
	labelled []podman.Object
	volumes  []podman.VolumeInfo

	networks   map[string]*types.Network
	containers map[string]*specgen.SpecGenerator
	pods       map[string]*specgen.PodSpecGenerator
}

var errFake = errors.New("fake podman failure")

func newFakeEngine() *fakeEngine {
	return &fakeEngine{
		networks:   map[string]*types.Network{},
		containers: map[string]*specgen.SpecGenerator{},
		pods:       map[string]*specgen.PodSpecGenerator{},
		stopped:    map[string]chan struct{}{},
	}
}

// recorded is a copy of the calls so far.
func (f *fakeEngine) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeEngine) record(method, arg string) error {
	f.mu.Lock()
	c := method + " " + arg
	f.calls = append(f.calls, c)
	cancel := f.cancel
	f.mu.Unlock()
	if c == f.cancelOn && cancel != nil {
		cancel()
		if f.cancelFails {
			return fmt.Errorf("%s: %w", c, context.Canceled)
		}
	}
	if c == f.failOn {
		return fmt.Errorf("%s: %w", c, errFake)
	}
	return nil
}

// create records a call that creates or starts something: as through the
// real API, none is made once ctx has ended.
func (f *fakeEngine) create(ctx context.Context, method, arg string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return f.record(method, arg)
}

func (f *fakeEngine) NetworkCreate(ctx context.Context, n *types.Network, _ bool) (types.Network, error) {
	if err := f.create(ctx, "NetworkCreate", n.Name); err != nil {
		return types.Network{}, err
	}
	out := *n
	subnet, _ := types.ParseCIDR("10.89.7.0/24")
	out.Subnets = []types.Subnet{{Subnet: subnet}}
	f.mu.Lock()
	f.networks[n.Name] = n
	f.mu.Unlock()
	return out, nil
}

func (f *fakeEngine) NetworkRemove(_ context.Context, name string) error {
	return f.record("NetworkRemove", name)
}

func (f *fakeEngine) VolumeInspect(ctx context.Context, name string) (podman.VolumeInfo, bool, error) {
	if err := f.create(ctx, "VolumeInspect", name); err != nil {
		return podman.VolumeInfo{}, false, err
	}
	_, ok := f.foreignVolumes[name]
	return podman.VolumeInfo{Name: name}, ok, nil
}

func (f *fakeEngine) VolumeUsers(ctx context.Context, name string) ([]podman.Object, error) {
	if err := f.create(ctx, "VolumeUsers", name); err != nil {
		return nil, err
	}
	var out []podman.Object
	for _, u := range f.foreignVolumes[name] {
		out = append(out, podman.Object{Kind: "container", Name: u})
	}
	return out, nil
}

func (f *fakeEngine) VolumeCreate(ctx context.Context, name string, _ map[string]string) error {
	return f.create(ctx, "VolumeCreate", name)
}

func (f *fakeEngine) ContainerCreate(ctx context.Context, s *specgen.SpecGenerator) error {
	if err := f.create(ctx, "ContainerCreate", s.Name); err != nil {
		return err
	}
	f.mu.Lock()
	f.containers[s.Name] = s
	f.mu.Unlock()
	return nil
}

func (f *fakeEngine) ContainerStartReady(ctx context.Context, name, ready string, _ time.Duration, started func()) error {
	if err := f.create(ctx, "ContainerStartReady", name+" "+ready); err != nil {
		return err
	}
	if started != nil {
		started()
	}
	if f.notReady == name {
		return fmt.Errorf("%s exited before it was ready: %w", name, podman.ErrNotReady)
	}
	return nil
}

func (f *fakeEngine) ContainerLogs(_ context.Context, name string, lines int) string {
	_ = f.record("ContainerLogs", name)
	f.mu.Lock()
	if f.logLines == nil {
		f.logLines = map[string][]int{}
	}
	f.logLines[name] = append(f.logLines[name], lines)
	f.mu.Unlock()
	if l, ok := f.logs[name]; ok {
		return l
	}
	return "nginx: [emerg] fake log line"
}

func (f *fakeEngine) ContainerStart(ctx context.Context, name string) error {
	return f.create(ctx, "ContainerStart", name)
}

func (f *fakeEngine) ContainerRun(ctx context.Context, name string, _ *iostreams.Streams, _ bool, begin func() error) (int, error) {
	if err := f.create(ctx, "ContainerRun", name); err != nil {
		return -1, err
	}
	if f.beforeBegin != nil {
		f.beforeBegin()
	}
	if begin != nil {
		if err := begin(); err != nil {
			return -1, err
		}
	}
	if f.runHook != nil {
		if err := f.runHook(ctx); err != nil {
			return -1, err
		}
	}
	return f.runCode, nil
}

func (f *fakeEngine) ContainerStop(_ context.Context, name string, _ time.Duration) error {
	return f.record("ContainerStop", name)
}

func (f *fakeEngine) ContainerRemove(_ context.Context, name string) error {
	return f.record("ContainerRemove", name)
}

func (f *fakeEngine) PodCreate(ctx context.Context, p *specgen.PodSpecGenerator) error {
	if err := f.create(ctx, "PodCreate", p.Name); err != nil {
		return err
	}
	f.mu.Lock()
	f.pods[p.Name] = p
	f.mu.Unlock()
	return nil
}

func (f *fakeEngine) PodRemove(_ context.Context, name string) error {
	return f.record("PodRemove", name)
}

func (f *fakeEngine) ContainerWait(ctx context.Context, name string) error {
	f.mu.Lock()
	ch := f.stopped[name]
	f.mu.Unlock()
	select {
	case <-ch: // a nil channel never fires
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeEngine) ListLabelled(ctx context.Context, label string) ([]podman.Object, error) {
	if err := f.create(ctx, "ListLabelled", label); err != nil {
		return nil, err
	}
	return f.labelled, nil
}

func (f *fakeEngine) ListVolumes(_ context.Context, label string) ([]podman.VolumeInfo, error) {
	if err := f.record("ListVolumes", label); err != nil {
		return nil, err
	}
	return f.volumes, nil
}

func (f *fakeEngine) VolumeRemove(_ context.Context, name string) error {
	return f.record("VolumeRemove", name)
}

func (f *fakeEngine) ImageUser(ctx context.Context, name string) (string, error) {
	if err := f.create(ctx, "ImageUser", name); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.imageUsers[name]; ok {
		return u, nil
	}
	return "claude", nil
}

func (f *fakeEngine) ImageExists(ctx context.Context, name string) (bool, error) {
	if err := f.create(ctx, "ImageExists", name); err != nil {
		return false, err
	}
	return !f.missingImages[name], nil
}

func (f *fakeEngine) ImageBuild(ctx context.Context, b podman.ImageBuild, out io.Writer) error {
	_, _ = io.WriteString(out, f.buildOutput)
	if f.buildHook != nil {
		f.buildHook(b)
	}
	if err := f.create(ctx, "ImageBuild", b.Tag); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.builds = append(f.builds, b)
	delete(f.missingImages, b.Tag)
	return nil
}

func (f *fakeEngine) ImagePull(_ context.Context, name string, out io.Writer) error {
	_, _ = io.WriteString(out, "Copying blob sha256:0123456789abcdef0123\nWriting manifest to image destination\n")
	if err := f.record("ImagePull", name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.missingImages, name)
	return nil
}

// FollowLogs replays the container's logs line by line, then follows until
// ctx ends, as a running container's would.
func (f *fakeEngine) FollowLogs(ctx context.Context, name string, _ time.Time, line func(string)) error {
	_ = f.record("FollowLogs", name)
	f.mu.Lock()
	logs := f.logs[name]
	f.mu.Unlock()
	for _, l := range strings.Split(strings.TrimSuffix(logs, "\n"), "\n") {
		line(l)
	}
	<-ctx.Done()
	return ctx.Err()
}
