package main

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/tlsutil"
)

// tlsGlobals are the global flags of TLS and authentication.
type tlsGlobals struct {
	cacert, cert, key, token string
	// insecureCredentials sends token over plain http to remote nodes too.
	insecureCredentials bool
	// cfg is the TLS configuration the flags make; nil without TLS flags.
	cfg *tls.Config
}

// envNames are the environment variables of global flags whose names would
// clash with the variables fencectl lock gives its command: FENCE_TOKEN is a
// grant's fencing token and FENCE_KEY its key, so a fencectl run inside a
// lock must not read them as credentials.
var envNames = map[string]string{
	"token": envPrefix + "AUTH_TOKEN",
	"key":   envPrefix + "KEY_FILE",
}

// envName returns the environment variable of a global flag.
func envName(flag string) string {
	if n, ok := envNames[flag]; ok {
		return n
	}
	return envPrefix + upperSnake(flag)
}

func upperSnake(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func (t *tlsGlobals) register(fs *pflag.FlagSet) {
	fs.StringVar(&t.cacert, "cacert", "", "CA bundle that verifies the nodes' certificates; endpoints are then reached with https (env FENCE_CACERT)")
	fs.StringVar(&t.cert, "cert", "", "client certificate (PEM) to authenticate with; its OU is the role (env FENCE_CERT)")
	fs.StringVar(&t.key, "key", "", "private key (PEM) of --cert (env FENCE_KEY_FILE)")
	fs.StringVar(&t.token, "token", "", "bearer token to authenticate with (env FENCE_AUTH_TOKEN); sent over plain http only to loopback addresses, unless --insecure-credentials")
	fs.BoolVar(&t.insecureCredentials, "insecure-credentials", false, "send --token over plain http to remote nodes too, on a network you trust (env FENCE_INSECURE_CREDENTIALS)")
	for _, name := range []string{"cacert", "cert", "key"} {
		completeFlag(fs, name, completeFiles)
	}
}

// check loads the files the flags name.
func (t *tlsGlobals) check() error {
	t.cfg = nil
	if (t.cert == "") != (t.key == "") {
		return errors.New("--cert and --key go together")
	}
	if t.cacert == "" && t.cert == "" {
		return nil
	}
	cfg, err := tlsutil.ClientConfig(tlsutil.Files{Cert: t.cert, Key: t.key, CA: t.cacert})
	if err != nil {
		return fmt.Errorf("--cacert/--cert/--key: %v", err)
	}
	t.cfg = cfg
	return nil
}

// clientOptions are the client.Client options the flags ask for.
func (t *tlsGlobals) clientOptions() []client.Option {
	var opts []client.Option
	if t.cfg != nil {
		opts = append(opts, client.WithTLS(t.cfg))
	}
	if t.token != "" {
		opts = append(opts, client.WithBearerToken(t.token))
	}
	if t.insecureCredentials {
		opts = append(opts, client.WithInsecureCredentials())
	}
	return opts
}
