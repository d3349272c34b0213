// A Go net/http streaming client (stdlib only, HTTP/1.1): the Go crypto/tls
// tests (tests/integration/go_tls_test.cpp) and scripts/bench.sh build it
// with the system Go.
//
//	go-sse-client URL CA_PEM MAX_TOKENS REQUESTS DELAY_MS
//
// POSTs REQUESTS streaming requests (one connection each) and prints one
// line per SSE event read: {"port": local port, "event_index": i,
// "mono_ns": CLOCK_MONOTONIC, "off_cpu_ns": N}. The clock is read as the
// tls.Conn Read that delivered the event's last byte returns (an event ends
// in "\n\n", which nothing else in the response has), not after HTTP
// parsing, whose time (and a preemption meanwhile) would count as error.
// off_cpu_ns is how long the thread was off its CPU from the socket read
// under that Read to the clock (the clock is late by up to it; -1 when not
// known). It waits DELAY_MS first: the agent attaches to a new executable
// when it sees its exec, a few ms later, and a call made before that is not
// seen.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func clock(id uintptr) int64 {
	var ts syscall.Timespec
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func mono() int64      { return clock(1) } // CLOCK_MONOTONIC
func threadCPU() int64 { return clock(3) } // CLOCK_THREAD_CPUTIME_ID

// rawConn remembers where its last Read returned: wall clock, thread CPU
// time and thread.
type rawConn struct {
	net.Conn
	wall, cpu int64
	tid       int
}

func (c *rawConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.wall, c.cpu, c.tid = mono(), threadCPU(), syscall.Gettid()
	return n, err
}

// An event end's clock, and how long the reading thread was off its CPU
// between the socket read that gave its bytes and that clock (-1: not known,
// the goroutine changed threads).
type eventEnd struct{ mono, offCPU int64 }

// timedConn clocks each Read's return and queues that time once per event
// end ("\n\n") the Read delivered.
type timedConn struct {
	net.Conn
	raw  *rawConn
	last byte
	ends chan eventEnd
}

func (c *timedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	t := mono()
	off := int64(-1)
	if syscall.Gettid() == c.raw.tid {
		if off = (t - c.raw.wall) - (threadCPU() - c.raw.cpu); off < 0 {
			off = 0 // the CPU time read last counts a little more
		}
	}
	for _, ch := range b[:n] {
		if ch == '\n' && c.last == '\n' {
			select {
			case c.ends <- eventEnd{t, off}:
			default: // more events than the queue holds: those are clocked when parsed
			}
		}
		c.last = ch
	}
	return n, err
}

func main() {
	runtime.LockOSThread() // the body is read here: its thread's CPU time is this goroutine's
	url, ca, tokens := os.Args[1], os.Args[2], os.Args[3]
	requests, _ := strconv.Atoi(os.Args[4])
	delay, _ := strconv.Atoi(os.Args[5])
	time.Sleep(time.Duration(delay) * time.Millisecond)
	pem, _ := os.ReadFile(ca)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	var conn *timedConn // one request at a time, a connection each
	tr := &http.Transport{DisableKeepAlives: true, DisableCompression: true,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			raw, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			host, _, _ := net.SplitHostPort(addr)
			timedRaw := &rawConn{Conn: raw}
			tc := tls.Client(timedRaw, &tls.Config{RootCAs: pool, ServerName: host})
			if err := tc.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, err
			}
			conn = &timedConn{Conn: tc, raw: timedRaw, ends: make(chan eventEnd, 65536)}
			return conn, nil
		}}
	client := &http.Client{Transport: tr}
	for r := 0; r < requests; r++ {
		port := 0
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			port = info.Conn.LocalAddr().(*net.TCPAddr).Port
		}}
		body := `{"model":"m","stream":true,"max_tokens":` + tokens + `}`
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		resp, err := client.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		in := bufio.NewReader(resp.Body)
		for i := 0; ; {
			line, err := in.ReadString('\n')
			if line == "\n" {
				end := eventEnd{offCPU: -1}
				select {
				case end = <-conn.ends:
				default:
					end.mono = mono()
				}
				fmt.Printf("{\"port\":%d,\"event_index\":%d,\"mono_ns\":%d,\"off_cpu_ns\":%d}\n", port, i,
					end.mono, end.offCPU)
				i++
			}
			if err != nil {
				break
			}
		}
		resp.Body.Close()
	}
}
