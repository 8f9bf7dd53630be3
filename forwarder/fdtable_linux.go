package main

import "syscall"

// reserveFDs grows the process's descriptor table, once, before the
// listeners of a long list open. The kernel grows the table by doubling
// as descriptors are taken, from 64, and in a process with more than one
// thread (every Go program) each growth waits for an RCU grace period: 5
// to 15 ms each on these machines, so that a list with 200 host:port
// entries (401 listeners, three growths) made the forwarder ready 35 to 60
// ms after its start, against 15 to 20 ms with one growth (bench/HISTORY.md,
// 2026-12-04). Taking a high descriptor and giving it back pays a single
// grace period; the table never shrinks. A short list fits the first 64
// and pays none, as before. Past RLIMIT_NOFILE nothing is reserved, and
// the listeners fail as they would have.
func reserveFDs(listeners int) {
	// The standard streams, the runtime's epoll and pipe, the forwards
	// file: a few more than the listeners themselves.
	if listeners+16 <= 64 {
		return
	}
	// Room for as many relays again before the next growth.
	n := 2*listeners + 64
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil || uint64(n) > lim.Cur {
		return
	}
	if err := syscall.Dup3(2, n-1, syscall.O_CLOEXEC); err == nil {
		_ = syscall.Close(n - 1)
	}
}
