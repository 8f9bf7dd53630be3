package inspect

import (
	"errors"
	"os"
	"path/filepath"
)

// writeCAFiles writes the session CA for the launcher: CAFile alone, and
// BundleFile, the trusted bundle followed by the CA, which the agent gets
// in place of its system bundle. The CA's key is never written.
func writeCAFiles(dir string, caPEM, trusted []byte) error {
	if err := writeFile(filepath.Join(dir, CAFile), caPEM); err != nil {
		return err
	}
	bundle := make([]byte, 0, len(trusted)+1+len(caPEM))
	bundle = append(bundle, trusted...)
	if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
		bundle = append(bundle, '\n')
	}
	return writeInPlace(filepath.Join(dir, BundleFile), append(bundle, caPEM...))
}

// writeInPlace writes into path's own inode when it exists: the launcher
// makes the bundle empty before the agent's container starts, beside
// this, and the container's bind mount holds the inode it found then; a
// rename would leave the agent an empty bundle, or fail its mount. The
// agent's command runs only once routerd is ready (the launcher's gate),
// after this write. Where no file is there yet, it is written whole.
func writeInPlace(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return writeFile(path, data)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeFile replaces path at once (a reader never sees half a file),
// readable by every uid: the agent reads it through a bind mount.
func writeFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
