package main

import (
	"context"
	"io"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/podman"
	"github.com/containers/podman/v5/pkg/specgen"
	"go.podman.io/common/libnetwork/types"
)

// engine is what a session needs from podman. The real one is
// internal/podman's Client, on the user's shared API service
// (internal/apiservice); tests use a recording fake.
type engine interface {
	NetworkCreate(ctx context.Context, n *types.Network, ignoreIfExists bool) (types.Network, error)
	NetworkRemove(ctx context.Context, name string) error
	// VolumeInspect reports a volume's labels, and whether it exists.
	VolumeInspect(ctx context.Context, name string) (podman.VolumeInfo, bool, error)
	// VolumeUsers lists the containers that use a volume.
	VolumeUsers(ctx context.Context, name string) ([]podman.Object, error)
	// VolumeCreate creates a volume; one that exists already is no error.
	VolumeCreate(ctx context.Context, name string, labels map[string]string) error
	ContainerCreate(ctx context.Context, s *specgen.SpecGenerator) error
	// ContainerStartReady starts a container and waits until it prints a
	// line containing ready; it fails if the container exits first or
	// says nothing of the kind within timeout. started, if not nil, is
	// called once the container has started.
	ContainerStartReady(ctx context.Context, name, ready string, timeout time.Duration, started func()) error
	// ContainerLogs returns the last lines of a container's output (all of
	// it when lines is 0).
	ContainerLogs(ctx context.Context, name string, lines int) string
	// ContainerStart starts a container.
	ContainerStart(ctx context.Context, name string) error
	// ContainerRun attaches the streams, has the container begin and
	// waits for it; it returns the container's exit code. begin nil
	// starts it; a container started already behind a gate is begun by
	// opening the gate. With tty the terminal on the streams is the
	// container's: raw, and resized with it.
	ContainerRun(ctx context.Context, name string, streams *iostreams.Streams, tty bool, begin func() error) (int, error)
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
	ListLabelled(ctx context.Context, label string) ([]podman.Object, error)
	// ListVolumes lists the volumes carrying label.
	ListVolumes(ctx context.Context, label string) ([]podman.VolumeInfo, error)
	// VolumeRemove removes a volume that no container uses.
	VolumeRemove(ctx context.Context, name string) error
	// ImageExists reports whether an image is in local storage.
	ImageExists(ctx context.Context, name string) (bool, error)
	// ImageUser is the user an image runs as ("" when it names none).
	ImageUser(ctx context.Context, name string) (string, error)
	// ImageBuild builds and tags an image, writing podman's build output
	// to out.
	ImageBuild(ctx context.Context, b podman.ImageBuild, out io.Writer) error
	// ImagePull pulls an image, writing podman's progress to out.
	ImagePull(ctx context.Context, name string, out io.Writer) error
}

var _ engine = podman.Client{}
