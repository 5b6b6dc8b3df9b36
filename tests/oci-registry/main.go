// Command oci-registry is the OCI registry of Weft's chart tests: go-containerregistry's in-memory
// registry (pkg/registry, the distribution API that `helm push` and `helm pull` speak) behind TLS
// with a certificate the test signed with its private CA, and HTTP basic authentication.
//
// Usage: oci-registry -listen 127.0.0.1:PORT -cert server.pem -key server.key -user U -password-file F [-token]
//
// With -token it authenticates as Docker Hub, GHCR and distribution's token auth do: a request
// without a valid bearer token is answered 401 with `WWW-Authenticate: Bearer realm=…,service=…,
// scope=…`, and the realm (GET /token on the same listener) trades basic auth for a token. The
// realm refuses a request without the challenge's `service`, and the registry accepts a token
// only for the repositories its `scope` named, so a client must pass both on.
//
// The password is read from a file, never from argv (a process list would show it). It prints
// "listening on ADDR" on stdout once it accepts connections, so a test waits for that line.
package main

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	cert := flag.String("cert", "", "PEM certificate (TLS); plain HTTP without it")
	key := flag.String("key", "", "PEM private key of -cert")
	user := flag.String("user", "", "basic auth user; no authentication without it")
	passwordFile := flag.String("password-file", "", "file holding the basic auth password")
	tokenAuth := flag.Bool("token", false, "require bearer tokens from the /token realm (basic auth only there)")
	flag.Parse()

	password := ""
	if *passwordFile != "" {
		b, err := os.ReadFile(*passwordFile)
		if err != nil {
			log.Fatalf("oci-registry: reading -password-file: %v", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("oci-registry: %v", err)
	}
	scheme := "http"
	if *cert != "" {
		scheme = "https"
	}
	realm := fmt.Sprintf("%s://%s/token", scheme, ln.Addr())
	const service = "weft-test-registry"

	basicOK := func(r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		return ok && subtle.ConstantTimeCompare([]byte(u), []byte(*user)) == 1 &&
			subtle.ConstantTimeCompare([]byte(p), []byte(password)) == 1
	}
	unauthorized := func(w http.ResponseWriter, challenge string) {
		w.Header().Set("WWW-Authenticate", challenge)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
	}
	var issued sync.Map

	inner := registry.New(registry.Logger(log.New(os.Stderr, "oci-registry: ", log.LstdFlags)))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if *tokenAuth && r.URL.Path == "/token" {
			q := r.URL.Query()
			if q.Get("service") != service {
				http.Error(w, "service must be "+service, http.StatusBadRequest)
				return
			}
			if *user != "" && !basicOK(r) {
				unauthorized(w, `Basic realm="weft-test-token-realm"`)
				return
			}
			b := make([]byte, 16)
			if _, err := rand.Read(b); err != nil {
				log.Fatalf("oci-registry: %v", err)
			}
			token := hex.EncodeToString(b)
			issued.Store(token, q["scope"])
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]string{"token": token, "access_token": token})
			return
		}
		if *tokenAuth {
			// The repository and action of this request, as distribution's token auth names them.
			repo, action := "", "pull"
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				action = "pull,push"
			}
			parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v2/"), "/")
			for i, p := range parts {
				if p == "manifests" || p == "blobs" || p == "tags" {
					repo = strings.Join(parts[:i], "/")
					break
				}
			}
			t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			scopes, known := issued.Load(t)
			granted := ok && known
			if granted && repo != "" {
				granted = false
				for _, s := range scopes.([]string) {
					granted = granted || strings.HasPrefix(s, "repository:"+repo+":")
				}
			}
			if !granted {
				scope := ""
				if repo != "" {
					scope = fmt.Sprintf(`,scope="repository:%s:%s"`, repo, action)
				}
				unauthorized(w, fmt.Sprintf(`Bearer realm="%s",service="%s"%s`, realm, service, scope))
				return
			}
		} else if *user != "" && !basicOK(r) {
			// The distribution spec's challenge: clients (helm/ORAS, Weft) answer it with basic auth.
			unauthorized(w, `Basic realm="weft-test-registry"`)
			return
		}
		inner.ServeHTTP(w, r)
	})

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
