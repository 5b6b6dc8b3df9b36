// Command oci-registry is the OCI registry of Weft's chart tests: go-containerregistry's in-memory
// registry (pkg/registry, the distribution API that `helm push` and `helm pull` speak) behind TLS
// with a certificate the test signed with its private CA, and HTTP basic authentication.
//
// Usage: oci-registry -listen 127.0.0.1:PORT -cert server.pem -key server.key -user U -password-file F
//
// The password is read from a file, never from argv (a process list would show it). It prints
// "listening on ADDR" on stdout once it accepts connections, so a test waits for that line.
package main

import (
	"crypto/subtle"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	cert := flag.String("cert", "", "PEM certificate (TLS); plain HTTP without it")
	key := flag.String("key", "", "PEM private key of -cert")
	user := flag.String("user", "", "basic auth user; no authentication without it")
	passwordFile := flag.String("password-file", "", "file holding the basic auth password")
	flag.Parse()

	password := ""
	if *passwordFile != "" {
		b, err := os.ReadFile(*passwordFile)
		if err != nil {
			log.Fatalf("oci-registry: reading -password-file: %v", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}

	inner := registry.New(registry.Logger(log.New(os.Stderr, "oci-registry: ", log.LstdFlags)))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if *user != "" {
			u, p, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(*user)) != 1 ||
				subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
				// The distribution spec's challenge: clients (helm/ORAS, Weft) answer it with basic auth.
				w.Header().Set("WWW-Authenticate", `Basic realm="weft-test-registry"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		inner.ServeHTTP(w, r)
	})

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("oci-registry: %v", err)
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	os.Stdout.Sync()
	server := &http.Server{Handler: handler}
	if *cert != "" {
		err = server.ServeTLS(ln, *cert, *key)
	} else {
		err = server.Serve(ln)
	}
	log.Fatalf("oci-registry: %v", err)
}
