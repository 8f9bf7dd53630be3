package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// Stored credentials: one file a secret, $XDG_CONFIG_HOME/agent-sandbox/secrets/NAME,
// 0600 in a 0700 dir. The config dir is never mounted into a sandbox (it
// is refused as a launch dir), and a session reads a secret only to write
// it into the router's include file.

// maxSecretInput bounds what `secret set` reads from a pipe.
const maxSecretInput = 64 << 10

// readSecret returns the stored secret name, or "" if none is stored. A
// file that others may read or write, or that is not the user's own
// regular file, is refused with the command that fixes it.
func readSecret(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("cannot read the secret %s: %w", name, err)
	}
	if err := checkSecretFile(path, fi); err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot read the secret %s: %w", name, err)
	}
	v := strings.TrimSpace(string(b))
	if err := checkCredentialValue("the secret in "+path, v); err != nil {
		return "", fmt.Errorf("%v; store it again: agent-sandbox secret set %s", err, name)
	}
	return v, nil
}

// checkSecretFile refuses a secret file that is not private to the user,
// in one line that ends with its fix.
func checkSecretFile(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file; remove it: agent-sandbox secret rm %s", path, filepath.Base(path))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%s belongs to uid %d, not to you; remove it: agent-sandbox secret rm %s", path, st.Uid, filepath.Base(path))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s is open to other users (mode %04o); fix: chmod 600 %s", path, perm, path)
	}
	return nil
}

// writeSecret stores value as dir/name, 0600, replacing any earlier one
// atomically; the temp file it is written to is 0600 from the start.
func writeSecret(dir, name, value string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %w", dir, err)
	}
	if _, err := replaceFile(filepath.Join(dir, name), []byte(value+"\n"), 0o600, true); err != nil {
		return fmt.Errorf("cannot store the secret: %w", err)
	}
	return nil
}

// secretInput reads a secret: on a terminal without echo after a prompt on
// stderr, otherwise everything on stdin (a pipe or a file).
func secretInput(in io.Reader, prompt io.Writer, kind *credKind) (string, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(prompt, iostreams.Prefix+"paste the %s for %s (%s; it is not shown), then Enter: ", kindNoun(kind), kind.provider.host, kind.env)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return "", fmt.Errorf("cannot read from the terminal: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	b, err := io.ReadAll(io.LimitReader(in, maxSecretInput+1))
	if err != nil {
		return "", fmt.Errorf("cannot read stdin: %w", err)
	}
	if len(b) > maxSecretInput {
		return "", errors.New("stdin holds more than 64 KiB: that is not an API key")
	}
	return strings.TrimSpace(string(b)), nil
}

func kindNoun(k *credKind) string {
	if strings.HasSuffix(k.secret, "-oauth") {
		return "OAuth token"
	}
	if k.provider.forge {
		return "token"
	}
	return "API key"
}

func secretNameError(name string) error {
	return fmt.Errorf("%q is not a secret agent-sandbox knows; use one of: %s", name, strings.Join(secretNames(), ", "))
}

func newSecretCommand(set settings) *cobra.Command {
	var names strings.Builder
	for _, k := range credKinds {
		fmt.Fprintf(&names, "  %-16s %-24s %s\n", k.secret, k.env, k.provider.host)
	}
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Store the API keys the router adds for the agent",
		Long: `The router adds your API key or token to the agent's requests to its API, so
the key never enters the sandbox: the agent holds a placeholder. secret keeps
one a file, 0600, in ` + "`" + `$XDG_CONFIG_HOME/agent-sandbox/secrets/` + "`" + `, for when it is not in the
launcher's environment (the environment wins when both have one).

  NAME             FROM THE ENVIRONMENT     HOST
` + names.String() + `
A stored file that other users may read is refused, with the chmod that fixes it.`,
		Example: `  agent-sandbox secret set anthropic          # paste the key; it is not shown
  printenv OPENAI_API_KEY | agent-sandbox secret set openai
  claude setup-token   # then: agent-sandbox secret set anthropic-oauth
  agent-sandbox secret list
  agent-sandbox secret rm gemini`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(reportFlagErrors(&cobra.Command{
		Use:   "set NAME",
		Short: "Store a secret, read from stdin (not echoed on a terminal)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return secretSet(set, args, cmd.InOrStdin(), cmd.ErrOrStderr())
		},
	}), reportFlagErrors(&cobra.Command{
		Use:   "list",
		Short: "List the stored secrets, by name only",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return secretList(set, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}), reportFlagErrors(&cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"remove"},
		Short:   "Remove a stored secret",
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return secretRemove(set, args, cmd.ErrOrStderr())
		},
	}))
	return reportFlagErrors(cmd)
}

// secretSet stores a secret; prompt is where the prompt and the outcome go.
func secretSet(set settings, args []string, in io.Reader, prompt io.Writer) error {
	if len(args) != 1 {
		return refusef("secret set takes one name, as in: agent-sandbox secret set anthropic (one of %s)", strings.Join(secretNames(), ", "))
	}
	kind := credKindBySecret(args[0])
	if kind == nil {
		return refused(secretNameError(args[0]))
	}
	v, err := secretInput(in, prompt, kind)
	if err == nil {
		err = checkCredentialValue("the "+kindNoun(kind), v)
	}
	if err != nil {
		return refusef("%v; nothing was stored", err)
	}
	dir := set.secretsDir()
	if err := writeSecret(dir, kind.secret, v); err != nil {
		return refused(err)
	}
	iostreams.Say(prompt, "stored %s in %s; sessions add it for %s", kind.secret, filepath.Join(dir, kind.secret), kind.provider.host)
	if _, ok := set.lookup(kind.env); ok {
		iostreams.Say(prompt, "%s is set in your environment, which sessions use first", kind.env)
	}
	return nil
}

// secretList prints the names of the stored secrets on stdout, one a
// line; a file that sessions would refuse gets its fix on errOut.
func secretList(set settings, args []string, out, errOut io.Writer) error {
	if len(args) > 0 {
		return refusef("secret list takes no arguments")
	}
	dir := set.secretsDir()
	des, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return refusef("cannot read %s: %v", dir, err)
	}
	var result error
	for _, de := range des {
		name := de.Name()
		if !slices.Contains(secretNames(), name) {
			continue
		}
		fmt.Fprintln(out, name)
		fi, err := os.Stat(filepath.Join(dir, name))
		if err == nil {
			err = checkSecretFile(filepath.Join(dir, name), fi)
		}
		if err != nil {
			iostreams.Say(errOut, "%v", err)
			result = reported(exitRefused)
		}
	}
	return result
}

func secretRemove(set settings, args []string, errOut io.Writer) error {
	if len(args) != 1 {
		return refusef("secret rm takes one name, as in: agent-sandbox secret rm anthropic")
	}
	if credKindBySecret(args[0]) == nil {
		return refused(secretNameError(args[0]))
	}
	path := filepath.Join(set.secretsDir(), args[0])
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return refusef("no secret %s is stored (%s does not exist)", args[0], path)
		}
		return refusef("cannot remove %s: %v", path, err)
	}
	iostreams.Say(errOut, "removed %s", args[0])
	return nil
}
