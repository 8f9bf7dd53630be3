package inspect

import (
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
	return writeFile(filepath.Join(dir, BundleFile), append(bundle, caPEM...))
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
