package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// countSwitches reports the context switches of the whole test process
// (client, relay and echo alike) per operation, from the call to the
// call of the function it returns: on the machines the forwarder runs
// on, a relay costs what it is woken, more than what it copies.
func countSwitches(b *testing.B) func() {
	before := switches()
	return func() {
		if n := b.N; n > 0 {
			b.ReportMetric(float64(switches()-before)/float64(n), "ctxsw/op")
		}
	}
}

func switches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}

// BenchmarkForwarderProcess is BenchmarkRelayNewConnection's and
// BenchmarkRelayBulk's TLS pair with the forwarder in a process of its
// own, as it runs (one P): it reports that process's context switches
// and CPU time per connection, which the benchmarks above mix with the
// client's and the echo's in theirs.
func BenchmarkForwarderProcess(b *testing.B) {
	for _, size := range []int{0, 64 << 10, 4 << 20} {
		name := "hello"
		if size > 0 {
			name = fmt.Sprintf("hello+%dKiB", size>>10)
		}
		b.Run(name, func(b *testing.B) {
			up := benchEcho(b)
			listen := freeListenAddr(b)
			cmd := mainCmd(listen + "=" + up.Addr().String() + "/tls")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			lines := bufio.NewScanner(stderr)
			for lines.Scan() && lines.Text() != readyLine {
			}
			go func() {
				for lines.Scan() {
				}
			}()
			addr, err := net.ResolveTCPAddr("tcp", listen)
			if err != nil {
				b.Fatal(err)
			}
			hello := browserHello()
			data := appData(size)
			got := make([]byte, len(hello)+len(data))
			b.SetBytes(int64(len(got)))
			pid := cmd.Process.Pid
			sw, cpu := taskUsage(pid)
			for b.Loop() {
				c, err := net.DialTCP("tcp", nil, addr)
				if err != nil {
					b.Fatal(err)
				}
				werr := make(chan error, 1)
				go func() {
					_, err := c.Write(hello)
					if err == nil && len(data) > 0 {
						_, err = c.Write(data)
					}
					werr <- err
				}()
				if _, err := io.ReadFull(c, got); err != nil {
					b.Fatal(err)
				}
				if err := <-werr; err != nil {
					b.Fatal(err)
				}
				_ = c.SetLinger(0)
				_ = c.Close()
			}
			sw1, cpu1 := taskUsage(pid)
			b.ReportMetric(float64(sw1-sw)/float64(b.N), "fwd-ctxsw/op")
			b.ReportMetric(float64(cpu1-cpu)/1e3/float64(b.N), "fwd-cpu-µs/op")
		})
	}
}

// freeListenAddr is a loopback address whose port was just free.
func freeListenAddr(b *testing.B) string {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// taskUsage sums the context switches and the CPU time (ns) of every
// thread of process pid.
func taskUsage(pid int) (switches, cpu int64) {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, t.Name())
		if st, err := os.ReadFile(dir + "status"); err == nil {
			for _, l := range strings.Split(string(st), "\n") {
				k, v, _ := strings.Cut(l, ":")
				if k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches" {
					n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					switches += n
				}
			}
		}
		if ss, err := os.ReadFile(dir + "schedstat"); err == nil {
			if f := strings.Fields(string(ss)); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				cpu += n
			}
		}
	}
	return switches, cpu
}
