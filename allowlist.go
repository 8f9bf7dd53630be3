package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
)

// The user's allowlist: where it lives, and its first copy from the
// defaults. What a line may say is internal/allowlist's.

// loadAllowlist reads the allowlist, seeding a missing one from the
// packaged default.
func loadAllowlist(path string, out io.Writer) ([]allowlist.Entry, error) {
	entries, _, err := readAllowlist(path, out)
	return entries, err
}

// allowlistRead is what a session's watcher needs of the read its start
// made: the sum of what was read. Its first look then reads the file and
// hashes it, but parses a long list again, as the agent starts, only when
// it changed. Not the file's stamp: an edit in place within the same
// mtime tick, after the read, would keep it and go unseen.
type allowlistRead struct {
	sum [32]byte
}

// readAllowlist is loadAllowlist with the sum of what it read.
func readAllowlist(path string, out io.Writer) ([]allowlist.Entry, allowlistRead, error) {
	if err := ensureAllowlist(path, out); err != nil {
		return nil, allowlistRead{}, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, allowlistRead{}, fmt.Errorf("cannot read allowlist: %w", err)
	}
	entries, err := allowlist.Parse(bytes.NewReader(b), path)
	if err != nil {
		return nil, allowlistRead{}, err
	}
	return entries, allowlistRead{sum: sha256.Sum256(b)}, nil
}

// ensureAllowlist seeds a missing allowlist from the packaged default.
func ensureAllowlist(path string, out io.Writer) error {
	fi, err := os.Stat(path)
	if err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("allowlist %s is not a regular file; replace it with one", path)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot read allowlist: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("cannot create the allowlist: %w", err)
	}
	// O_EXCL: never overwrite a list another session created meanwhile.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot create the allowlist: %w", err)
	}
	if _, err := f.Write(packagedAllowlist()); err != nil {
		f.Close()
		return fmt.Errorf("cannot write the allowlist: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cannot write the allowlist: %w", err)
	}
	iostreams.Say(out, "created %s from the defaults; edit it to allow more hosts", path)
	return nil
}

// packagedAllowlist is the default list a package installed beside the
// binary, else the one built in.
func packagedAllowlist() []byte {
	if exe, err := os.Executable(); err == nil {
		for _, p := range []string{filepath.Join(filepath.Dir(exe), "allowed-hosts"), "/usr/share/agent-sandbox/allowed-hosts"} {
			if b, err := os.ReadFile(p); err == nil {
				return b
			}
		}
	}
	return defaultAllowlist
}
