package deploy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestChartRunsInDocker runs what the chart renders the way the kubelet
// would, in Docker: each pod of the StatefulSet is a container with the
// pod's name as host name, its environment resolved for that pod ($(POD_NAME)
// included), its Secrets written as the kubelet writes them (the items, the
// mode, the fsGroup) and mounted read-only, its user, read-only root and no
// capabilities; the headless Service is a network alias per pod. The
// certificates are those `fencectl tls init` makes, as docs/DEPLOY.md has
// them put into Secrets, and client certificates are required.
//
// It shows what rendering alone cannot: the three pods form one cluster
// with per-pod certificates, the rendered probes pass under clientAuth
// require (and fail without the pod's certificate), a fourth pod joins, the
// preStop hook of a pod the StatefulSet was scaled below removes its member
// while the hook of a pod that comes back does not (the StatefulSet is
// served by a fake Kubernetes API that checks the service-account token),
// and the backup job writes a backup that verifies under the backup key.
//
// It builds the image from this tree, so it runs only when asked:
//
//	FENCED_DEPLOY_DOCKER=1 go test -run TestChartRunsInDocker -v ./
func TestChartRunsInDocker(t *testing.T) {
	if os.Getenv("FENCED_DEPLOY_DOCKER") == "" {
		t.Skip("set FENCED_DEPLOY_DOCKER=1 to run the chart's pods in Docker (builds the image from this tree)")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers: %v: %s", err, out)
	}
	files, err := render(t, map[string]any{
		"replicas":  3,
		"tls":       map[string]any{"clientAuth": "require"},
		"backup":    map[string]any{"enabled": true, "clientCertSecret": "fenced-backup-client-tls"},
		"scaleDown": map[string]any{"removeMembers": true},
	})
	if err != nil {
		t.Fatal(err)
	}
	o := decodeAll(t, manifests(files))
	sts := o.statefulSets[0]
	job := o.cronJobs[0].Spec.JobTemplate.Spec.Template.Spec

	k := newKubelet(t)
	k.secrets = k.makeSecrets()
	api := k.fakeAPI(sts.Name)
	api.replicas.Store(3)

	for i := range 3 {
		k.runPod(fmt.Sprintf("%s-%d", sts.Name, i), &sts.Spec.Template.Spec, sts.Spec.ServiceName)
	}
	c := container(sts.Spec.Template.Spec.Containers, "fenced")
	ready := func(pod string) error { return k.probe(pod, c.ReadinessProbe) }
	live := func(pod string) error { return k.probe(pod, c.LivenessProbe) }
	for i := range 3 {
		pod := fmt.Sprintf("fenced-%d", i)
		eventually(t, 3*time.Minute, func() error { return errors.Join(live(pod), ready(pod)) })
	}
	k.waitMembers("fenced-0", []string{"fenced-0", "fenced-1", "fenced-2"})

	// The positive control of the probes: without the pod's certificate
	// the API refuses the connection, so the rendered probe is what gets in.
	if out, err := k.exec("fenced-0", []string{"FENCE_CERT=", "FENCE_KEY_FILE="}, c.ReadinessProbe.Exec.Command...); err == nil {
		t.Fatalf("the readiness probe passed without a client certificate under clientAuth require:\n%s", out)
	} else {
		t.Logf("without the pod's certificate the probe fails, as it must: %s", oneLine(out))
	}

	// Scale up: a fourth pod, beyond the bootstrap range, joins.
	api.replicas.Store(4)
	k.runPod("fenced-3", &sts.Spec.Template.Spec, sts.Spec.ServiceName)
	eventually(t, 2*time.Minute, func() error { return ready("fenced-3") })
	k.waitMembers("fenced-0", []string{"fenced-0", "fenced-1", "fenced-2", "fenced-3"})

	// Scale down to three: fenced-3's hook leaves; fenced-1's (a pod that
	// comes back, as in a rolling update) does not.
	api.replicas.Store(3)
	preStop := c.Lifecycle.PreStop.Exec.Command
	out, err := k.exec("fenced-1", nil, preStop...)
	if err != nil {
		t.Fatalf("fenced-1's preStop hook: %v\n%s", err, out)
	}
	t.Logf("fenced-1's preStop hook (replicas 3): %s", oneLine(out))
	leader := k.leader("fenced-0")
	if out, err = k.exec(leader, nil, preStop...); err != nil {
		t.Fatalf("the leader %s's preStop hook: %v\n%s", leader, err, out)
	}
	t.Logf("the leader %s's preStop hook (replicas 3): %s", leader, oneLine(out))
	out, err = k.exec("fenced-3", nil, preStop...)
	if err != nil || !strings.Contains(out, "fenced-3 left the cluster") {
		t.Fatalf("fenced-3's preStop hook: %v\n%s", err, out)
	}
	t.Logf("fenced-3's preStop hook (replicas 3): %s", oneLine(out))
	if got := api.asked.Load(); got < 2 {
		t.Fatalf("the fake API was asked %d times with the pod's service-account token", got)
	}
	k.stopPod("fenced-3")
	k.waitMembers("fenced-0", []string{"fenced-0", "fenced-1", "fenced-2"})

	// The backup job, as an admin by client certificate, writes a backup
	// that verifies under the cluster's key.
	k.runJob("backup", &job)
	backup := filepath.Join(k.volumes["backup"], "fenced.fenced")
	keyFile := filepath.Join(k.dir, "backup.key")
	if err := os.WriteFile(keyFile, k.secrets["fenced-backup-key"]["backup.key"], 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(k.fencectl, "snapshot", "inspect", backup, "--backup-key-file", keyFile).CombinedOutput(); err != nil {
		t.Fatalf("the job's backup does not verify under the key: %v\n%s", err, out)
	}
}

// kubelet runs pod specs as Docker containers.
type kubelet struct {
	t        *testing.T
	dir      string // secrets, volumes
	image    string
	fencectl string // a fencectl for this host
	network  string
	gateway  string
	prefix   string
	secrets  map[string]map[string][]byte
	volumes  map[string]string // host directories of the job's claims
	api      string            // KUBERNETES_SERVICE_HOST:PORT
	saDir    string
}

func newKubelet(t *testing.T) *kubelet {
	t.Helper()
	k := &kubelet{t: t, dir: t.TempDir(), prefix: "fenced-deploy-" + randHex(3), volumes: map[string]string{}}
	ctx := filepath.Join(k.dir, "image")
	k.image = "fenced:" + k.prefix
	build := exec.Command("bash", "../scripts/docker-build.sh", k.image)
	build.Env = append(os.Environ(), "FENCED_DOCKER_CONTEXT="+ctx)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/docker-build.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = k.docker("rmi", "-f", k.image) })
	k.fencectl = filepath.Join(ctx, "fencectl")
	k.network = k.prefix
	k.must("network", "create", k.network)
	t.Cleanup(func() { _, _ = k.docker("network", "rm", k.network) })
	k.gateway = strings.TrimSpace(k.must("network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", k.network))
	return k
}

func (k *kubelet) docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	return string(out), err
}

func (k *kubelet) must(args ...string) string {
	k.t.Helper()
	out, err := k.docker(args...)
	if err != nil {
		k.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// makeSecrets makes every Secret the rendering reads, as docs/DEPLOY.md
// does: the certificates from `fencectl tls init`, a tokens file, an ACL,
// a backup key.
func (k *kubelet) makeSecrets() map[string]map[string][]byte {
	k.t.Helper()
	tlsDir := filepath.Join(k.dir, "tls")
	nodes := []string{"fenced-0", "fenced-1", "fenced-2", "fenced-3"}
	out, err := exec.Command(k.fencectl, "tls", "init", "--dir", tlsDir, "--nodes", strings.Join(nodes, ","),
		"--hosts", "fenced,fenced.coord,fenced.coord.svc,*.fenced-headless,*.fenced-headless.coord,*.fenced-headless.coord.svc").CombinedOutput()
	if err != nil {
		k.t.Fatalf("fencectl tls init: %v\n%s", err, out)
	}
	read := func(p string) []byte {
		b, err := os.ReadFile(filepath.Join(tlsDir, p))
		if err != nil {
			k.t.Fatal(err)
		}
		return b
	}
	apiTLS, peer := map[string][]byte{"ca.crt": read("ca.pem")}, map[string][]byte{"ca.crt": read("ca.pem")}
	for _, n := range nodes {
		apiTLS[n+".crt"], apiTLS[n+".key"] = read(n+"/server.pem"), read(n+"/server-key.pem")
		peer[n+".crt"], peer[n+".key"] = read(n+"/peer.pem"), read(n+"/peer-key.pem")
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return map[string]map[string][]byte{
		"fenced-http-tls":          apiTLS,
		"fenced-peer-tls":          peer,
		"fenced-tokens":            {"tokens": []byte(randHex(16) + " admin ops\n" + randHex(16) + " client billing\n")},
		"fenced-acl":               {"acl": []byte("billing lock,read,verify billing/\n")},
		"fenced-backup-key":        {"backup.key": []byte(hex.EncodeToString(key) + "\n")},
		"fenced-backup-client-tls": {"tls.crt": read("admin.pem"), "tls.key": read("admin-key.pem")},
	}
}

// writeVolume writes a Secret or projected volume as the kubelet does:
// the items (or every key), with the volume's mode, owned by root and the
// pod's fsGroup.
func (k *kubelet) writeVolume(dir string, v corev1.Volume, fsGroup int) {
	k.t.Helper()
	var sources []corev1.VolumeProjection
	mode := int32(0o644)
	switch {
	case v.Secret != nil:
		sources = []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: v.Secret.SecretName}, Items: v.Secret.Items}}}
		if v.Secret.DefaultMode != nil {
			mode = *v.Secret.DefaultMode
		}
	case v.Projected != nil:
		sources = v.Projected.Sources
		if v.Projected.DefaultMode != nil {
			mode = *v.Projected.DefaultMode
		}
	default:
		k.t.Fatalf("volume %s: a kind this test does not write", v.Name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		k.t.Fatal(err)
	}
	for _, s := range sources {
		var name string
		var items []corev1.KeyToPath
		switch {
		case s.Secret != nil:
			name, items = s.Secret.Name, s.Secret.Items
		case s.ConfigMap != nil:
			name, items = s.ConfigMap.Name, s.ConfigMap.Items
		}
		data, ok := k.secrets[name]
		if !ok {
			k.t.Fatalf("volume %s reads %s, which the walkthrough does not create", v.Name, name)
		}
		if len(items) == 0 {
			for key := range data {
				items = append(items, corev1.KeyToPath{Key: key, Path: key})
			}
		}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				k.t.Fatalf("volume %s: %s has no key %s", v.Name, name, it.Key)
			}
			p := filepath.Join(dir, it.Path)
			if err := os.WriteFile(p, b, os.FileMode(mode)); err != nil {
				k.t.Fatal(err)
			}
			if err := os.Chmod(p, os.FileMode(mode)); err != nil {
				k.t.Fatal(err)
			}
			if err := os.Chown(p, 0, fsGroup); err != nil {
				k.t.Fatal(err)
			}
		}
	}
}

// runArgs returns the docker run arguments of container c of pod spec p,
// for the pod named pod.
func (k *kubelet) runArgs(pod string, p *corev1.PodSpec, c *corev1.Container) []string {
	k.t.Helper()
	sc, psc := c.SecurityContext, p.SecurityContext
	uid, gid, fsGroup := int64(0), int64(0), 0
	if psc != nil && psc.RunAsUser != nil {
		uid = *psc.RunAsUser
	}
	if psc != nil && psc.RunAsGroup != nil {
		gid = *psc.RunAsGroup
	}
	if psc != nil && psc.FSGroup != nil {
		fsGroup = int(*psc.FSGroup)
	}
	if sc != nil && sc.RunAsUser != nil {
		uid = *sc.RunAsUser
	}
	args := []string{"--name", k.prefix + "-" + pod, "--hostname", pod, "--network", k.network,
		"--user", fmt.Sprintf("%d:%d", uid, gid), "--group-add", strconv.Itoa(fsGroup), "--security-opt", "no-new-privileges"}
	if sc != nil && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	if sc != nil && sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL") {
		args = append(args, "--cap-drop", "ALL")
	}
	for name, v := range podEnv(c, pod) {
		if strings.HasPrefix(v, "<secret ") {
			ref := strings.TrimSuffix(strings.TrimPrefix(v, "<secret "), ">")
			s, key, _ := strings.Cut(ref, "/")
			v = string(k.secrets[s][key])
		}
		args = append(args, "-e", name+"="+v)
	}
	for _, vm := range c.VolumeMounts {
		var v *corev1.Volume
		for i := range p.Volumes {
			if p.Volumes[i].Name == vm.Name {
				v = &p.Volumes[i]
			}
		}
		switch {
		case v == nil: // a volume claim template: the pod's own data
			args = append(args, "--tmpfs", fmt.Sprintf("%s:uid=%d,gid=%d,mode=0700", vm.MountPath, uid, gid))
		case v.PersistentVolumeClaim != nil:
			dir := filepath.Join(k.dir, "claims", v.Name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				k.t.Fatal(err)
			}
			if err := os.Chown(dir, int(uid), int(gid)); err != nil {
				k.t.Fatal(err)
			}
			k.volumes[v.Name] = dir
			args = append(args, "-v", dir+":"+vm.MountPath)
		default:
			dir := filepath.Join(k.dir, "pods", pod, v.Name)
			k.writeVolume(dir, *v, fsGroup)
			args = append(args, "-v", dir+":"+vm.MountPath+":ro")
		}
	}
	if p.AutomountServiceAccountToken != nil && *p.AutomountServiceAccountToken && k.saDir != "" {
		host, port, _ := net.SplitHostPort(k.api)
		args = append(args, "-v", k.saDir+":/var/run/secrets/kubernetes.io/serviceaccount:ro",
			"-e", "KUBERNETES_SERVICE_HOST="+host, "-e", "KUBERNETES_SERVICE_PORT="+port)
	}
	if len(c.Command) > 0 {
		args = append(args, "--entrypoint", c.Command[0])
	}
	args = append(args, k.image)
	if len(c.Command) > 1 {
		args = append(args, c.Command[1:]...)
	}
	return append(args, c.Args...)
}

// runPod starts a pod of the StatefulSet, reachable at POD.SERVICE and at
// the client Service's name.
func (k *kubelet) runPod(pod string, p *corev1.PodSpec, service string) {
	k.t.Helper()
	c := container(p.Containers, "fenced")
	args := append([]string{"run", "-d", "--network-alias", pod + "." + service, "--network-alias", "fenced"}, k.runArgs(pod, p, c)...)
	k.must(args...)
	k.t.Cleanup(func() {
		if k.t.Failed() {
			out, _ := k.docker("logs", "--tail", "40", k.prefix+"-"+pod)
			k.t.Logf("logs of %s:\n%s", pod, out)
		}
		_, _ = k.docker("rm", "-f", k.prefix+"-"+pod)
	})
}

func (k *kubelet) stopPod(pod string) { k.must("stop", "-t", "10", k.prefix+"-"+pod) }

// runJob runs a job's pod to completion; it must succeed.
func (k *kubelet) runJob(name string, p *corev1.PodSpec) {
	k.t.Helper()
	c := &p.Containers[0]
	out, err := k.docker(append([]string{"run", "--rm"}, k.runArgs("job-"+name, p, c)...)...)
	if err != nil {
		k.t.Fatalf("job %s: %v\n%s", name, err, out)
	}
	k.t.Logf("job %s: %s", name, oneLine(out))
}

// exec runs a command in a pod's container with its environment (and the
// extra variables env), as the kubelet runs exec probes and hooks.
func (k *kubelet) exec(pod string, env []string, cmd ...string) (string, error) {
	args := []string{"exec"}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(append(args, k.prefix+"-"+pod), cmd...)
	return k.docker(args...)
}

// probe runs an exec probe once.
func (k *kubelet) probe(pod string, p *corev1.Probe) error {
	if out, err := k.exec(pod, nil, p.Exec.Command...); err != nil {
		return fmt.Errorf("%s: %v: %s", pod, err, oneLine(out))
	}
	return nil
}

// waitMembers waits until the node in pod reports exactly the members want,
// every one of them healthy.
func (k *kubelet) waitMembers(pod string, want []string) {
	k.t.Helper()
	eventually(k.t, 2*time.Minute, func() error {
		out, err := k.exec(pod, nil, "/fencectl", "status", "-o", "json", "--endpoints", "https://127.0.0.1:7700", "--timeout", "5s")
		if err != nil {
			return fmt.Errorf("fencectl status: %v: %s", err, oneLine(out))
		}
		var st struct {
			Leader  string `json:"leader"`
			Members []struct {
				ID     string `json:"id"`
				Health string `json:"health"`
			} `json:"members"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return fmt.Errorf("fencectl status: %v: %s", err, oneLine(out))
		}
		var got []string
		for _, m := range st.Members {
			if m.Health != "ready" {
				return fmt.Errorf("%s is %s", m.ID, m.Health)
			}
			got = append(got, m.ID)
		}
		slices.Sort(got)
		if st.Leader == "" || !slices.Equal(got, want) {
			return fmt.Errorf("leader %q, members %v; want %v", st.Leader, got, want)
		}
		return nil
	})
}

// leader returns the leader the node in pod knows.
func (k *kubelet) leader(pod string) string {
	k.t.Helper()
	var id string
	eventually(k.t, time.Minute, func() error {
		out, err := k.exec(pod, nil, "/fencectl", "status", "-o", "json", "--endpoints", "https://127.0.0.1:7700", "--timeout", "5s")
		var st struct {
			Leader string `json:"leader"`
		}
		if err == nil {
			err = json.Unmarshal([]byte(out), &st)
		}
		if err == nil && st.Leader == "" {
			err = errors.New("no leader")
		}
		id = st.Leader
		return err
	})
	return id
}

// fakeAPI serves the StatefulSet name, with the replicas it holds, to
// requests bearing the pods' service-account token, on the network's
// gateway; the pods' service-account directory names it.
type fakeAPI struct {
	replicas atomic.Int32
	asked    atomic.Int32
}

func (k *kubelet) fakeAPI(name string) *fakeAPI {
	k.t.Helper()
	f := &fakeAPI{}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP(k.gateway)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		k.t.Fatal(err)
	}
	token := randHex(16)
	path := "/apis/apps/v1/namespaces/coord/statefulsets/" + name
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				http.Error(w, `{"kind":"Status","code":401}`, http.StatusUnauthorized)
				return
			}
			if r.Method != http.MethodGet || r.URL.Path != path {
				http.Error(w, `{"kind":"Status","code":403}`, http.StatusForbidden)
				return
			}
			f.asked.Add(1)
			fmt.Fprintf(w, `{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":%q},"spec":{"replicas":%d}}`, name, f.replicas.Load())
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		ReadHeaderTimeout: 5 * time.Second,
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(k.gateway, "0"))
	if err != nil {
		k.t.Fatal(err)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	k.t.Cleanup(func() { _ = srv.Close() })
	k.api = ln.Addr().String()
	k.saDir = filepath.Join(k.dir, "serviceaccount")
	if err := os.MkdirAll(k.saDir, 0o755); err != nil {
		k.t.Fatal(err)
	}
	for file, data := range map[string]string{
		"token": token, "namespace": "coord",
		"ca.crt": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
	} {
		if err := os.WriteFile(filepath.Join(k.saDir, file), []byte(data), 0o644); err != nil {
			k.t.Fatal(err)
		}
	}
	return f
}

// eventually polls f until it returns nil or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", timeout, err)
		}
		time.Sleep(time.Second)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
