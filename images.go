package main

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/podman"
)

// The images' build contexts travel inside the binary, so that a machine
// with podman and nothing else can build them. The router's helpers
// (*.bin) are there only when `make build` made them first: a plain
// `go build` in a fresh clone still works, but cannot build the router.
//
//go:embed router-image sandbox-image recipes
var embeddedContexts embed.FS

// imageContexts is a variable so that tests can stand in for the helpers.
var imageContexts fs.FS = embeddedContexts

const (
	defaultBaseImage = "docker.io/library/debian:trixie-slim"
	// hostCABundle is trusted by the build steps that download over TLS
	// (npm), so that a site's TLS-intercepting proxy works. It is passed as
	// a build secret, so it stays out of the image.
	hostCABundle = "/etc/ssl/certs/ca-certificates.crt"
	// failureTail is how much of a failed build's output is shown.
	failureTail = 20
)

// defaultImageNames are the images agent-sandbox provides by itself: built
// locally by a dev build, pulled from the registry by a release build.
func defaultImageNames() (string, string) {
	if releaseBuild() {
		return registry + "/agent-sandbox:" + version, registry + "/agent-sandbox-router:" + version
	}
	return "localhost/agent-sandbox:dev", "localhost/agent-sandbox-router:dev"
}

// sessionImage is one of the two images a session runs.
type sessionImage struct {
	role  string // "sandbox" or "router", as progress lines call it
	name  string // what the session runs
	dflt  string // the name agent-sandbox provides by itself
	env   string // the variable that names another image instead
	dir   string // its build context in imageContexts
	needs []string
	// hostCA passes the host's CA bundle to the build as secret "hostca".
	hostCA bool
	// base is the image it is built FROM (build arg BASE), when not the
	// base image the sandbox image is built from: an agent's recipe is
	// built on the sandbox image.
	base string
}

// sessionImages lists the sandbox image, then the router image.
func sessionImages(set settings) []sessionImage {
	img, router := set.image, set.routerImage
	dImg, dRouter := defaultImageNames()
	return []sessionImage{
		{role: "sandbox", name: img, dflt: dImg, env: "AGENT_SANDBOX_IMAGE", dir: "sandbox-image", hostCA: true},
		{role: "router", name: router, dflt: dRouter, env: "AGENT_SANDBOX_ROUTER_IMAGE", dir: "router-image",
			needs: []string{"forwarder.bin", "routerd.bin"}},
	}
}

// ours reports whether agent-sandbox can provide the image itself: any
// other name is the user's, and only the user knows where it comes from.
func (im sessionImage) ours() bool { return im.name == im.dflt }

// releaseBuild reports whether this binary pulls its images from a registry
// instead of building them.
func releaseBuild() bool { return version != "dev" && registry != "" }

// ensureImages runs before anything of a session is created. A missing
// image of agent-sandbox's own is built (or, by a release build, pulled);
// a missing image the user named is refused, and then nothing is built.
//
// extra are images the session needs beyond the two, after them (an
// agent's, built on the sandbox image).
func ensureImages(ctx context.Context, eng engine, set settings, extra []sessionImage, name string, out io.Writer) error {
	missing, err := missingImages(ctx, eng, append(sessionImages(set), extra...))
	if err != nil || len(missing) == 0 {
		return err
	}
	if releaseBuild() {
		for _, im := range missing {
			iostreams.Say(out, "image %s is missing: pulling it (once)", im.name)
			if err := pullImage(ctx, eng, im, out); err != nil {
				return err
			}
		}
		return nil
	}
	for _, im := range missing {
		if err := checkContext(im); err != nil {
			return refused(err)
		}
	}
	for _, im := range missing {
		iostreams.Say(out, "image %s is missing: building it (once; `agent-sandbox build --only %s` rebuilds it)", im.name, strings.TrimSuffix(im.role, " agent"))
		if err := buildImage(ctx, eng, set, im, name, false, out); err != nil {
			return err
		}
	}
	return nil
}

// missingImages are the session's images that are not in local storage;
// one the user named is refused, since only the user knows where it comes
// from.
func missingImages(ctx context.Context, eng engine, images []sessionImage) ([]sessionImage, error) {
	var missing []sessionImage
	for _, im := range images {
		ok, err := eng.ImageExists(ctx, im.name)
		if err != nil {
			return nil, err
		}
		if ok {
			continue
		}
		if !im.ours() {
			return nil, refusef("image %s is missing: build or pull it, or unset %s to use agent-sandbox's own image", im.name, im.env)
		}
		missing = append(missing, im)
	}
	return missing, nil
}

// buildCommand is `agent-sandbox build`: it (re)builds agent-sandbox's own
// images, whatever is there already.
func buildCommand(ctx context.Context, set settings, out io.Writer, only string, noCache bool) error {
	var todo []sessionImage
	for _, im := range sessionImages(set) {
		if only == "" || only == im.role {
			todo = append(todo, im)
		}
	}
	// An agent's image only when named: its recipe downloads the agent.
	for _, a := range agentPresets {
		if a.recipe != "" && only == a.name {
			todo = append(todo, a.image(set.image))
		}
	}
	if len(todo) == 0 {
		return refusef("--only %s: name the sandbox or the router image, or an agent's (codex, gemini), as in --only router", only)
	}
	for _, im := range todo {
		// The name may be a derived image of the user's (a recipe's, say):
		// building agent-sandbox's own image under it would replace that.
		if !im.ours() {
			return refusef("%s names %s, not agent-sandbox's own image: build makes %s; unset %s to build that and have sessions use it",
				im.env, im.name, im.dflt, im.env)
		}
		if err := checkContext(im); err != nil {
			return refused(err)
		}
	}
	return withCommandService(ctx, set, out, func(opCtx context.Context, eng engine, _, name string) error {
		for _, im := range todo {
			if err := buildImage(opCtx, eng, set, im, name, noCache, out); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkContext fails when this binary cannot build the image.
func checkContext(im sessionImage) error {
	var lacking []string
	for _, f := range append([]string{"Containerfile"}, im.needs...) {
		if _, err := fs.Stat(imageContexts, path.Join(im.dir, f)); err != nil {
			lacking = append(lacking, f)
		}
	}
	if len(lacking) > 0 {
		return fmt.Errorf("this agent-sandbox cannot build the %s image: it was built without %s; rebuild agent-sandbox with `make build`, which makes them first, or set %s to an image you have",
			im.role, strings.Join(lacking, " and "), im.env)
	}
	return nil
}

// writeContext copies an image's embedded build context into a new dir
// under parent; the caller removes it. Only the top level is a context:
// router-image/routerd is the helper's source, built into routerd.bin.
func writeContext(parent, prefix string, im sessionImage) (string, error) {
	entries, err := fs.ReadDir(imageContexts, im.dir)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(parent, prefix+".")
	if err != nil {
		return "", fmt.Errorf("cannot write the %s image's build context: %w", im.role, err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := fs.ReadFile(imageContexts, path.Join(im.dir, e.Name()))
		if err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
		// Fixed modes: a COPY step's cache key covers them. Helpers and
		// scripts (a recipe's wrapper) run.
		mode := os.FileMode(0o644)
		if strings.HasSuffix(e.Name(), ".bin") || bytes.HasPrefix(b, []byte("#!")) {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, mode); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("cannot write the %s image's build context: %w", im.role, err)
		}
		// WriteFile's mode is cut by the umask.
		if err := os.Chmod(filepath.Join(dir, e.Name()), mode); err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// buildSpec is what a build of im is given.
func buildSpec(im sessionImage, baseImage, contextDir string, noCache bool) podman.ImageBuild {
	b := podman.ImageBuild{
		Tag:        im.name,
		ContextDir: contextDir,
		Args:       map[string]string{"BASE": baseImage},
		NoCache:    noCache,
	}
	if im.hostCA {
		if fi, err := os.Stat(hostCABundle); err == nil && fi.Mode().IsRegular() {
			b.Secrets = []string{"id=hostca,src=" + hostCABundle}
		}
	}
	return b
}

// contextParent is where build contexts are written: the runtime dir is
// private to the user and cleaned by gc.
func contextParent(set settings) string {
	if set.runtimeDir != "" {
		return set.runtimeDir
	}
	return os.TempDir()
}

func buildImage(ctx context.Context, eng engine, set settings, im sessionImage, prefix string, noCache bool, out io.Writer) error {
	if err := checkContext(im); err != nil {
		return refused(err)
	}
	dir, err := writeContext(contextParent(set), prefix, im)
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p := newProgress(out, iostreams.IsTerminal(out), "building "+im.role+" image", parseBuildLine)
	base := set.baseImage
	if im.base != "" {
		base = im.base
	}
	err = eng.ImageBuild(ctx, buildSpec(im, base, dir, noCache), p)
	p.finish(err, "built "+im.name)
	if err != nil {
		// podman's message may end in a newline.
		return fmt.Errorf("cannot build image %s: %s; run `agent-sandbox build --only %s` to try again", im.name, strings.TrimSpace(err.Error()), im.role)
	}
	return nil
}

func pullImage(ctx context.Context, eng engine, im sessionImage, out io.Writer) error {
	p := newProgress(out, iostreams.IsTerminal(out), "pulling "+im.role+" image", newPullParser())
	err := eng.ImagePull(ctx, im.name, p)
	p.finish(err, "pulled "+im.name)
	if err != nil {
		return fmt.Errorf("cannot pull image %s: %s; check your network and `podman pull %s`", im.name, strings.TrimSpace(err.Error()), im.name)
	}
	return nil
}

// stepLine is how podman (buildah) announces each Containerfile step.
var stepLine = regexp.MustCompile(`^STEP (\d+)(?:/(\d+))?: (.*)$`)

// parseBuildLine turns "STEP 2/5: RUN apt-get ..." into "step 2/5 RUN apt-get ...".
func parseBuildLine(line string) (string, bool) {
	m := stepLine.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	n := m[1]
	if m[2] != "" {
		n += "/" + m[2]
	}
	return "step " + n + " " + strings.Join(strings.Fields(m[3]), " "), true
}

// newPullParser reports each blob a pull copies, counting them: the API
// gives no byte counts.
func newPullParser() func(string) (string, bool) {
	blobs := 0
	return func(line string) (string, bool) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "Copying" && f[1] == "blob":
			blobs++
			return fmt.Sprintf("copying blob %d (%s)", blobs, shortDigest(f[2])), true
		case len(f) >= 2 && f[0] == "Copying" && f[1] == "config":
			return "copying config", true
		case len(f) >= 2 && f[0] == "Writing" && f[1] == "manifest":
			return "writing manifest", true
		}
		return "", false
	}
}

func shortDigest(d string) string {
	if alg, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return alg + ":" + hex[:12]
	}
	return d
}

// progress shows a build's or a pull's progress on a writer: one line
// rewritten in place on a terminal, else one plain line per step. It keeps
// the last lines of output for a failure message.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	what    string
	parse   func(string) (string, bool)
	partial []byte
	tail    []string
	status  string
	since   time.Time // when status was set
	start   time.Time
	now     func() time.Time
	width   int
	stop    chan struct{}
	done    sync.WaitGroup
}

func newProgress(w io.Writer, tty bool, what string, parse func(string) (string, bool)) *progress {
	p := &progress{w: w, tty: tty, what: what, parse: parse, now: time.Now, width: 80, stop: make(chan struct{})}
	p.start = p.now()
	p.since = p.start
	if width, ok := iostreams.Width(w); ok && tty && width > 20 {
		p.width = width
	}
	if tty {
		p.show()
		// A long step (npm install) must still look alive.
		p.done.Add(1)
		go p.tick()
	} else {
		iostreams.Say(p.w, "%s", p.what)
	}
	return p
}

func (p *progress) tick() {
	defer p.done.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.show()
			p.mu.Unlock()
		}
	}
}

// Write takes podman's output, which may split lines anywhere.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.line(strings.TrimRight(string(p.partial[:i]), "\r"))
		p.partial = p.partial[i+1:]
	}
	return len(b), nil
}

func (p *progress) line(l string) {
	if strings.TrimSpace(l) == "" {
		return
	}
	p.tail = append(p.tail, l)
	if len(p.tail) > failureTail {
		p.tail = p.tail[len(p.tail)-failureTail:]
	}
	status, ok := p.parse(l)
	if !ok {
		return
	}
	p.status, p.since = status, p.now()
	if p.tty {
		p.show()
		return
	}
	iostreams.Say(p.w, "%s: %s", p.what, clip(status, 100))
}

// show rewrites the terminal line; the caller holds mu.
func (p *progress) show() {
	text := iostreams.Prefix + p.what
	if p.status != "" {
		text += ": " + p.status
	}
	if secs := int(p.now().Sub(p.since).Seconds()); secs > 0 {
		// Shortened first, so that the time always shows.
		suffix := fmt.Sprintf(" (%ds)", secs)
		text = clip(text, p.width-1-len(suffix)) + suffix
	}
	fmt.Fprintf(p.w, "\r\033[K%s", clip(text, p.width-1))
}

// finish ends the progress display with a summary line, or with the last
// lines of output when err is set.
func (p *progress) finish(err error, doneMsg string) {
	close(p.stop)
	p.done.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.partial) > 0 {
		p.line(string(p.partial))
		p.partial = nil
	}
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	elapsed := p.now().Sub(p.start).Round(100 * time.Millisecond)
	if err == nil {
		iostreams.Say(p.w, "%s in %s", doneMsg, elapsed)
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	at := ""
	if p.status != "" {
		at = " at " + clip(p.status, 60)
	}
	iostreams.Say(p.w, "%s failed%s after %s; its last output:", p.what, at, elapsed)
	for _, l := range p.tail {
		fmt.Fprintf(p.w, "    %s\n", l)
	}
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	switch {
	case len(r) <= n:
		return s
	case n < 4:
		return string(r[:max(n, 0)])
	}
	return string(r[:n-3]) + "..."
}
