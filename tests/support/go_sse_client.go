// A Go net/http streaming client (stdlib only, HTTP/1.1): the Go crypto/tls
// tests (tests/integration/go_tls_test.cpp) and scripts/bench.sh build it
// with the system Go.
//
//	go-sse-client URL CA_PEM MAX_TOKENS REQUESTS DELAY_MS
//
// POSTs REQUESTS streaming requests (one connection each) and prints one
// line per SSE event read: {"port": local port, "event_index": i,
// "mono_ns": CLOCK_MONOTONIC}. The clock is read as the tls.Conn Read that
// delivered the event's last byte returns (an event ends in "\n\n", which
// nothing else in the response has), not after HTTP parsing, whose time (and
// a preemption meanwhile) would count as error. It waits DELAY_MS first: the agent attaches to
// a new executable when it sees its exec, a few ms later, and a call made
// before that is not seen.
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
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func mono() int64 {
	var ts syscall.Timespec
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// timedConn clocks each Read's return and queues that time once per event
// end ("\n\n") the Read delivered.
type timedConn struct {
	net.Conn
	last byte
	ends chan int64
}

func (c *timedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	t := mono()
	for _, ch := range b[:n] {
		if ch == '\n' && c.last == '\n' {
			select {
			case c.ends <- t:
			default: // more events than the queue holds: those are clocked when parsed
			}
		}
		c.last = ch
	}
	return n, err
}

func main() {
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
			tc := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: host})
			if err := tc.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, err
			}
			conn = &timedConn{Conn: tc, ends: make(chan int64, 65536)}
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
				t := int64(0)
				select {
				case t = <-conn.ends:
				default:
					t = mono()
				}
				fmt.Printf("{\"port\":%d,\"event_index\":%d,\"mono_ns\":%d}\n", port, i, t)
				i++
			}
			if err != nil {
				break
			}
		}
		resp.Body.Close()
	}
}
