// Package projectdir is the launch directory as the host sees it: the one
// tree the agent shares with the user, which outlives the session and which
// git, agents and editors on the host read and run. It finds what must not
// be mounted (sockets, pipes, links where a protection needs a real file),
// what must be mounted read-only (git config, hooks and the files through
// which git takes them, agent settings), and, at the end of a session, what
// the agent left that the host would run, reported so that following the
// report runs nothing of the agent's.
//
// Nothing here follows a symbolic link: every path is opened beneath the
// launch dir with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so a link planted
// anywhere in the tree (to $HOME, to /, or back up the tree) is seen as a
// link and never as what it points to.
package projectdir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is an open launch directory; paths below it are relative to it.
type Root struct {
	Path string
	fd   int
}

// OpenRoot opens dir, which the caller has resolved: links above the
// launch dir are the user's and are followed once, here.
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &Root{Path: dir, fd: fd}, nil
}

// Close releases the root's descriptor.
func (r *Root) Close() error { return unix.Close(r.fd) }

// ErrLink means a component of a path below the root is a symbolic link.
var ErrLink = errors.New("a component is a symbolic link")

// openat2Missing is set once the kernel said it has no openat2 (before
// 5.6); the component walk then does the same job.
var openat2Missing bool

// open opens rel beneath the root without following any link in it.
func (r *Root) open(rel string, flags int) (*os.File, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	var fd int
	if mutated("links-followed") {
		// The mutation check's way back to before issue 19: every link
		// followed.
		fd, err = unix.Openat(r.fd, rel, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: filepath.Join(r.Path, rel), Err: err}
		}
		return os.NewFile(uintptr(fd), filepath.Join(r.Path, rel)), nil
	}
	if !openat2Missing {
		fd, err = unix.Openat2(r.fd, rel, &unix.OpenHow{
			Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if errors.Is(err, unix.ENOSYS) {
			openat2Missing = true
		}
	}
	if openat2Missing {
		fd, err = r.walk(rel, flags)
	}
	if errors.Is(err, unix.ENOTDIR) && r.linkIn(rel) {
		// O_DIRECTORY on a link says ENOTDIR: it is the link that matters.
		err = unix.ELOOP
	}
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return nil, &os.PathError{Op: "open", Path: filepath.Join(r.Path, rel), Err: ErrLink}
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: filepath.Join(r.Path, rel), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(r.Path, rel)), nil
}

// walk opens rel one component at a time, each with O_NOFOLLOW.
func (r *Root) walk(rel string, flags int) (int, error) {
	dir, err := unix.Dup(r.fd)
	if err != nil {
		return -1, err
	}
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		f := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(parts)-1 {
			f = flags | unix.O_NOFOLLOW | unix.O_CLOEXEC
		}
		next, err := unix.Openat(dir, p, f, 0)
		unix.Close(dir)
		if err != nil {
			return -1, err
		}
		dir = next
	}
	return dir, nil
}

// linkIn reports whether a component of rel is a symbolic link.
func (r *Root) linkIn(rel string) bool {
	parts := strings.Split(rel, "/")
	for i := range parts {
		var st unix.Stat_t
		if unix.Fstatat(r.fd, strings.Join(parts[:i+1], "/"), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return false
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return true
		}
	}
	return false
}

// firstLink is the first component of rel that is a symbolic link, or "".
func (r *Root) firstLink(rel string) string {
	rel, err := clean(rel)
	if err != nil || rel == "." {
		return ""
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		info, err := r.Lstat(p)
		if err != nil {
			return ""
		}
		if info.IsLink() {
			return p
		}
	}
	return ""
}

// clean refuses what is not a plain relative path below the root.
func clean(rel string) (string, error) {
	if rel == "" || rel == "." {
		return ".", nil
	}
	c := filepath.Clean(rel)
	if filepath.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%s is not below the launch directory", rel)
	}
	return c, nil
}

// FileID is what identifies a file: the mount that the runtime makes of a
// path must be of the file the scan saw there.
type FileID struct {
	Dev, Ino uint64
	Mode     uint32 // the type bits
}

// Info is what lstat says of a path below the root.
type Info struct {
	ID    FileID
	Perm  os.FileMode
	Size  int64
	Links uint64 // hard links
}

// IsDir, IsRegular and IsLink tell the file's type.
func (i Info) IsDir() bool     { return i.ID.Mode == unix.S_IFDIR }
func (i Info) IsRegular() bool { return i.ID.Mode == unix.S_IFREG }
func (i Info) IsLink() bool    { return i.ID.Mode == unix.S_IFLNK }

// Lstat describes rel itself (a link as a link); every component above it
// must be a real directory.
func (r *Root) Lstat(rel string) (Info, error) {
	d, base, done, err := r.parent(rel)
	if err != nil {
		return Info{}, err
	}
	defer done()
	var st unix.Stat_t
	if err := unix.Fstatat(d, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Info{}, &os.PathError{Op: "lstat", Path: filepath.Join(r.Path, rel), Err: err}
	}
	return infoOf(&st), nil
}

func infoOf(st *unix.Stat_t) Info {
	return Info{ID: FileID{Dev: uint64(st.Dev), Ino: st.Ino, Mode: st.Mode & unix.S_IFMT}, Perm: os.FileMode(st.Mode & 0o7777), Size: st.Size, Links: uint64(st.Nlink)}
}

// Stat is Lstat of an opened path: the file the descriptor holds.
func statFile(f *os.File) (Info, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return Info{}, err
	}
	return infoOf(&st), nil
}

// ReadDir lists rel, which must be a real directory reached through real
// directories. The entries' types come from the directory itself: nothing
// is followed.
func (r *Root) ReadDir(rel string) ([]os.DirEntry, error) {
	f, err := r.open(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// scanNames lists rel by name and type as getdents gives them, without a
// stat or an allocation per entry: the name is valid during the call
// only. each returning false stops the listing.
func (r *Root) scanNames(rel string, each func(name []byte, typ fs.FileMode) bool) error {
	f, err := r.open(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer f.Close()
	fd := int(f.Fd())
	buf := make([]byte, 256<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return &os.PathError{Op: "getdents", Path: f.Name(), Err: err}
		}
		if n <= 0 {
			return nil
		}
		for off := 0; off < n; {
			// struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
			reclen := int(uint16(buf[off+16]) | uint16(buf[off+17])<<8)
			typ := buf[off+18]
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			off += reclen
			if string(name) == "." || string(name) == ".." {
				continue
			}
			mode, ok := direntMode(typ)
			if !ok {
				// DT_UNKNOWN (some file systems): ask.
				var st unix.Stat_t
				if unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
					continue
				}
				mode = infoOf(&st).mode()
			}
			if !each(name, mode) {
				return nil
			}
		}
	}
}

func direntMode(t byte) (fs.FileMode, bool) {
	switch t {
	case unix.DT_REG:
		return 0, true
	case unix.DT_DIR:
		return fs.ModeDir, true
	case unix.DT_LNK:
		return fs.ModeSymlink, true
	case unix.DT_SOCK:
		return fs.ModeSocket, true
	case unix.DT_FIFO:
		return fs.ModeNamedPipe, true
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice, true
	case unix.DT_BLK:
		return fs.ModeDevice, true
	}
	return 0, false
}

// mode is the type bits as an fs.FileMode.
func (i Info) mode() fs.FileMode {
	switch i.ID.Mode {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return 0
}

// ReadFile reads at most limit bytes of the regular file rel.
func (r *Root) ReadFile(rel string, limit int64) ([]byte, error) {
	f, err := r.open(rel, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := statFile(f)
	if err != nil {
		return nil, err
	}
	if !info.IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", filepath.Join(r.Path, rel))
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// parent opens the directory that holds rel, through real directories,
// and returns its descriptor, rel's last component and how to close it.
func (r *Root) parent(rel string) (int, string, func(), error) {
	rel, err := clean(rel)
	if err != nil {
		return -1, "", nil, err
	}
	dir, base := filepath.Split(rel)
	if dir == "" {
		return r.fd, base, func() {}, nil
	}
	f, err := r.open(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", nil, err
	}
	return int(f.Fd()), base, func() { f.Close() }, nil
}

// Readlink reads the link rel (a link in the last component only).
func (r *Root) Readlink(rel string) (string, error) {
	d, base, done, err := r.parent(rel)
	if err != nil {
		return "", err
	}
	defer done()
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(d, base, buf)
	if err != nil {
		return "", &os.PathError{Op: "readlink", Path: filepath.Join(r.Path, rel), Err: err}
	}
	return string(buf[:n]), nil
}

// Rename moves rel to a new name in the same directory, never replacing
// what is there.
func (r *Root) Rename(rel, newBase string) error {
	d, base, done, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer done()
	if err := unix.Renameat2(d, base, d, newBase, unix.RENAME_NOREPLACE); err != nil {
		return &os.PathError{Op: "rename", Path: filepath.Join(r.Path, rel), Err: err}
	}
	return nil
}

// Remove unlinks the file rel (not a directory).
func (r *Root) Remove(rel string) error {
	d, base, done, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer done()
	return unix.Unlinkat(d, base, 0)
}

// makeWritable gives the owner write and search rights on the directory
// rel (whatever read rights it has: the agent may have taken them), and
// returns how to put its mode back.
func (r *Root) makeWritable(rel string) func() {
	info, err := r.Lstat(rel)
	if err != nil || !info.IsDir() {
		return func() {}
	}
	d, base, done, err := r.parent(rel)
	if err != nil {
		return func() {}
	}
	if unix.Fchmodat(d, base, uint32(info.Perm)|0o300, 0) != nil {
		done()
		return func() {}
	}
	return func() {
		_ = unix.Fchmodat(d, base, uint32(info.Perm), 0)
		done()
	}
}

// Check reports whether rel is, through real directories, the file the
// scan saw: what a bind mount of it will mount.
func (r *Root) Check(rel string, want FileID) error {
	f, err := r.open(rel, unix.O_PATH)
	if err != nil {
		return err
	}
	defer f.Close()
	got, err := statFile(f)
	if err != nil {
		return err
	}
	if got.ID != want {
		return fmt.Errorf("%s changed after the launch directory was scanned", filepath.Join(r.Path, rel))
	}
	return nil
}
