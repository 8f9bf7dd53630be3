package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
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
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// engine is what a session needs from podman. The real one talks to the
// user's shared API service (internal/apiservice); tests use a recording
// fake.
type engine interface {
	NetworkCreate(ctx context.Context, n *types.Network, ignoreIfExists bool) (types.Network, error)
	NetworkRemove(ctx context.Context, name string) error
	// VolumeInspect reports a volume's labels, and whether it exists.
	VolumeInspect(ctx context.Context, name string) (volumeInfo, bool, error)
	// VolumeUsers lists the containers that use a volume.
	VolumeUsers(ctx context.Context, name string) ([]labelledObject, error)
	// VolumeCreate creates a volume; one that exists already is no error.
	VolumeCreate(ctx context.Context, name string, labels map[string]string) error
	ContainerCreate(ctx context.Context, s *specgen.SpecGenerator) error
	// ContainerStartReady starts a container and waits until it prints a
	// line containing ready; it fails if the container exits first or
	// says nothing of the kind within timeout.
	ContainerStartReady(ctx context.Context, name, ready string, timeout time.Duration) error
	// ContainerLogs returns the last lines of a container's output (all of
	// it when lines is 0).
	ContainerLogs(ctx context.Context, name string, lines int) string
	// ContainerRun attaches the streams, starts the container and waits
	// for it; it returns the container's exit code. With tty the terminal
	// on the streams is the container's: raw, and resized with it.
	ContainerRun(ctx context.Context, name string, streams *iostreams.Streams, tty bool) (int, error)
	// ContainerWait returns when the container has stopped.
	ContainerWait(ctx context.Context, name string) error
	ContainerStop(ctx context.Context, name string, timeout time.Duration) error
	ContainerRemove(ctx context.Context, name string) error
	PodCreate(ctx context.Context, p *specgen.PodSpecGenerator) error
	PodRemove(ctx context.Context, name string) error
	// FollowLogs calls line for each log line written after since, until
	// the container stops or ctx ends.
	FollowLogs(ctx context.Context, name string, since time.Time, line func(string)) error
	// ListLabelled lists the pods, containers and networks carrying label.
	ListLabelled(ctx context.Context, label string) ([]labelledObject, error)
	// ListVolumes lists the volumes carrying label.
	ListVolumes(ctx context.Context, label string) ([]volumeInfo, error)
	// VolumeRemove removes a volume that no container uses.
	VolumeRemove(ctx context.Context, name string) error
	// ImageExists reports whether an image is in local storage.
	ImageExists(ctx context.Context, name string) (bool, error)
	// ImageBuild builds and tags an image, writing podman's build output
	// to out.
	ImageBuild(ctx context.Context, b imageBuild, out io.Writer) error
	// ImagePull pulls an image, writing podman's progress to out.
	ImagePull(ctx context.Context, name string, out io.Writer) error
}

// imageBuild is one image build from a context dir with a Containerfile.
type imageBuild struct {
	tag, contextDir string
	args            map[string]string
	// secrets are `podman build --secret` values.
	secrets []string
	noCache bool
}

// errNotReady means a helper container started but never said it was ready.
var errNotReady = errors.New("not ready")

// minPodman is the oldest podman service the session steps were proven on.
const minPodman = "4.3.0"

// podmanEngine implements engine with the podman v5 bindings. Every method
// takes the connection context that startService returned (or one derived
// from it).
type podmanEngine struct {
	// trace, if on, times every call that changes what podman holds.
	trace *trace.Tracer
}

// step times one call, when tracing.
func (c podmanEngine) step(name string) func() {
	if c.trace == nil {
		return func() {}
	}
	return c.trace.Step(name)
}

func checkServiceVersion(conn context.Context) error {
	v := bindings.ServiceVersion(conn)
	if v == nil {
		return nil
	}
	if v.LT(semver.MustParse(minPodman)) {
		return fmt.Errorf("podman %s is too old: agent-sandbox needs podman %s or newer", v, minPodman)
	}
	return nil
}

// limitedWriter keeps the first n bytes, enough for an error message.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

func (c podmanEngine) NetworkCreate(ctx context.Context, n *types.Network, ignoreIfExists bool) (types.Network, error) {
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

func (c podmanEngine) NetworkRemove(ctx context.Context, name string) error {
	defer c.step("network remove " + name)()
	_, err := network.Remove(ctx, name, new(network.RemoveOptions).WithForce(true))
	return err
}

func (c podmanEngine) VolumeInspect(ctx context.Context, name string) (volumeInfo, bool, error) {
	defer c.step("volume inspect " + name)()
	v, err := volumes.Inspect(ctx, name, nil)
	if err != nil {
		if strings.Contains(err.Error(), "no such volume") {
			return volumeInfo{}, false, nil
		}
		return volumeInfo{}, false, fmt.Errorf("inspect volume %s: %w", name, err)
	}
	return volumeInfo{name: v.Name, labels: v.Labels}, true, nil
}

func (podmanEngine) VolumeUsers(ctx context.Context, name string) ([]labelledObject, error) {
	cs, err := containers.List(ctx, new(containers.ListOptions).WithAll(true).
		WithFilters(map[string][]string{"volume": {name}}))
	if err != nil {
		return nil, fmt.Errorf("list the users of volume %s: %w", name, err)
	}
	var out []labelledObject
	for _, c := range cs {
		if len(c.Names) > 0 {
			out = append(out, labelledObject{kind: "container", name: c.Names[0], labels: c.Labels, running: c.State == "running"})
		}
	}
	return out, nil
}

func (c podmanEngine) VolumeCreate(ctx context.Context, name string, labels map[string]string) error {
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

func (c podmanEngine) ContainerCreate(ctx context.Context, s *specgen.SpecGenerator) error {
	defer c.step("container create " + s.Name)()
	if _, err := containers.CreateWithSpec(ctx, s, nil); err != nil {
		return fmt.Errorf("create container %s: %w", s.Name, err)
	}
	return nil
}

func (c podmanEngine) ContainerStartReady(ctx context.Context, name, ready string, timeout time.Duration) error {
	defer c.step("container start+ready " + name)()
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
	found := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), ready) {
				found <- nil
				return
			}
		}
		found <- fmt.Errorf("%s exited before it was ready: %w", name, errNotReady)
	}()
	select {
	case err := <-found:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("%s was not ready after %s: %w", name, timeout, errNotReady)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (podmanEngine) ContainerLogs(ctx context.Context, name string, lines int) string {
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

func (c podmanEngine) ContainerRun(ctx context.Context, name string, streams *iostreams.Streams, tty bool) (int, error) {
	defer c.step("container run " + name)()
	attachOpts := new(containers.AttachOptions).WithStream(true).WithDetachKeys("")
	attachErr := make(chan error, 1)
	ready := make(chan bool, 1)
	stderr := streams.Err
	if tty {
		stderr = nil
	}
	stdin, closeStdin := interruptibleStdin(streams)
	// Closed when the run ends: the attach's copy of stdin would otherwise
	// stay blocked on a read of the terminal, and take what the user types
	// at the next prompt while the keeper tears down.
	defer closeStdin()
	if tty {
		// Ours, not the attach's: it does these only for an *os.File,
		// whose Fd() would make the read above blocking again.
		restore, err := rawTerminal(streams)
		if err != nil {
			return -1, err
		}
		defer restore()
		defer followResize(ctx, name, streams)()
	}
	go func() { attachErr <- containers.Attach(ctx, name, stdin, streams.Out, stderr, ready, attachOpts) }()
	select {
	case <-ready:
	case err := <-attachErr:
		return -1, fmt.Errorf("attach to %s: %w", name, err)
	}
	if err := containers.Start(ctx, name, new(containers.StartOptions).WithDetachKeys("")); err != nil {
		return -1, fmt.Errorf("start container %s: %w", name, err)
	}
	if tty {
		// Attach sized the terminal before the start, when there was none.
		if w, h, ok := streams.Size(); ok {
			_ = containers.ResizeContainerTTY(ctx, name, new(containers.ResizeTTYOptions).WithWidth(w).WithHeight(h))
		}
	}
	code, drained, err := waitRun(ctx, name, attachErr)
	if err != nil {
		return -1, fmt.Errorf("wait for %s: %w", name, err)
	}
	if !drained {
		// Let the last output drain before teardown closes the stream.
		select {
		case <-attachErr:
		case <-time.After(2 * time.Second):
		}
	}
	return int(code), nil
}

// interruptibleStdin is stdin for the attach, read only once poll(2) says
// there is input, so that closing it ends a wait in progress without
// taking anything the user types later. It is no *os.File to the attach,
// which would otherwise read the terminal itself and leave that read
// blocked when the agent exits: it would take what the user types at the
// next prompt while the keeper tears down.
func interruptibleStdin(streams *iostreams.Streams) (io.Reader, func()) {
	fd, isFile := streams.InFd()
	var wake [2]int
	if !isFile || unix.Pipe2(wake[:], unix.O_CLOEXEC) != nil {
		return &plainReader{streams.In}, func() {}
	}
	r := &pollReader{fd: fd, wake: wake[0]}
	var once sync.Once
	return r, func() {
		once.Do(func() {
			// The wake pipe's read end stays open: a Read may still be
			// polling it, and it is one fd for the session's length.
			_ = unix.Close(wake[1])
		})
	}
}

// plainReader hides what reads it from the attach. A pointer: the attach
// checks its stdin for nil by reflection.
type plainReader struct{ r io.Reader }

func (p *plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

// pollReader reads fd once poll(2) reports input, and ends (io.EOF) once
// wake is closed.
type pollReader struct{ fd, wake int }

func (p *pollReader) Read(b []byte) (int, error) {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}, {Fd: int32(p.wake), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return 0, err
		}
		if fds[1].Revents != 0 {
			return 0, io.EOF
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(p.fd, b)
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// rawTerminal puts the terminal on stdin in raw mode, as `podman run -it`
// does, and returns what restores it.
func rawTerminal(streams *iostreams.Streams) (func(), error) {
	fd, isFile := streams.InFd()
	if !isFile {
		return nil, errors.New("cannot put the terminal in raw mode: stdin is no terminal")
	}
	state, err := term.MakeRaw(fd)
	if err != nil {
		return nil, fmt.Errorf("cannot put the terminal in raw mode: %w", err)
	}
	return func() { _ = term.Restore(fd, state) }, nil
}

// followResize passes the terminal's new size to the agent's on every
// SIGWINCH until the returned func is called.
func followResize(ctx context.Context, name string, streams *iostreams.Streams) func() {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				if w, h, ok := streams.Size(); ok {
					_ = containers.ResizeContainerTTY(ctx, name, new(containers.ResizeTTYOptions).WithWidth(w).WithHeight(h))
				}
			}
		}
	}()
	return func() { signal.Stop(winch); cancel() }
}

// waitRun waits for the attached container to exit. The attach stream
// ends the moment the container's process does, so its end is the first
// sign of the exit, in a session of any length; the service's wait, which
// polls the container's state, would see it only on its grid (250 ms
// after the first seconds). drained says the stream has ended, output
// and all.
func waitRun(ctx context.Context, name string, attachErr <-chan error) (code int32, drained bool, err error) {
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	type result struct {
		code int32
		err  error
	}
	polled := make(chan result, 1)
	go func() {
		c, err := waitExited(pollCtx, name)
		polled <- result{c, err}
	}()
	select {
	case r := <-polled:
		return r.code, false, r.err
	case <-attachErr:
	}
	// Not waited for: a cancelled wait returns only when the service
	// answers, which is once conmon has exited (see exitedCode).
	stopPoll()
	// The exit is now, or the stream broke with the container running.
	code, err = exitedCode(ctx, name)
	return code, true, err
}

// exitedCode is the exit code of a container whose attach stream has
// ended. The service's wait would give it only once conmon has exited, and
// conmon waits for podman's exit command (`podman container cleanup`, a
// whole podman process: about 0.6 s here); an inspect reads the state from
// the runtime and conmon's exit file, which is there at once. A stream that
// broke with the container still running falls back to the wait.
func exitedCode(ctx context.Context, name string) (int32, error) {
	for range 20 {
		data, err := containers.Inspect(ctx, name, nil)
		if err != nil {
			return 0, err
		}
		if st := data.State; st != nil && !st.Running && (st.Status == define.ContainerStateExited.String() || st.Status == define.ContainerStateStopped.String()) {
			return st.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return waitExited(ctx, name)
}

// The service's wait polls the container's state (no pidfd through the
// API): on its default 250 ms grid a command that ends at once, such as
// `--exec true`, is seen ending up to a quarter second late. The first
// seconds are polled finely; after them an exit a little late costs
// nothing next to the session's length, and the coarse grid costs the
// service less.
const (
	waitFineInterval = "10ms"
	waitFineFor      = 2 * time.Second
)

// waitExited waits for the container to exit and returns its exit code.
func waitExited(ctx context.Context, name string) (int32, error) {
	exited := []define.ContainerStatus{define.ContainerStateExited, define.ContainerStateStopped}
	fine, cancel := context.WithTimeout(ctx, waitFineFor)
	code, err := containers.Wait(fine, name, new(containers.WaitOptions).WithCondition(exited).WithInterval(waitFineInterval))
	cancel()
	if err == nil || ctx.Err() != nil || fine.Err() == nil {
		return code, err
	}
	return containers.Wait(ctx, name, new(containers.WaitOptions).WithCondition(exited))
}

func (podmanEngine) ContainerWait(ctx context.Context, name string) error {
	_, err := containers.Wait(ctx, name, new(containers.WaitOptions).WithCondition([]define.ContainerStatus{define.ContainerStateExited, define.ContainerStateStopped}))
	return err
}

func (c podmanEngine) ContainerStop(ctx context.Context, name string, timeout time.Duration) error {
	defer c.step("container stop " + name)()
	return containers.Stop(ctx, name, new(containers.StopOptions).WithTimeout(uint(timeout.Seconds())).WithIgnore(true))
}

func (c podmanEngine) ContainerRemove(ctx context.Context, name string) error {
	defer c.step("container remove " + name)()
	_, err := containers.Remove(ctx, name, new(containers.RemoveOptions).WithForce(true).WithIgnore(true).WithTimeout(0))
	return err
}

func (c podmanEngine) PodCreate(ctx context.Context, p *specgen.PodSpecGenerator) error {
	defer c.step("pod create " + p.Name)()
	if _, err := pods.CreatePodFromSpec(ctx, &entities.PodSpec{PodSpecGen: *p}); err != nil {
		return fmt.Errorf("create pod %s: %w", p.Name, err)
	}
	return nil
}

func (c podmanEngine) PodRemove(ctx context.Context, name string) error {
	defer c.step("pod remove " + name)()
	_, err := pods.Remove(ctx, name, new(pods.RemoveOptions).WithForce(true).WithTimeout(0))
	return err
}

func (podmanEngine) ListLabelled(ctx context.Context, label string) ([]labelledObject, error) {
	filter := map[string][]string{"label": {label}}
	var out []labelledObject
	ps, err := pods.List(ctx, new(pods.ListOptions).WithFilters(filter))
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	for _, p := range ps {
		out = append(out, labelledObject{kind: "pod", name: p.Name, labels: p.Labels})
	}
	cs, err := containers.List(ctx, new(containers.ListOptions).WithAll(true).WithFilters(filter))
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs {
		if len(c.Names) > 0 && !c.IsInfra {
			out = append(out, labelledObject{kind: "container", name: c.Names[0], labels: c.Labels, running: c.State == "running"})
		}
	}
	ns, err := network.List(ctx, new(network.ListOptions).WithFilters(filter))
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	for _, n := range ns {
		out = append(out, labelledObject{kind: "network", name: n.Name, labels: n.Labels})
	}
	return out, nil
}

// volumeInfo is a volume's name and labels.
type volumeInfo struct {
	name   string
	labels map[string]string
}

func (podmanEngine) ListVolumes(ctx context.Context, label string) ([]volumeInfo, error) {
	vs, err := volumes.List(ctx, new(volumes.ListOptions).WithFilters(map[string][]string{"label": {label}}))
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	out := make([]volumeInfo, 0, len(vs))
	for _, v := range vs {
		out = append(out, volumeInfo{name: v.Name, labels: v.Labels})
	}
	return out, nil
}

func (podmanEngine) VolumeRemove(ctx context.Context, name string) error {
	if err := volumes.Remove(ctx, name, nil); err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	return nil
}

func (podmanEngine) ImageExists(ctx context.Context, name string) (bool, error) {
	return images.Exists(ctx, name, nil)
}

func (podmanEngine) ImageBuild(ctx context.Context, b imageBuild, out io.Writer) error {
	var opts entities.BuildOptions
	opts.ContextDirectory = b.contextDir
	opts.Output = b.tag
	opts.Args = b.args
	// As `podman build` does: layers keep rebuilds fast (the API's own
	// default is no layers), and OCI is the CLI's default format.
	opts.Layers = true
	opts.NoCache = b.noCache
	opts.RemoveIntermediateCtrs = true
	opts.ForceRmIntermediateCtrs = true
	opts.PullPolicy = buildahDefine.PullIfMissing
	opts.OutputFormat = buildahDefine.OCIv1ImageManifest
	// The bindings copy each secret's src into the context they upload; the
	// service moves it out again before the build sees the context.
	opts.CommonBuildOpts = &buildahDefine.CommonBuildOptions{Secrets: b.secrets}
	opts.Out, opts.Err, opts.ReportWriter = out, out, out
	if _, err := images.Build(ctx, []string{filepath.Join(b.contextDir, "Containerfile")}, opts); err != nil {
		return fmt.Errorf("build %s: %w", b.tag, err)
	}
	return nil
}

func (podmanEngine) ImagePull(ctx context.Context, name string, out io.Writer) error {
	if _, err := images.Pull(ctx, name, new(images.PullOptions).WithProgressWriter(out)); err != nil {
		return fmt.Errorf("pull %s: %w", name, err)
	}
	return nil
}

func (podmanEngine) FollowLogs(ctx context.Context, name string, since time.Time, line func(string)) error {
	out := make(chan string, 64)
	done := make(chan error, 1)
	opts := new(containers.LogOptions).WithStdout(true).WithStderr(true).WithFollow(true).WithSince(since.Format(time.RFC3339Nano))
	go func() { done <- containers.Logs(ctx, name, opts, out, out); close(out) }()
	for l := range out {
		line(strings.TrimRight(l, "\n"))
	}
	return <-done
}
