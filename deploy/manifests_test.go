// Package deploy tests the Kubernetes manifests under kubernetes/ and the
// Helm chart under helm/fenced: every document decodes strictly (no unknown
// or duplicate field) into the Kubernetes API types, and the objects keep
// the invariants a fenced cluster needs (checks below; security_test.go
// has those of its protections, docker_test.go runs the rendered pods). The
// chart is rendered with Helm's own engine, as `helm template` would, its
// values first checked against values.schema.json.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// serviceMonitor is the part of the Prometheus operator's ServiceMonitor
// (monitoring.coreos.com/v1) the chart writes; its types are not in
// k8s.io/api, and a strict decode into this subset catches a misspelt field.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port      string `json:"port"`
			Path      string `json:"path,omitempty"`
			Interval  string `json:"interval,omitempty"`
			Scheme    string `json:"scheme,omitempty"`
			TLSConfig *struct {
				ServerName string `json:"serverName,omitempty"`
				CA         struct {
					Secret *corev1.SecretKeySelector `json:"secret,omitempty"`
				} `json:"ca"`
				Cert *struct {
					Secret *corev1.SecretKeySelector `json:"secret,omitempty"`
				} `json:"cert,omitempty"`
				KeySecret *corev1.SecretKeySelector `json:"keySecret,omitempty"`
			} `json:"tlsConfig,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// objects are the decoded documents of one manifest set.
type objects struct {
	statefulSets    []*appsv1.StatefulSet
	services        []*corev1.Service
	pdbs            []*policyv1.PodDisruptionBudget
	cronJobs        []*batchv1.CronJob
	pvcs            []*corev1.PersistentVolumeClaim
	serviceMonitors []*serviceMonitor
	networkPolicies []*networkingv1.NetworkPolicy
	serviceAccounts []*corev1.ServiceAccount
	roles           []*rbacv1.Role
	roleBindings    []*rbacv1.RoleBinding
}

// decodeAll splits YAML streams into documents and decodes each strictly
// into the type its kind names; an unknown kind is an error.
func decodeAll(t *testing.T, files map[string][]byte) *objects {
	t.Helper()
	objs := &objects{}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		for i, doc := range splitDocs(files[name]) {
			if err := objs.add(doc); err != nil {
				t.Fatalf("%s, document %d: %v\n%s", name, i+1, err, doc)
			}
		}
	}
	return objs
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocs returns the non-empty documents of a YAML stream.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSep.Split(string(b), -1) {
		empty := true
		for _, line := range strings.Split(d, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
			}
		}
		if !empty {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func (o *objects) add(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var target any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 StatefulSet":
		v := &appsv1.StatefulSet{}
		o.statefulSets, target = append(o.statefulSets, v), v
	case "v1 Service":
		v := &corev1.Service{}
		o.services, target = append(o.services, v), v
	case "policy/v1 PodDisruptionBudget":
		v := &policyv1.PodDisruptionBudget{}
		o.pdbs, target = append(o.pdbs, v), v
	case "batch/v1 CronJob":
		v := &batchv1.CronJob{}
		o.cronJobs, target = append(o.cronJobs, v), v
	case "v1 PersistentVolumeClaim":
		v := &corev1.PersistentVolumeClaim{}
		o.pvcs, target = append(o.pvcs, v), v
	case "monitoring.coreos.com/v1 ServiceMonitor":
		v := &serviceMonitor{}
		o.serviceMonitors, target = append(o.serviceMonitors, v), v
	case "networking.k8s.io/v1 NetworkPolicy":
		v := &networkingv1.NetworkPolicy{}
		o.networkPolicies, target = append(o.networkPolicies, v), v
	case "v1 ServiceAccount":
		v := &corev1.ServiceAccount{}
		o.serviceAccounts, target = append(o.serviceAccounts, v), v
	case "rbac.authorization.k8s.io/v1 Role":
		v := &rbacv1.Role{}
		o.roles, target = append(o.roles, v), v
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		v := &rbacv1.RoleBinding{}
		o.roleBindings, target = append(o.roleBindings, v), v
	default:
		return fmt.Errorf("unexpected kind %q of apiVersion %q", tm.Kind, tm.APIVersion)
	}
	return yaml.UnmarshalStrict(doc, target)
}

// check returns every broken invariant of a manifest set.
func check(o *objects) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if len(o.statefulSets) != 1 {
		fail("want one StatefulSet, found %d", len(o.statefulSets))
		return errs
	}
	sts := o.statefulSets[0]
	podLabels := sts.Spec.Template.Labels
	spec := sts.Spec

	if spec.Replicas == nil || *spec.Replicas < 1 || *spec.Replicas%2 == 0 {
		fail("replicas must be odd: %v", ptrString(spec.Replicas))
	}
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		fail("podManagementPolicy must be Parallel (the first pod waits for all the others), not %q", spec.PodManagementPolicy)
	}
	if u := spec.UpdateStrategy; u.Type != "" && u.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		fail("updateStrategy must be RollingUpdate, not %q", u.Type)
	} else if r := u.RollingUpdate; r != nil {
		if r.MaxUnavailable != nil && r.MaxUnavailable.IntValue() != 1 {
			fail("rolling updates must replace one pod at a time, not maxUnavailable %s", r.MaxUnavailable.String())
		}
		if r.Partition != nil && *r.Partition != 0 {
			fail("a rolling update partition of %d leaves pods behind", *r.Partition)
		}
	}
	if !selects(spec.Selector, podLabels) {
		fail("the StatefulSet's selector does not select its pods")
	}

	checkServices(o, sts, fail)
	checkPDB(o, podLabels, fail)
	checkPod(sts, fail)
	checkCredentials(sts, fail)
	checkNetworkPolicies(o, fail)
	checkServiceAccount(o, fail)
	for _, cj := range o.cronJobs {
		p := cj.Spec.JobTemplate.Spec.Template.Spec
		checkNonRoot("CronJob "+cj.Name, p.SecurityContext, p.Containers, fail)
		checkBackupJob(o, cj, fail)
	}
	for _, sm := range o.serviceMonitors {
		checkServiceMonitor(o, sm, fail)
	}
	return errs
}

func checkServices(o *objects, sts *appsv1.StatefulSet, fail func(string, ...any)) {
	var headless, client *corev1.Service
	for _, s := range o.services {
		if !selectsMap(s.Spec.Selector, sts.Spec.Template.Labels) {
			continue
		}
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = s
		} else {
			client = s
		}
	}
	switch {
	case headless == nil:
		fail("no headless Service selects the pods")
	case headless.Name != sts.Spec.ServiceName:
		fail("the StatefulSet's serviceName %q is not the headless Service %q", sts.Spec.ServiceName, headless.Name)
	case !headless.Spec.PublishNotReadyAddresses:
		fail("the headless Service must publish not-ready addresses: the pods resolve each other before any is ready")
	}
	if headless != nil && (servicePort(headless, "http") == nil || servicePort(headless, "raft") == nil) {
		fail("the headless Service must carry the http and raft ports")
	}
	if client == nil || servicePort(client, "http") == nil {
		fail("no client Service with the http port selects the pods")
	}
}

// checkServiceMonitor: it scrapes /metrics on the http port through exactly
// one Service that selects the pods, so each pod is scraped once.
func checkServiceMonitor(o *objects, sm *serviceMonitor, fail func(string, ...any)) {
	if len(sm.Spec.Endpoints) == 0 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
		fail("the ServiceMonitor must scrape /metrics on port http")
	}
	var through []string
	for _, s := range o.services {
		if selects(&sm.Spec.Selector, s.Labels) && selectsMap(s.Spec.Selector, o.statefulSets[0].Spec.Template.Labels) {
			through = append(through, s.Name)
		}
	}
	if len(through) != 1 {
		fail("the ServiceMonitor must select exactly one Service of the pods (each pod scraped once), not %v", through)
	}
	c := container(o.statefulSets[0].Spec.Template.Spec.Containers, "fenced")
	env := podEnv(c, o.statefulSets[0].Name+"-0")
	if env["FENCED_TLS_CERT"] == "" || len(sm.Spec.Endpoints) == 0 {
		return
	}
	ep := sm.Spec.Endpoints[0]
	switch {
	case ep.Scheme != "https" || ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil:
		fail("the API serves TLS: the ServiceMonitor must scrape https with the CA")
	case ep.TLSConfig.ServerName == "":
		// Prometheus dials pod addresses, which no certificate names.
		fail("the ServiceMonitor's tlsConfig needs a serverName the nodes' certificates name")
	case env["FENCED_TLS_CLIENT_AUTH"] == "require" && (ep.TLSConfig.Cert == nil || ep.TLSConfig.KeySecret == nil):
		fail("the API requires client certificates: the ServiceMonitor must present one")
	}
}

func checkPDB(o *objects, podLabels map[string]string, fail func(string, ...any)) {
	for _, p := range o.pdbs {
		if !selects(p.Spec.Selector, podLabels) {
			continue
		}
		if p.Spec.MaxUnavailable == nil || *p.Spec.MaxUnavailable != intstr.FromInt32(1) || p.Spec.MinAvailable != nil {
			fail("the PodDisruptionBudget must be maxUnavailable: 1")
		}
		return
	}
	fail("no PodDisruptionBudget selects the pods")
}

// patternRE is NAME-{FIRST..LAST}.SERVICE[.more]:PORT.
var patternRE = regexp.MustCompile(`^([a-z0-9-]+)-\{(\d+)\.\.(\d+)\}\.([a-z0-9-]+)(\.[a-z0-9.-]+)?:(\d+)$`)

func checkPod(sts *appsv1.StatefulSet, fail func(string, ...any)) {
	pod := sts.Spec.Template.Spec
	checkNonRoot("StatefulSet "+sts.Name, pod.SecurityContext, pod.Containers, fail)
	checkAntiAffinity(pod.Affinity, sts.Spec.Template.Labels, fail)
	c := container(pod.Containers, "fenced")
	if c == nil {
		fail("no container named fenced")
		return
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if got := addrPort(env["FENCED_HTTP_ADDR"]); got == 0 || got != ports["http"] {
		fail("FENCED_HTTP_ADDR %q does not listen on the http port %d", env["FENCED_HTTP_ADDR"], ports["http"])
	}
	if got := addrPort(env["FENCED_RAFT_ADDR"]); got == 0 || got != ports["raft"] {
		fail("FENCED_RAFT_ADDR %q does not listen on the raft port %d", env["FENCED_RAFT_ADDR"], ports["raft"])
	}
	checkProbe("readiness", c.ReadinessProbe, false, sts, c, fail)
	checkProbe("liveness", c.LivenessProbe, true, sts, c, fail)
	if c.StartupProbe == nil {
		fail("no startup probe: liveness would kill the first pod while it waits for its peers")
	} else {
		checkProbe("startup", c.StartupProbe, true, sts, c, fail)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil ||
		strings.Join(c.Lifecycle.PreStop.Exec.Command, " ") != "/fenced pre-stop" {
		fail("the preStop hook must exec /fenced pre-stop (the image has no shell)")
	}
	req := c.Resources.Requests
	if req.Cpu().IsZero() || req.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		fail("the fenced container needs cpu and memory requests and a memory limit")
	}
	// The DNS pattern names this StatefulSet's pods under its headless
	// Service, on the raft port, from ordinal 0 and within the replicas.
	m := patternRE.FindStringSubmatch(env["FENCED_PEERS_FROM_DNS"])
	if m == nil {
		fail("FENCED_PEERS_FROM_DNS %q is not NAME-{0..N}.SERVICE:PORT", env["FENCED_PEERS_FROM_DNS"])
	} else {
		first, _ := strconv.Atoi(m[2])
		last, _ := strconv.Atoi(m[3])
		port, _ := strconv.Atoi(m[6])
		switch {
		case m[1] != sts.Name || m[4] != sts.Spec.ServiceName:
			fail("FENCED_PEERS_FROM_DNS names %s pods under %s, not %s under %s", m[1], m[4], sts.Name, sts.Spec.ServiceName)
		case first != 0 || sts.Spec.Replicas == nil || last >= int(*sts.Spec.Replicas):
			fail("FENCED_PEERS_FROM_DNS range {%d..%d} must start at 0 and lie within the replicas", first, last)
		case int32(port) != ports["raft"]:
			fail("FENCED_PEERS_FROM_DNS port %d is not the raft port %d", port, ports["raft"])
		}
	}
	// The data dir is the volume claim, not the read-only root.
	mounted := false
	for _, vm := range c.VolumeMounts {
		mounted = mounted || (vm.MountPath == env["FENCED_DATA_DIR"] && hasClaim(sts, vm.Name))
	}
	if !mounted {
		fail("FENCED_DATA_DIR %q is not a mounted volume claim", env["FENCED_DATA_DIR"])
	}
}

func checkNonRoot(what string, pod *corev1.PodSecurityContext, cs []corev1.Container, fail func(string, ...any)) {
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || (pod.RunAsUser != nil && *pod.RunAsUser == 0) {
		fail("%s: the pod must run as non-root (runAsNonRoot: true, a non-zero runAsUser)", what)
	}
	for _, c := range cs {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			fail("%s: container %s has no security context", what, c.Name)
		case sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot, sc.RunAsUser != nil && *sc.RunAsUser == 0:
			fail("%s: container %s runs as root", what, c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			fail("%s: container %s must have a read-only root filesystem", what, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			fail("%s: container %s must not allow privilege escalation", what, c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			fail("%s: container %s is privileged", what, c.Name)
		case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) > 0:
			fail("%s: container %s must drop ALL capabilities and add none", what, c.Name)
		}
	}
}

func checkAntiAffinity(a *corev1.Affinity, podLabels map[string]string, fail func(string, ...any)) {
	if a == nil || a.PodAntiAffinity == nil {
		fail("no pod anti-affinity: two members could share a node")
		return
	}
	terms := a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		terms = append(terms, w.PodAffinityTerm)
	}
	for _, t := range terms {
		if t.TopologyKey == "kubernetes.io/hostname" && selects(t.LabelSelector, podLabels) {
			return
		}
	}
	fail("no anti-affinity term keeps the pods on different nodes (topologyKey kubernetes.io/hostname)")
}

func selects(sel *metav1.LabelSelector, labels map[string]string) bool {
	if sel == nil || len(sel.MatchExpressions) > 0 {
		return false
	}
	return selectsMap(sel.MatchLabels, labels)
}

func selectsMap(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func servicePort(s *corev1.Service, name string) *corev1.ServicePort {
	for i, p := range s.Spec.Ports {
		if p.Name == name && p.TargetPort.String() == name {
			return &s.Spec.Ports[i]
		}
	}
	return nil
}

func container(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func hasClaim(sts *appsv1.StatefulSet, name string) bool {
	for _, c := range sts.Spec.VolumeClaimTemplates {
		if c.Name == name {
			return true
		}
	}
	return false
}

func addrPort(addr string) int32 {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return 0
	}
	n, err := strconv.Atoi(addr[i+1:])
	if err != nil {
		return 0
	}
	return int32(n)
}

func ptrString(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

// render renders the chart with Helm's engine, as `helm template fenced
// helm/fenced --set ...` would: the values are checked against
// values.schema.json first. It returns every rendered file by name
// (manifests and NOTES.txt).
func render(t *testing.T, values map[string]any) (map[string][]byte, error) {
	t.Helper()
	chrt, err := loader.Load(filepath.Join("helm", "fenced"))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	if err := chrt.Validate(); err != nil {
		t.Fatalf("chart: %v", err)
	}
	vals, err := chartutil.ToRenderValues(chrt, values, chartutil.ReleaseOptions{
		Name: "fenced", Namespace: "coord", Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(chrt, vals)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for name, content := range out {
		files[name] = []byte(content)
	}
	return files, nil
}

// manifests returns the YAML files of a rendering.
func manifests(files map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for name, content := range files {
		if strings.HasSuffix(name, ".yaml") {
			out[name] = content
		}
	}
	return out
}

// notes returns the rendered NOTES.txt.
func notes(files map[string][]byte) string {
	for name, content := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			return string(content)
		}
	}
	return ""
}

// requireTLS is a rendering with client certificates required everywhere:
// the backup job and Prometheus present admin client certificates.
var requireTLS = map[string]any{
	"tls":            map[string]any{"clientAuth": "require"},
	"backup":         map[string]any{"enabled": true, "clientCertSecret": "fenced-backup-client-tls"},
	"serviceMonitor": map[string]any{"enabled": true, "clientCertSecret": "fenced-metrics-client-tls"},
}

// TestChartRendersValidManifests renders the chart with its defaults and
// with every option, and checks each result.
func TestChartRendersValidManifests(t *testing.T) {
	cases := []struct {
		name   string
		values map[string]any
		check  func(t *testing.T, o *objects, notes string)
	}{
		{"defaults", nil, func(t *testing.T, o *objects, notes string) {
			if len(o.serviceMonitors)+len(o.cronJobs)+len(o.pvcs) != 0 {
				t.Fatal("optional objects rendered by default")
			}
			a := o.statefulSets[0].Spec.Template.Spec.Affinity.PodAntiAffinity
			if len(a.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Fatal("the default anti-affinity is not required")
			}
			if errs := checkSecure(o); len(errs) > 0 {
				t.Fatalf("the defaults leave the cluster open:\n%s", strings.Join(errs, "\n"))
			}
			if strings.Contains(notes, "WARNING") {
				t.Fatalf("NOTES.txt warns about the defaults:\n%s", notes)
			}
		}},
		{"five members", map[string]any{"replicas": 5}, func(t *testing.T, o *objects, _ string) {
			if got := *o.statefulSets[0].Spec.Replicas; got != 5 {
				t.Fatalf("replicas %d", got)
			}
		}},
		{"client certificates required", requireTLS, func(t *testing.T, o *objects, _ string) {
			env := podEnv(fenced(o), "fenced-2")
			if env["FENCED_TLS_CLIENT_AUTH"] != "require" || env["FENCE_CERT"] != "/etc/fenced/peer/fenced-2.crt" {
				t.Fatalf("FENCED_TLS_CLIENT_AUTH %q, FENCE_CERT %q", env["FENCED_TLS_CLIENT_AUTH"], env["FENCE_CERT"])
			}
			if errs := checkSecure(o); len(errs) > 0 {
				t.Fatalf("%s", strings.Join(errs, "\n"))
			}
		}},
		{"everything on", map[string]any{
			"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}},
			"backup":         map[string]any{"enabled": true},
			"antiAffinity":   "soft",
			"env":            map[string]any{"FENCED_LOG_LEVEL": "debug"},
			"networkPolicy": map[string]any{"clients": []any{
				map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "billing"}}},
			}},
			"auth": map[string]any{"acl": map[string]any{"secret": "", "configMap": "fenced-acl"}},
		}, func(t *testing.T, o *objects, _ string) {
			if len(o.serviceMonitors) != 1 || len(o.cronJobs) != 1 || len(o.pvcs) != 1 {
				t.Fatalf("optional objects: %d ServiceMonitors, %d CronJobs, %d claims", len(o.serviceMonitors), len(o.cronJobs), len(o.pvcs))
			}
			env := podEnv(fenced(o), "fenced-0")
			for _, k := range []string{"FENCED_TLS_CERT", "FENCED_PEER_TLS_CERT", "FENCED_PEER_TLS_CA", "FENCED_LOG_LEVEL", "FENCED_ACL_FILE"} {
				if env[k] == "" {
					t.Fatalf("%s is not set", k)
				}
			}
			if src, _ := mountedFile(podSpec(o), fenced(o), env["FENCED_ACL_FILE"]); src.kind != "ConfigMap" || src.name != "fenced-acl" {
				t.Fatalf("the ACL comes from %s", src)
			}
			rules := o.networkPolicies[0].Spec.Ingress
			if last := rules[len(rules)-1]; len(last.From) != 1 || last.From[0].NamespaceSelector.MatchLabels["team"] != "billing" {
				t.Fatalf("the clients' rule is %+v", last)
			}
		}},
		{"insecure, for experiments", map[string]any{
			"tls":           map[string]any{"enabled": false},
			"auth":          map[string]any{"tokens": map[string]any{"enabled": false}, "acl": map[string]any{"enabled": false}},
			"backupKey":     map[string]any{"enabled": false, "requireForRestore": false},
			"networkPolicy": map[string]any{"enabled": false},
			"scaleDown":     map[string]any{"removeMembers": false},
			"backup":        map[string]any{"enabled": true},
		}, func(t *testing.T, o *objects, notes string) {
			if len(o.networkPolicies)+len(o.serviceAccounts)+len(o.roles)+len(o.roleBindings) != 0 {
				t.Fatal("NetworkPolicy or RBAC objects rendered with them off")
			}
			if podSpec(o).Volumes != nil {
				t.Fatalf("volumes mounted with every secret off: %v", podSpec(o).Volumes)
			}
			for _, w := range []string{"tls.enabled=false", "authentication is off", "networkPolicy.enabled=false", "backupKey.enabled=false"} {
				if !strings.Contains(notes, "WARNING: "+w) {
					t.Fatalf("NOTES.txt does not warn %q:\n%s", w, notes)
				}
			}
			if errs := checkSecure(o); len(errs) < 6 {
				t.Fatalf("checkSecure finds only %v", errs)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, err := render(t, tc.values)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			o := decodeAll(t, manifests(files))
			if errs := check(o); len(errs) > 0 {
				t.Fatalf("broken invariants:\n%s", strings.Join(errs, "\n"))
			}
			tc.check(t, o, notes(files))
		})
	}
}

// TestChartRefusesBadValues: values that would break or open a cluster fail
// the render with a message that names them, as `helm install` would. Some
// are refused by values.schema.json, the rest by templates/validate.yaml.
func TestChartRefusesBadValues(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"even replicas":                {map[string]any{"replicas": 4}, "replicas must be odd"},
		"no replicas":                  {map[string]any{"replicas": 0}, "/replicas"},
		"replicas as text":             {map[string]any{"replicas": "three"}, "/replicas"},
		"bootstrap beyond count":       {map[string]any{"replicas": 3, "bootstrapReplicas": 5}, "bootstrapReplicas"},
		"unknown anti-affinity":        {map[string]any{"antiAffinity": "maybe"}, "/antiAffinity"},
		"bogus clientAuth":             {map[string]any{"tls": map[string]any{"clientAuth": "bogus"}}, "/tls/clientAuth"},
		"misspelt tls.enabled":         {map[string]any{"tls": map[string]any{"enable": false}}, "enable"},
		"unknown top-level value":      {map[string]any{"replica": 5}, "replica"},
		"TLS off as text":              {map[string]any{"tls": map[string]any{"enabled": "false"}}, "/tls/enabled"},
		"numeric image tag":            {map[string]any{"image": map[string]any{"tag": 1.2}}, "/image/tag"},
		"port out of range":            {map[string]any{"ports": map[string]any{"raft": 70000}}, "/ports/raft"},
		"one port for both":            {map[string]any{"ports": map[string]any{"raft": 7700}}, "must differ"},
		"bad secret name":              {map[string]any{"tls": map[string]any{"httpSecret": "Fenced_TLS"}}, "/tls/httpSecret"},
		"unknown retention":            {map[string]any{"persistence": map[string]any{"whenScaled": "Keep"}}, "/persistence/whenScaled"},
		"grace too short for the hook": {map[string]any{"terminationGracePeriodSeconds": 5}, "/terminationGracePeriodSeconds"},
		"client peer of unknown kind":  {map[string]any{"networkPolicy": map[string]any{"clients": []any{map[string]any{"pods": "all"}}}}, "/networkPolicy/clients/0"},
		"empty client peer":            {map[string]any{"networkPolicy": map[string]any{"clients": []any{map[string]any{}}}}, "/networkPolicy/clients/0"},
		"tokens without a Secret":      {map[string]any{"auth": map[string]any{"tokens": map[string]any{"secret": ""}}}, "auth.tokens.secret"},
		"ACL without authentication": {map[string]any{
			"auth": map[string]any{"tokens": map[string]any{"enabled": false}}, "tls": map[string]any{"clientAuth": "none"},
		}, "needs authentication"},
		"ACL from two places":         {map[string]any{"auth": map[string]any{"acl": map[string]any{"configMap": "acl"}}}, "not both"},
		"ACL from nowhere":            {map[string]any{"auth": map[string]any{"acl": map[string]any{"secret": ""}}}, "auth.acl.secret or auth.acl.configMap"},
		"backup key without a Secret": {map[string]any{"backupKey": map[string]any{"secret": ""}}, "backupKey.secret"},
		"require a key that is off":   {map[string]any{"backupKey": map[string]any{"enabled": false}}, "requireForRestore"},
		"require without TLS":         {map[string]any{"tls": map[string]any{"enabled": false, "clientAuth": "require"}}, "needs tls.enabled"},
		"backup job without a certificate under require": {map[string]any{
			"tls": map[string]any{"clientAuth": "require"}, "backup": map[string]any{"enabled": true},
		}, "backup.clientCertSecret"},
		"backup job without credentials": {map[string]any{
			"auth": map[string]any{"tokens": map[string]any{"enabled": false}}, "backup": map[string]any{"enabled": true},
		}, "admin credential"},
		"backup token in clear text": {map[string]any{
			"tls": map[string]any{"enabled": false}, "backup": map[string]any{"enabled": true},
		}, "clear text"},
		"backup certificate without TLS": {map[string]any{
			"tls": map[string]any{"enabled": false}, "backup": map[string]any{"enabled": true, "clientCertSecret": "c"},
		}, "needs tls.enabled"},
		"scraping without a certificate under require": {map[string]any{
			"tls": map[string]any{"clientAuth": "require"}, "serviceMonitor": map[string]any{"enabled": true},
		}, "serviceMonitor.clientCertSecret"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render: %v; want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// TestPlainManifests decodes and checks kubernetes/*.yaml: the same
// invariants as the chart's, and every protection of its defaults.
func TestPlainManifests(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	files := map[string][]byte{}
	for _, p := range paths {
		if files[p], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	o := decodeAll(t, files)
	if errs := check(o); len(errs) > 0 {
		t.Fatalf("broken invariants:\n%s", strings.Join(errs, "\n"))
	}
	if errs := checkSecure(o); len(errs) > 0 {
		t.Fatalf("the manifests leave the cluster open:\n%s", strings.Join(errs, "\n"))
	}
	if len(o.cronJobs) != 1 || len(o.serviceMonitors) != 1 {
		t.Fatalf("want the backup CronJob and the ServiceMonitor among the manifests: %d, %d", len(o.cronJobs), len(o.serviceMonitors))
	}
}

// TestStrictDecodeRefusesUnknownFields is the decoder's positive control: a
// misspelt field is an error, not silently dropped.
func TestStrictDecodeRefusesUnknownFields(t *testing.T) {
	doc := []byte("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec:\n  maxUnavailabel: 1\n")
	if err := (&objects{}).add(doc); err == nil || !strings.Contains(err.Error(), "maxUnavailabel") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
	dup := []byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  type: ClusterIP\n  type: NodePort\n")
	if err := (&objects{}).add(dup); err == nil {
		t.Fatal("a duplicate field decoded")
	}
}

// TestChecksCatchBrokenManifests is the checker's positive control: each
// mutation of a good rendering (client certificates required, backup and
// ServiceMonitor on) breaks one invariant, and check says which.
func TestChecksCatchBrokenManifests(t *testing.T) {
	mutations := map[string]struct {
		mutate func(o *objects)
		want   string
	}{
		"even replicas":        {func(o *objects) { n := int32(4); o.statefulSets[0].Spec.Replicas = &n }, "replicas must be odd"},
		"ordered pods":         {func(o *objects) { o.statefulSets[0].Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement }, "Parallel"},
		"on-delete updates":    {func(o *objects) { o.statefulSets[0].Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType }, "RollingUpdate"},
		"no PDB":               {func(o *objects) { o.pdbs = nil }, "no PodDisruptionBudget"},
		"PDB of two":           {func(o *objects) { two := intstr.FromInt32(2); o.pdbs[0].Spec.MaxUnavailable = &two }, "maxUnavailable: 1"},
		"readiness on healthz": {func(o *objects) { probeArgs(fenced(o).ReadinessProbe, "--live") }, "readiness probe asks /healthz"},
		"liveness on readyz":   {func(o *objects) { dropArg(fenced(o).LivenessProbe, "--live") }, "liveness probe asks /readyz"},
		"liveness on raft":     {func(o *objects) { setProbeArg(fenced(o).LivenessProbe, "--endpoints", "https://127.0.0.1:7701") }, "not this pod's http port"},
		"probe on another pod": {func(o *objects) { setProbeArg(fenced(o).ReadinessProbe, "--endpoints", "https://fenced:7700") }, "not this pod's http port"},
		"kubelet HTTPS probe": {func(o *objects) {
			fenced(o).ReadinessProbe.ProbeHandler = corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTPS}}
		}, "must exec /fencectl health"},
		"probe over http":            {func(o *objects) { setProbeArg(fenced(o).ReadinessProbe, "--endpoints", "127.0.0.1:7700") }, "plain http"},
		"probe outwaits the kubelet": {func(o *objects) { setProbeArg(fenced(o).ReadinessProbe, "--timeout", "10s") }, "shorter than its timeoutSeconds"},
		"probe without a certificate": {func(o *objects) {
			setEnv(o, "FENCE_CERT", "")
			setEnv(o, "FENCE_KEY_FILE", "")
		}, "presents no client certificate"},
		"probe without a CA":    {func(o *objects) { setEnv(o, "FENCE_CACERT", "") }, "no CA to verify"},
		"no startup probe":      {func(o *objects) { fenced(o).StartupProbe = nil }, "startup probe"},
		"root pod":              {func(o *objects) { zero := int64(0); podSpec(o).SecurityContext.RunAsUser = &zero }, "non-root"},
		"root container":        {func(o *objects) { zero := int64(0); fenced(o).SecurityContext.RunAsUser = &zero }, "runs as root"},
		"writable root":         {func(o *objects) { f := false; fenced(o).SecurityContext.ReadOnlyRootFilesystem = &f }, "read-only root"},
		"escalation":            {func(o *objects) { fenced(o).SecurityContext.AllowPrivilegeEscalation = nil }, "privilege escalation"},
		"a capability":          {func(o *objects) { fenced(o).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"} }, "capabilities"},
		"no anti-affinity":      {func(o *objects) { podSpec(o).Affinity = nil }, "anti-affinity"},
		"step-down preStop":     {func(o *objects) { fenced(o).Lifecycle.PreStop.Exec.Command = []string{"/fenced", "step-down"} }, "preStop"},
		"ready headless":        {func(o *objects) { headless(o).Spec.PublishNotReadyAddresses = false }, "not-ready addresses"},
		"no client Service":     {func(o *objects) { o.services = []*corev1.Service{headless(o)} }, "client Service"},
		"pattern off by one":    {func(o *objects) { setEnv(o, "FENCED_PEERS_FROM_DNS", "fenced-{0..3}.fenced-headless:7701") }, "within the replicas"},
		"data dir on root":      {func(o *objects) { setEnv(o, "FENCED_DATA_DIR", "/var/lib/fenced") }, "not a mounted volume claim"},
		"no memory limit":       {func(o *objects) { fenced(o).Resources.Limits = nil }, "memory limit"},
		"one certificate":       {func(o *objects) { setEnv(o, "FENCED_PEER_TLS_CERT", "/etc/fenced/peer/tls.crt") }, "its own certificate"},
		"certificate unmounted": {func(o *objects) { setEnv(o, "FENCED_TLS_CERT", "/etc/ssl/$(POD_NAME).crt") }, "not a file of a mounted"},
		"pod name undefined":    {func(o *objects) { setEnv(o, "FENCED_TLS_KEY", "/etc/fenced/http/$(HOSTNAME).key") }, "variable not defined"},
		"tokens in a ConfigMap": {func(o *objects) {
			for i := range podSpec(o).Volumes {
				if p := podSpec(o).Volumes[i].Projected; p != nil {
					p.Sources[0] = corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
						LocalObjectReference: corev1.LocalObjectReference{Name: "t"}, Items: p.Sources[0].Secret.Items}}
				}
			}
		}, "belong in a Secret"},
		"no peer TLS": {func(o *objects) {
			setEnv(o, "FENCED_PEER_TLS_CERT", "")
			setEnv(o, "FENCED_PEER_TLS_KEY", "")
			setEnv(o, "FENCED_PEER_TLS_CA", "")
		}, "no mutual TLS"},
		"raft open to all": {func(o *objects) {
			o.networkPolicies[0].Spec.Ingress[len(o.networkPolicies[0].Spec.Ingress)-1].Ports = nil
		}, "opens the raft port to pods other than"},
		"raft open to everyone": {func(o *objects) { o.networkPolicies[0].Spec.Ingress[0].From = nil }, "opens the raft port to everyone"},
		"raft open to a namespace": {func(o *objects) {
			r := &o.networkPolicies[0].Spec.Ingress[0]
			r.From = append(r.From, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}})
		}, "opens the raft port to pods other than"},
		"raft closed to the nodes": {func(o *objects) {
			o.networkPolicies[0].Spec.Ingress[0].Ports = o.networkPolicies[0].Spec.Ingress[0].Ports[:1]
		}, "cuts the fenced pods off"},
		"backup job shut out": {func(o *objects) { o.networkPolicies[0].Spec.Ingress = o.networkPolicies[0].Spec.Ingress[:1] }, "keeps CronJob"},
		"egress only": {func(o *objects) {
			o.networkPolicies[0].Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		}, "does not restrict ingress"},
		"default service account":  {func(o *objects) { podSpec(o).ServiceAccountName = "" }, "default service-account token"},
		"token left implicit":      {func(o *objects) { podSpec(o).AutomountServiceAccountToken = nil }, "automountServiceAccountToken"},
		"role lists everything":    {func(o *objects) { o.roles[0].Rules[0].Verbs = []string{"get", "list"} }, "only get on statefulsets/fenced"},
		"role for any StatefulSet": {func(o *objects) { o.roles[0].Rules[0].ResourceNames = nil }, "only get on statefulsets/fenced"},
		"role unbound":             {func(o *objects) { o.roleBindings = nil }, "may not get StatefulSet"},
		"backup job without the key": {func(o *objects) {
			c := &o.cronJobs[0].Spec.JobTemplate.Spec.Template.Spec.Containers[0]
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.Contains(a, "backup-key") })
		}, "unauthenticated backups"},
		"backup job without a certificate": {func(o *objects) {
			o.cronJobs[0].Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env = o.cronJobs[0].Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env[:1]
		}, "presents no"},
		"backup job takes node keys": {func(o *objects) {
			for i := range o.cronJobs[0].Spec.JobTemplate.Spec.Template.Spec.Volumes {
				if s := o.cronJobs[0].Spec.JobTemplate.Spec.Template.Spec.Volumes[i].Secret; s != nil && s.SecretName == "fenced-http-tls" {
					s.Items = nil
				}
			}
		}, "nodes' private keys"},
		"backup job as a node": {func(o *objects) {
			o.cronJobs[0].Spec.JobTemplate.Spec.Template.Labels = o.statefulSets[0].Spec.Template.Labels
		}, "carry the fenced pods' labels"},
		"monitor scrapes twice": {func(o *objects) {
			delete(o.serviceMonitors[0].Spec.Selector.MatchLabels, "app.kubernetes.io/component")
		}, "exactly one Service"},
		"monitor checks no name":        {func(o *objects) { o.serviceMonitors[0].Spec.Endpoints[0].TLSConfig.ServerName = "" }, "serverName"},
		"monitor without a certificate": {func(o *objects) { o.serviceMonitors[0].Spec.Endpoints[0].TLSConfig.Cert = nil }, "must present one"},
	}
	for name, m := range mutations {
		t.Run(name, func(t *testing.T) {
			files, err := render(t, requireTLS)
			if err != nil {
				t.Fatal(err)
			}
			o := decodeAll(t, manifests(files))
			if errs := check(o); len(errs) > 0 {
				t.Fatalf("the good rendering fails: %v", errs)
			}
			m.mutate(o)
			errs := check(o)
			if !bytes.Contains([]byte(strings.Join(errs, "\n")), []byte(m.want)) {
				t.Fatalf("check found %q; want a failure mentioning %q", errs, m.want)
			}
		})
	}
}

// TestCheckSecureCatchesOpenings is checkSecure's positive control: each
// protection switched off in the defaults' rendering is reported.
func TestCheckSecureCatchesOpenings(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"no TLS":             {map[string]any{"tls": map[string]any{"enabled": false}}, "FENCED_TLS_CERT is not set"},
		"no client certs":    {map[string]any{"tls": map[string]any{"clientAuth": "none"}}, "FENCED_TLS_CLIENT_AUTH none"},
		"no tokens":          {map[string]any{"auth": map[string]any{"tokens": map[string]any{"enabled": false}}}, "FENCED_AUTH_TOKENS"},
		"no ACL":             {map[string]any{"auth": map[string]any{"acl": map[string]any{"enabled": false}}}, "FENCED_ACL_FILE"},
		"no backup key":      {map[string]any{"backupKey": map[string]any{"enabled": false, "requireForRestore": false}}, "FENCED_BACKUP_KEY_FILE"},
		"restore unsigned":   {map[string]any{"backupKey": map[string]any{"requireForRestore": false}}, "FENCED_REQUIRE_BACKUP_AUTH"},
		"no NetworkPolicy":   {map[string]any{"networkPolicy": map[string]any{"enabled": false}}, "no NetworkPolicy"},
		"no scale-down hook": {map[string]any{"scaleDown": map[string]any{"removeMembers": false}}, "cannot remove a member"},
	} {
		t.Run(name, func(t *testing.T) {
			files, err := render(t, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			o := decodeAll(t, manifests(files))
			if errs := check(o); len(errs) > 0 {
				t.Fatalf("broken invariants: %v", errs)
			}
			if errs := checkSecure(o); !strings.Contains(strings.Join(errs, "\n"), tc.want) {
				t.Fatalf("checkSecure found %q; want %q", errs, tc.want)
			}
		})
	}
}

// probeArgs appends args to a probe's command.
func probeArgs(p *corev1.Probe, args ...string) { p.Exec.Command = append(p.Exec.Command, args...) }

// dropArg removes an argument from a probe's command.
func dropArg(p *corev1.Probe, arg string) {
	p.Exec.Command = slices.DeleteFunc(p.Exec.Command, func(a string) bool { return a == arg })
}

// setProbeArg sets the value of a flag of a probe's command.
func setProbeArg(p *corev1.Probe, flag, value string) {
	for i := range p.Exec.Command {
		if p.Exec.Command[i] == flag && i+1 < len(p.Exec.Command) {
			p.Exec.Command[i+1] = value
		}
	}
}

func podSpec(o *objects) *corev1.PodSpec  { return &o.statefulSets[0].Spec.Template.Spec }
func fenced(o *objects) *corev1.Container { return container(podSpec(o).Containers, "fenced") }

func headless(o *objects) *corev1.Service {
	for _, s := range o.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			return s
		}
	}
	return nil
}

func setEnv(o *objects, name, value string) {
	c := fenced(o)
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
		}
	}
}
