// Package podman is the adapter between a session and podman: the v5
// bindings' calls a session makes (networks, volumes, containers, pods,
// images, logs), the attach of the agent to the user's terminal, and the
// use of the podman API service the user's sessions share, which it ends a
// session on losing. Every call that changes what podman holds is timed
// when tracing. The session drives it through the root's engine interface;
// it knows nothing of sessions, settings or the allowlist.
package podman

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/trace"
	"github.com/blang/semver/v4"
	buildahDefine "github.com/containers/buildah/define"
	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/network"
	"github.com/containers/podman/v5/pkg/bindings/pods"
	"github.com/containers/podman/v5/pkg/bindings/volumes"
	entities "github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/specgen"
	"go.podman.io/common/libnetwork/types"
)

// ImageBuild is one image build from a context dir with a Containerfile.
type ImageBuild struct {
	Tag, ContextDir string
	Args            map[string]string
	// Secrets are `podman build --secret` values.
	Secrets []string
	NoCache bool
}

// ErrNotReady means a helper container started but never said it was ready.
var ErrNotReady = errors.New("not ready")

// MinVersion is the oldest podman service the session steps were proven on.
const MinVersion = "4.3.0"

// bindingsClient makes the calls with the podman v5 bindings. Every method
// takes the connection context that Open returned (or one derived from
// it).
type bindingsClient struct {
	// trace, if on, times every call that changes what podman holds.
	trace *trace.Tracer
}

// step times one call, when tracing.
func (c bindingsClient) step(name string) func() {
	if c.trace == nil {
		return func() {}
	}
	return c.trace.Step(name)
}

// checkServiceVersion refuses a service older than MinVersion.
func checkServiceVersion(conn context.Context) error {
	v := bindings.ServiceVersion(conn)
	if v == nil {
		return nil
	}
	if v.LT(semver.MustParse(MinVersion)) {
		return fmt.Errorf("podman %s is too old: agent-sandbox needs podman %s or newer", v, MinVersion)
	}
	return nil
}

func (c bindingsClient) NetworkCreate(ctx context.Context, n *types.Network, ignoreIfExists bool) (types.Network, error) {
	defer c.step("network create " + n.Name)()
	if ignoreIfExists {
		// Checking first spares podman 4, whose API may not know the
		// ignoreIfExists option; a race with another session is caught below.
		if r, err := network.Inspect(ctx, n.Name, nil); err == nil {
			return r.Network, nil
		}
	}
	r, err := network.Create(ctx, n)
	if err != nil && ignoreIfExists {
		// Another session may have created it in the meantime.
		if ins, ierr := network.Inspect(ctx, n.Name, nil); ierr == nil {
			return ins.Network, nil
		}
	}
	if err != nil {
		return r, fmt.Errorf("create network %s: %w", n.Name, err)
	}
	return r, nil
}

func (c bindingsClient) NetworkRemove(ctx context.Context, name string) error {
	defer c.step("network remove " + name)()
	_, err := network.Remove(ctx, name, new(network.RemoveOptions).WithForce(true))
	return err
}

func (c bindingsClient) VolumeInspect(ctx context.Context, name string) (VolumeInfo, bool, error) {
	defer c.step("volume inspect " + name)()
	v, err := volumes.Inspect(ctx, name, nil)
	if err != nil {
		if strings.Contains(err.Error(), "no such volume") {
			return VolumeInfo{}, false, nil
		}
		return VolumeInfo{}, false, fmt.Errorf("inspect volume %s: %w", name, err)
	}
	return VolumeInfo{Name: v.Name, Labels: v.Labels}, true, nil
}

func (bindingsClient) VolumeUsers(ctx context.Context, name string) ([]Object, error) {
	cs, err := containers.List(ctx, new(containers.ListOptions).WithAll(true).
		WithFilters(map[string][]string{"volume": {name}}))
	if err != nil {
		return nil, fmt.Errorf("list the users of volume %s: %w", name, err)
	}
	var out []Object
	for _, c := range cs {
		if len(c.Names) > 0 {
			out = append(out, Object{Kind: "container", Name: c.Names[0], Labels: c.Labels, Running: c.State == "running"})
		}
	}
	return out, nil
}

func (c bindingsClient) VolumeCreate(ctx context.Context, name string, labels map[string]string) error {
	defer c.step("volume create " + name)()
	_, err := volumes.Create(ctx, entities.VolumeCreateOptions{Name: name, Labels: labels}, nil)
	// Another session may have created it since it was inspected.
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	return nil
}

func (c bindingsClient) ContainerCreate(ctx context.Context, s *specgen.SpecGenerator) error {
	defer c.step("container create " + s.Name)()
	if _, err := containers.CreateWithSpec(ctx, s, nil); err != nil {
		return fmt.Errorf("create container %s: %w", s.Name, err)
	}
	return nil
}

func (c bindingsClient) ContainerStart(ctx context.Context, name string) error {
	defer c.step("container start " + name)()
	err := startOnceMoreIfInitDied(ctx, func() error {
		return containers.Start(ctx, name, new(containers.StartOptions).WithDetachKeys(""))
	})
	if err != nil {
		return fmt.Errorf("start container %s: %w", name, err)
	}
	return nil
}

func (c bindingsClient) ContainerStartReady(ctx context.Context, name, ready string, timeout time.Duration, started func()) error {
	defer c.step("container start+ready " + name)()
	return startOnceMoreIfInitDied(ctx, func() error { return startReady(ctx, name, ready, timeout, started) })
}

// startOnceMoreIfInitDied runs start, and once more when the runtime's
// init died before anything of the container ran (initDied).
func startOnceMoreIfInitDied(ctx context.Context, start func() error) error {
	err := start()
	if initDied(err) && ctx.Err() == nil {
		err = start()
	}
	return err
}

// initDied says the OCI runtime's init process went away while it set the
// container up, before anything of the container ran: seen once in fifty
// sessions started and killed side by side on two cores (runc's "waiting
// for init preliminary setup: read init-p: connection reset by peer").
// Starting the same container once more is safe, and what the user would
// do by hand.
func initDied(err error) bool {
	return err != nil && strings.Contains(err.Error(), "read init-p: connection reset by peer")
}

func startReady(ctx context.Context, name, ready string, timeout time.Duration, started func()) error {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	out, in := io.Pipe()
	// Closing the reader ends Attach at its next write; the container
	// itself keeps running.
	defer out.Close()
	attached := make(chan bool, 1)
	attachErr := make(chan error, 1)
	opts := new(containers.AttachOptions).WithStream(true)
	go func() {
		err := containers.Attach(actx, name, nil, in, in, attached, opts)
		in.CloseWithError(err)
		attachErr <- err
	}()
	select {
	case <-attached:
	case err := <-attachErr:
		return fmt.Errorf("attach to %s: %w", name, err)
	}
	if err := containers.Start(ctx, name, nil); err != nil {
		return fmt.Errorf("start container %s: %w", name, err)
	}
	if started != nil {
		started()
	}
	found := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), ready) {
				found <- nil
				return
			}
		}
		found <- fmt.Errorf("%s exited before it was ready: %w", name, ErrNotReady)
	}()
	select {
	case err := <-found:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("%s was not ready after %s: %w", name, timeout, ErrNotReady)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (bindingsClient) ContainerLogs(ctx context.Context, name string, lines int) string {
	out := make(chan string, 64)
	done := make(chan error, 1)
	tail := "-1" // podman's "all"
	if lines > 0 {
		tail = fmt.Sprint(lines)
	}
	opts := new(containers.LogOptions).WithStdout(true).WithStderr(true).WithTail(tail)
	go func() { done <- containers.Logs(ctx, name, opts, out, out); close(out) }()
	var got []string
	for l := range out {
		got = append(got, strings.TrimRight(l, "\n"))
	}
	if err := <-done; err != nil && len(got) == 0 {
		return fmt.Sprintf("(no logs: %v)", err)
	}
	if lines > 0 && len(got) > lines {
		got = got[len(got)-lines:]
	}
	return strings.Join(got, "\n")
}

func (bindingsClient) ContainerWait(ctx context.Context, name string) error {
	_, err := containers.Wait(ctx, name, new(containers.WaitOptions).WithCondition([]define.ContainerStatus{define.ContainerStateExited, define.ContainerStateStopped}))
	return err
}

func (c bindingsClient) ContainerStop(ctx context.Context, name string, timeout time.Duration) error {
	defer c.step("container stop " + name)()
	return containers.Stop(ctx, name, new(containers.StopOptions).WithTimeout(uint(timeout.Seconds())).WithIgnore(true))
}

func (c bindingsClient) ContainerRemove(ctx context.Context, name string) error {
	defer c.step("container remove " + name)()
	_, err := containers.Remove(ctx, name, new(containers.RemoveOptions).WithForce(true).WithIgnore(true).WithTimeout(0))
	return err
}

func (c bindingsClient) PodCreate(ctx context.Context, p *specgen.PodSpecGenerator) error {
	defer c.step("pod create " + p.Name)()
	var err error
	for try := 0; ; try++ {
		_, err = pods.CreatePodFromSpec(ctx, &entities.PodSpec{PodSpecGen: *p})
		if !subIDsUnread(err) || try == subIDTries-1 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		case <-time.After(time.Duration(10+try*20) * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("create pod %s: %w", p.Name, err)
	}
	return nil
}

// subIDsUnread says podman refused a keep-id pod because it read no
// subordinate ids that time, though the user has them: podman 4.3's
// service reads them through shadow's libsubid, which is not safe to call
// from two threads at once, and a service shared by several sessions
// starting together does (its log says "cannot find UID/GID for user ...:
// cannot read subids"; seen in 2 of 4 rounds of eight sessions at once).
// Nothing was made; asking again is what the user would do. A user who
// really has no subordinate ids is told so before any of this (prepare's
// subordinateIDsMissing), and fails here again after the tries.
func subIDsUnread(err error) bool {
	return err != nil && strings.Contains(err.Error(), "keep-id requires additional UIDs or GIDs")
}

// subIDTries bounds the pod's creation when subIDsUnread.
const subIDTries = 4

func (c bindingsClient) PodRemove(ctx context.Context, name string) error {
	defer c.step("pod remove " + name)()
	var err error
	for try := 0; try < podRemoveTries; try++ {
		_, err = pods.Remove(ctx, name, new(pods.RemoveOptions).WithForce(true).WithTimeout(0))
		if !servicePanicked(err) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return err
}

// podRemoveTries bounds the removals of a pod asked again after the
// service's handler failed on a Go runtime error: podman 4.3 did so once
// (a nil pointer) removing a pod without an infra container whose
// containers it had removed, and left the pod; the CLI's removal of the
// same pod then worked.
const podRemoveTries = 3

// servicePanicked says the service's handler hit a Go runtime error.
func servicePanicked(err error) bool {
	return err != nil && strings.Contains(err.Error(), "runtime error:")
}

func (bindingsClient) ListLabelled(ctx context.Context, label string) ([]Object, error) {
	filter := map[string][]string{"label": {label}}
	var out []Object
	ps, err := pods.List(ctx, new(pods.ListOptions).WithFilters(filter))
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	for _, p := range ps {
		out = append(out, Object{Kind: "pod", Name: p.Name, Labels: p.Labels})
	}
	cs, err := containers.List(ctx, new(containers.ListOptions).WithAll(true).WithFilters(filter))
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs {
		if len(c.Names) > 0 && !c.IsInfra {
			out = append(out, Object{Kind: "container", Name: c.Names[0], Labels: c.Labels, Running: c.State == "running"})
		}
	}
	ns, err := network.List(ctx, new(network.ListOptions).WithFilters(filter))
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	for _, n := range ns {
		out = append(out, Object{Kind: "network", Name: n.Name, Labels: n.Labels})
	}
	return out, nil
}

// VolumeInfo is a volume's name and labels.
type VolumeInfo struct {
	Name   string
	Labels map[string]string
}

func (bindingsClient) ListVolumes(ctx context.Context, label string) ([]VolumeInfo, error) {
	vs, err := volumes.List(ctx, new(volumes.ListOptions).WithFilters(map[string][]string{"label": {label}}))
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	out := make([]VolumeInfo, 0, len(vs))
	for _, v := range vs {
		out = append(out, VolumeInfo{Name: v.Name, Labels: v.Labels})
	}
	return out, nil
}

func (bindingsClient) VolumeRemove(ctx context.Context, name string) error {
	if err := volumes.Remove(ctx, name, nil); err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	return nil
}

func (bindingsClient) ImageExists(ctx context.Context, name string) (bool, error) {
	return images.Exists(ctx, name, nil)
}

func (c bindingsClient) ImageUser(ctx context.Context, name string) (string, error) {
	defer c.step("image user " + name)()
	data, err := images.GetImage(ctx, name, nil)
	if err != nil {
		return "", fmt.Errorf("inspect image %s: %w", name, err)
	}
	if data.Config == nil {
		return "", nil
	}
	return data.Config.User, nil
}

func (bindingsClient) ImageBuild(ctx context.Context, b ImageBuild, out io.Writer) error {
	var opts entities.BuildOptions
	opts.ContextDirectory = b.ContextDir
	opts.Output = b.Tag
	opts.Args = b.Args
	// As `podman build` does: layers keep rebuilds fast (the API's own
	// default is no layers), and OCI is the CLI's default format.
	opts.Layers = true
	opts.NoCache = b.NoCache
	opts.RemoveIntermediateCtrs = true
	opts.ForceRmIntermediateCtrs = true
	opts.PullPolicy = buildahDefine.PullIfMissing
	opts.OutputFormat = buildahDefine.OCIv1ImageManifest
	// The bindings copy each secret's src into the context they upload; the
	// service moves it out again before the build sees the context.
	opts.CommonBuildOpts = &buildahDefine.CommonBuildOptions{Secrets: b.Secrets}
	opts.Out, opts.Err, opts.ReportWriter = out, out, out
	if _, err := images.Build(ctx, []string{filepath.Join(b.ContextDir, "Containerfile")}, opts); err != nil {
		return fmt.Errorf("build %s: %w", b.Tag, err)
	}
	return nil
}

func (bindingsClient) ImagePull(ctx context.Context, name string, out io.Writer) error {
	if _, err := images.Pull(ctx, name, new(images.PullOptions).WithProgressWriter(out)); err != nil {
		return fmt.Errorf("pull %s: %w", name, err)
	}
	return nil
}

func (bindingsClient) FollowLogs(ctx context.Context, name string, since time.Time, line func(string)) error {
	out := make(chan string, 64)
	done := make(chan error, 1)
	opts := new(containers.LogOptions).WithStdout(true).WithStderr(true).WithFollow(true).WithSince(since.Format(time.RFC3339Nano))
	go func() { done <- containers.Logs(ctx, name, opts, out, out); close(out) }()
	for l := range out {
		line(strings.TrimRight(l, "\n"))
	}
	return <-done
}

// Object is a podman object that carries a session label.
type Object struct {
	Kind   string // "pod", "container" or "network"
	Name   string
	Labels map[string]string
	// Running is set for containers that run now.
	Running bool
}
