package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fenced/fenced/client"
)

// preStopCommand is `fenced pre-stop`, the preStop hook of a fenced pod in a
// Kubernetes StatefulSet. A pod stops either for good, because its
// StatefulSet was scaled below its ordinal, or to come back: a rolling
// update, a drain, an eviction, a deleted pod. A member that goes for good
// must leave the cluster, or the cluster keeps counting a voter that never
// returns; a member that comes back must not, because a removed node never
// adds itself back. The hook tells the two apart by reading the
// StatefulSet's desired replicas from the Kubernetes API with the pod's
// service account, and removes this node only when its ordinal is at or
// beyond them. Whatever it cannot establish (no service-account token, no
// right to read, the StatefulSet gone or being deleted, a name that is not
// NAME-ORDINAL) counts as coming back: it then only steps down, as `fenced
// step-down` does.
const preStopCommand = "pre-stop"

// preStopTimeout bounds the whole hook; a pod's default grace period is 30s
// and SIGTERM still needs its share.
const preStopTimeout = 20 * time.Second

// serviceAccountDir is where Kubernetes mounts a pod's service-account
// token, the API server's CA and the pod's namespace.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// maxStatefulSetBytes bounds the API answer read: a StatefulSet is a few KiB.
const maxStatefulSetBytes = 1 << 20

// preStopMain runs `fenced pre-stop ARGS` and returns the exit code.
func preStopMain(args []string, stdout, stderr io.Writer) int {
	return preStop(args, stdout, stderr, func() (*kubeAPI, error) {
		return inClusterAPI(serviceAccountDir, os.Getenv)
	})
}

// preStop is preStopMain with the Kubernetes API given by kube.
func preStop(args []string, stdout, stderr io.Writer, kube func() (*kubeAPI, error)) int {
	o, err := parseFlags(args)
	if err != nil {
		fmt.Fprintln(stderr, "fenced pre-stop:", err)
		return 2
	}
	if o.loaded, err = loadSecurity(&o.sec); err != nil {
		fmt.Fprintln(stderr, "fenced pre-stop:", err)
		return 1
	}
	self := o.httpAdvertise
	if self == "" {
		self = o.httpAddr
	}
	ctx, cancel := context.WithTimeout(context.Background(), preStopTimeout)
	defer cancel()

	goes, why := false, "not started with --peers-from-dns: not a StatefulSet's pod"
	if o.dns.pattern != "" {
		api, apiErr := kube()
		goes, why = podGoes(ctx, o.id, api, apiErr)
	}
	fmt.Fprintln(stdout, "fenced pre-stop:", why)
	if goes {
		msg, err := leaveCluster(ctx, o, self)
		if err != nil {
			// The member stays: the cluster counts a voter that is gone
			// until an operator removes it (fencectl status shows it).
			fmt.Fprintln(stderr, "fenced pre-stop: leaving the cluster failed; remove this member by hand (fencectl members remove "+o.id+"):", err)
			return 1
		}
		fmt.Fprintln(stdout, "fenced pre-stop:", msg)
		return 0
	}
	msg, err := stepDown(ctx, o, self)
	if errors.Is(err, client.ErrForbidden) {
		// With authentication on, a node's own certificate may not move
		// leadership (an admin's act); the daemon hands it over on SIGTERM.
		fmt.Fprintln(stdout, "fenced pre-stop: this node may not transfer leadership itself; SIGTERM hands it over:", oneLine(err))
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "fenced pre-stop:", err)
		return 1
	}
	fmt.Fprintln(stdout, "fenced pre-stop:", msg)
	return 0
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// leaveCluster removes the node at self from its cluster, as itself. The
// node must be the one this hook was configured as, a member, and not the
// last voter.
func leaveCluster(ctx context.Context, o *options, self string) (string, error) {
	c := o.loaded.apiClient([]string{self})
	st, err := c.NodeStatus(ctx, c.Endpoints()[0])
	if err != nil {
		return "", fmt.Errorf("status of %s: %w", self, err)
	}
	if st.ID != o.id {
		return "", fmt.Errorf("the node at %s is %s, not %s: nothing removed", self, st.ID, o.id)
	}
	voters, member := 0, false
	for _, m := range st.Members {
		if m.Voter {
			voters++
		}
		member = member || m.ID == st.ID
	}
	switch {
	case !member:
		return fmt.Sprintf("%s is not a member of its cluster: nothing to remove", st.ID), nil
	case voters < 2:
		return fmt.Sprintf("%s is the only voter: it stays", st.ID), nil
	}
	// A leader hands leadership over first (the cluster does it on a
	// leader's own removal).
	if err := c.Remove(ctx, st.ID); err != nil {
		return "", fmt.Errorf("remove %s: %w", st.ID, err)
	}
	return fmt.Sprintf("%s left the cluster", st.ID), nil
}

// podGoes reports whether the pod named pod stops for good: its
// StatefulSet, read through api, asks for fewer replicas than its ordinal.
// why says what was decided and on what grounds. apiErr is why there is no
// API to ask; any doubt keeps the member.
func podGoes(ctx context.Context, pod string, api *kubeAPI, apiErr error) (goes bool, why string) {
	name, ordinal, ok := podOrdinal(pod)
	if !ok {
		return false, fmt.Sprintf("%q is not a StatefulSet pod's name (NAME-ORDINAL): the member stays", pod)
	}
	if apiErr != nil {
		return false, fmt.Sprintf("cannot read StatefulSet %s (%v): the member stays", name, apiErr)
	}
	sts, err := api.statefulSet(ctx, name)
	if err != nil {
		return false, fmt.Sprintf("cannot read StatefulSet %s (%v): the member stays", name, err)
	}
	return sts.goes(ordinal)
}

// podOrdinal splits a StatefulSet pod's name NAME-ORDINAL.
func podOrdinal(pod string) (name string, ordinal int, ok bool) {
	i := strings.LastIndexByte(pod, '-')
	if i < 1 {
		return "", 0, false
	}
	digits := pod[i+1:]
	if digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return "", 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 {
		return "", 0, false
	}
	return pod[:i], n, true
}

// statefulSet is the part of an apps/v1 StatefulSet the hook reads.
type statefulSet struct {
	Metadata struct {
		Name              string  `json:"name"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		// Replicas is the desired count; Kubernetes defaults it to 1.
		Replicas *int `json:"replicas"`
	} `json:"spec"`
}

// goes decides for the pod of the given ordinal.
func (s *statefulSet) goes(ordinal int) (bool, string) {
	replicas := 1
	if s.Spec.Replicas != nil {
		replicas = *s.Spec.Replicas
	}
	switch {
	case s.Metadata.DeletionTimestamp != nil:
		return false, "the StatefulSet is being deleted (not a scale-down): the member stays"
	case replicas < 0:
		return false, fmt.Sprintf("the StatefulSet asks for a negative number of replicas (%d): the member stays", replicas)
	case replicas == 0:
		// All pods stop at once: removing them one by one would race the
		// cluster into losing its quorum. It is a stop, not a shrink.
		return false, "the StatefulSet is scaled to zero (a stop of the whole cluster, not a shrink): the member stays"
	case ordinal >= replicas:
		return true, fmt.Sprintf("the StatefulSet is scaled to %d replicas: ordinal %d goes for good and leaves the cluster", replicas, ordinal)
	}
	return false, fmt.Sprintf("ordinal %d is within the StatefulSet's %d replicas: the pod comes back, the member stays", ordinal, replicas)
}

// kubeAPI reads StatefulSets of one namespace from the Kubernetes API.
type kubeAPI struct {
	base      string // https://host:port
	namespace string
	token     string
	http      *http.Client
}

// inClusterAPI returns the API of the cluster the pod runs in, as its
// service account, from the files Kubernetes mounts in dir and the
// environment it sets.
func inClusterAPI(dir string, getenv func(string) string) (*kubeAPI, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set")
	}
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		return nil, fmt.Errorf("no service-account token (the pod needs a service account that may get its StatefulSet): %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("the API server's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no certificate", filepath.Join(dir, "ca.crt"))
	}
	ns, err := os.ReadFile(filepath.Join(dir, "namespace"))
	if err != nil {
		return nil, fmt.Errorf("the pod's namespace: %w", err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return &kubeAPI{
		base:      "https://" + net.JoinHostPort(host, port),
		namespace: strings.TrimSpace(string(ns)),
		token:     strings.TrimSpace(string(token)),
		http:      &http.Client{Transport: tr, Timeout: 5 * time.Second},
	}, nil
}

// statefulSet reads the StatefulSet name.
func (k *kubeAPI) statefulSet(ctx context.Context, name string) (*statefulSet, error) {
	u := fmt.Sprintf("%s/apis/apps/v1/namespaces/%s/statefulsets/%s", k.base, url.PathEscape(k.namespace), url.PathEscape(name))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+k.token)
	req.Header.Set("Accept", "application/json")
	resp, err := k.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatefulSetBytes))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var s statefulSet
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("the StatefulSet %s does not decode: %w", name, err)
	}
	return &s, nil
}
