// A Go crypto/tls user in one process, for scripts/bench.sh §7: a loopback
// TLS server and client, the client writing 256 non-HTTP bytes per
// (*Conn).Write as fast as it goes, the server reading them (one
// (*Conn).Read per record or so). What the agent costs such a process —
// traced or not — shows in its write rate.
//
//	go-tls-loop SECONDS [READY_FILE GO_FILE]
//
// With READY_FILE and GO_FILE it connects, creates READY_FILE and waits for
// GO_FILE before writing (so the agent can start with its pid first). Prints
// {"writes_per_sec": N, "writes": N}.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"os"
	"strconv"
	"time"
)

// A throwaway self-signed certificate: the client does not verify it.
func certificate() tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	template := x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, &template, &template, &key.PublicKey, key)
	must(err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func waitFor(path string) {
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func main() {
	seconds, err := strconv.ParseFloat(os.Args[1], 64)
	must(err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{certificate()}})
	must(err)
	go func() {
		conn, err := ln.Accept()
		must(err)
		io.Copy(io.Discard, conn)
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	must(err)
	if len(os.Args) > 3 {
		must(os.WriteFile(os.Args[2], nil, 0o644))
		waitFor(os.Args[3])
	}
	buf := make([]byte, 256)
	for i := range buf {
		buf[i] = byte(i)
	}
	writes := 0
	start := time.Now()
	deadline := start.Add(time.Duration(seconds * float64(time.Second)))
	for time.Now().Before(deadline) {
		_, err := conn.Write(buf)
		must(err)
		writes++
	}
	elapsed := time.Since(start).Seconds()
	fmt.Printf("{\"writes_per_sec\": %.0f, \"writes\": %d}\n", float64(writes)/elapsed, writes)
}
