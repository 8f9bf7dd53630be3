package inspect

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The agent's container mounts the bundle while routerd starts: its bind
// mount holds the empty file the launcher made, so the bundle must land in
// that inode, not beside it.
func TestTheBundleLandsInTheFileTheLauncherMade(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, BundleFile)
	if err := os.WriteFile(bundle, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(bundle) // what a bind mount holds
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := writeCAFiles(dir, []byte("CA\n"), []byte("TRUSTED")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64)
	n, _ := held.ReadAt(got, 0)
	if want := []byte("TRUSTED\nCA\n"); !bytes.Equal(got[:n], want) {
		t.Errorf("the file held open reads %q, want %q", got[:n], want)
	}
	var before, after syscall.Stat_t
	if err := syscall.Fstat(int(held.Fd()), &before); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(bundle, &after); err != nil {
		t.Fatal(err)
	}
	if before.Ino != after.Ino {
		t.Error("the bundle was replaced by another file: the agent's mount would keep the empty one")
	}
	if fi, _ := os.Stat(bundle); fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode %v, want 0644", fi.Mode().Perm())
	}
	// Where no file is there (a cluster's emptyDir), it is written whole.
	fresh := t.TempDir()
	if err := writeCAFiles(fresh, []byte("CA\n"), nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(fresh, BundleFile)); string(b) != "CA\n" {
		t.Errorf("fresh bundle %q", b)
	}
}
