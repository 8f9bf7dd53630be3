package routerlog

import (
	"regexp"
	"strings"
)

// failureLine matches a log line that says something went wrong, in the
// words of routerd, nginx, dnsmasq and the forwarder.
var failureLine = regexp.MustCompile(`(?i)\[(emerg|alert|crit|error)\]|\b(error|fatal|failed|failure|cannot|can't|bad|unknown|invalid|illegal|denied|refused|exited|not ready|no such)\b`)

// Excerpt picks what a user needs from a helper that failed: the lines
// that say what failed, then the last lines for context, at most n of each,
// in the order they were written. A plain tail is not enough: when dnsmasq
// fails, routerd stops nginx, and nginx's shutdown notices would push
// dnsmasq's own error out of the last ten lines.
func Excerpt(log string, n int) string {
	all := strings.Split(strings.TrimRight(log, "\n"), "\n")
	keep := make([]bool, len(all))
	found := 0
	for i := len(all) - 1; i >= 0 && found < n; i-- {
		if failureLine.MatchString(all[i]) {
			keep[i] = true
			found++
		}
	}
	for i := max(0, len(all)-n); i < len(all); i++ {
		keep[i] = true
	}
	var out []string
	skipped := false
	for i, l := range all {
		if !keep[i] {
			skipped = true
			continue
		}
		if skipped && len(out) > 0 {
			out = append(out, "...")
		}
		skipped = false
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
