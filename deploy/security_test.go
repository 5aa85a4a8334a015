package deploy

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The checks of this file are about what protects a cluster: the
// certificates and secrets every pod reads, probes that get through the
// API's TLS, the NetworkPolicy, the service account of the preStop hook
// and the backup job's credentials. checkSecure says whether a manifest
// set has every protection on, as the chart's defaults and the plain
// manifests must.

// fileVars are the variables of the fenced container that name a file.
var fileVars = []string{
	"FENCED_TLS_CERT", "FENCED_TLS_KEY", "FENCED_TLS_CA",
	"FENCED_PEER_TLS_CERT", "FENCED_PEER_TLS_KEY", "FENCED_PEER_TLS_CA",
	"FENCED_AUTH_TOKENS", "FENCED_ACL_FILE", "FENCED_BACKUP_KEY_FILE",
	"FENCE_CACERT", "FENCE_CERT", "FENCE_KEY_FILE",
}

// secretVars name files that must come from a Secret, never a ConfigMap.
var secretVars = []string{
	"FENCED_TLS_KEY", "FENCED_PEER_TLS_KEY", "FENCED_AUTH_TOKENS", "FENCED_BACKUP_KEY_FILE", "FENCE_KEY_FILE",
}

// podEnv resolves a container's environment as the kubelet does for the pod
// named pod: the field metadata.name is the pod's name, a secretKeyRef is
// marked as such, and $(VAR) expands a variable defined earlier in the
// list ($$ is a literal $; an unknown reference stays as written).
func podEnv(c *corev1.Container, pod string) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = pod
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = fmt.Sprintf("<secret %s/%s>", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
		default:
			env[e.Name] = "<unresolved>"
		}
	}
	return env
}

func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "$$"):
			b.WriteByte('$')
			i++
		case strings.HasPrefix(s[i:], "$("):
			if end := strings.IndexByte(s[i:], ')'); end > 0 {
				if v, ok := env[s[i+2:i+end]]; ok {
					b.WriteString(v)
					i += end
					continue
				}
			}
			b.WriteByte(s[i])
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// source is where a mounted file comes from.
type source struct {
	kind, name, key string // "Secret" or "ConfigMap", its name, the key
	readOnly        bool
	allKeys         bool // every key of the object is mounted, not chosen items
}

func (s source) String() string { return fmt.Sprintf("%s %s key %s", s.kind, s.name, s.key) }

// mountedFile finds the Secret or ConfigMap key that path is in container c
// of pod p.
func mountedFile(p *corev1.PodSpec, c *corev1.Container, path string) (source, bool) {
	for _, vm := range c.VolumeMounts {
		rel, found := strings.CutPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !found || vm.SubPath != "" || vm.SubPathExpr != "" {
			continue
		}
		for _, v := range p.Volumes {
			if v.Name != vm.Name {
				continue
			}
			var projections []corev1.VolumeProjection
			switch {
			case v.Secret != nil:
				projections = []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{
					LocalObjectReference: corev1.LocalObjectReference{Name: v.Secret.SecretName}, Items: v.Secret.Items}}}
			case v.ConfigMap != nil:
				projections = []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{
					LocalObjectReference: v.ConfigMap.LocalObjectReference, Items: v.ConfigMap.Items}}}
			case v.Projected != nil:
				projections = v.Projected.Sources
			}
			for _, pr := range projections {
				var s source
				var items []corev1.KeyToPath
				switch {
				case pr.Secret != nil:
					s, items = source{kind: "Secret", name: pr.Secret.Name}, pr.Secret.Items
				case pr.ConfigMap != nil:
					s, items = source{kind: "ConfigMap", name: pr.ConfigMap.Name}, pr.ConfigMap.Items
				default:
					continue
				}
				s.readOnly = vm.ReadOnly
				if len(items) == 0 {
					s.key, s.allKeys = rel, true
					return s, true
				}
				for _, it := range items {
					if it.Path == rel {
						s.key = it.Key
						return s, true
					}
				}
			}
		}
	}
	return source{}, false
}

// podNames are the pods checked for per-pod settings: the first and the last.
func podNames(sts *appsv1.StatefulSet) []string {
	n := int32(1)
	if sts.Spec.Replicas != nil {
		n = *sts.Spec.Replicas
	}
	return []string{sts.Name + "-0", fmt.Sprintf("%s-%d", sts.Name, n-1)}
}

// checkCredentials: every file the fenced container is pointed at is a key
// of a Secret (or, for the ACL, a ConfigMap) mounted read-only, resolved for
// each pod; each pod reads its own certificates, named after it; peer TLS
// goes with API TLS.
func checkCredentials(sts *appsv1.StatefulSet, fail func(string, ...any)) {
	pod := &sts.Spec.Template.Spec
	c := container(pod.Containers, "fenced")
	if c == nil {
		return
	}
	for _, name := range podNames(sts) {
		env := podEnv(c, name)
		for _, v := range fileVars {
			path := env[v]
			if path == "" {
				continue
			}
			src, ok := mountedFile(pod, c, path)
			switch {
			case strings.Contains(path, "$("):
				fail("%s %q of pod %s refers to a variable not defined before it", v, path, name)
			case !ok:
				fail("%s %q of pod %s is not a file of a mounted Secret or ConfigMap", v, path, name)
			case !src.readOnly:
				fail("%s %q of pod %s is on a writable mount", v, path, name)
			case src.kind != "Secret" && slices.Contains(secretVars, v):
				fail("%s of pod %s comes from %s: keys, tokens and backup keys belong in a Secret", v, name, src)
			}
		}
		for v, suffix := range map[string]string{
			"FENCED_TLS_CERT": ".crt", "FENCED_TLS_KEY": ".key", "FENCED_PEER_TLS_CERT": ".crt", "FENCED_PEER_TLS_KEY": ".key",
		} {
			if path := env[v]; path != "" {
				if src, ok := mountedFile(pod, c, path); ok && src.key != name+suffix {
					fail("%s of pod %s is %s, not %s%s: every pod needs its own certificate (its CN is the node id)", v, name, src, name, suffix)
				}
			}
		}
	}
	env := podEnv(c, sts.Name+"-0")
	peer := 0
	for _, v := range []string{"FENCED_PEER_TLS_CERT", "FENCED_PEER_TLS_KEY", "FENCED_PEER_TLS_CA"} {
		if env[v] != "" {
			peer++
		}
	}
	switch {
	case peer != 0 && peer != 3:
		fail("peer TLS needs FENCED_PEER_TLS_CERT, _KEY and _CA together")
	case env["FENCED_TLS_CERT"] != "" && peer == 0:
		fail("the API serves TLS but the Raft port has no mutual TLS (FENCED_PEER_TLS_*): any pod that reaches it can join")
	}
}

// fencectlArgs reads the flags of a fencectl command line.
func fencectlArgs(args []string) map[string]string {
	bools := map[string]bool{"--live": true}
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			out[""] = strings.TrimSpace(out[""] + " " + a)
			continue
		}
		if k, v, ok := strings.Cut(a, "="); ok {
			out[k] = v
		} else if bools[a] {
			out[a] = "true"
		} else if i+1 < len(args) {
			out[a] = args[i+1]
			i++
		}
	}
	return out
}

// checkProbe: the probe runs fencectl health in the container, against its
// own node's http port: --live (/healthz) for liveness and startup, /readyz
// for readiness. It speaks the API's protocol: https with the CA when the
// API serves TLS, and with a client certificate when the API requires one
// (the kubelet's own HTTPS probes present none, so such a pod would never
// be ready). fencectl gives up before the kubelet does.
func checkProbe(kind string, p *corev1.Probe, live bool, sts *appsv1.StatefulSet, c *corev1.Container, fail func(string, ...any)) {
	if p == nil || p.Exec == nil || len(p.Exec.Command) < 2 || p.Exec.Command[0] != "/fencectl" || p.Exec.Command[1] != "health" {
		fail("the %s probe must exec /fencectl health", kind)
		return
	}
	flags := fencectlArgs(p.Exec.Command[2:])
	path := map[bool]string{true: "/healthz", false: "/readyz"}
	if asks := flags["--live"] == "true"; asks != live {
		fail("the %s probe asks %s, want %s", kind, path[asks], path[live])
	}
	httpPort := int32(0)
	for _, cp := range c.Ports {
		if cp.Name == "http" {
			httpPort = cp.ContainerPort
		}
	}
	ep := flags["--endpoints"]
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" {
		u, err = url.Parse("none://" + ep)
	}
	if err != nil || ep == "" || strings.Contains(ep, ",") {
		fail("the %s probe must ask one endpoint, not %q", kind, ep)
		return
	}
	if port, _ := strconv.Atoi(u.Port()); int32(port) != httpPort || !slices.Contains([]string{"127.0.0.1", "localhost", "::1"}, u.Hostname()) {
		fail("the %s probe asks %s, not this pod's http port %d", kind, ep, httpPort)
	}
	timeout, err := time.ParseDuration(flags["--timeout"])
	if err != nil || p.TimeoutSeconds < 1 || timeout >= time.Duration(p.TimeoutSeconds)*time.Second {
		fail("the %s probe's fencectl --timeout %q must be shorter than its timeoutSeconds %d", kind, flags["--timeout"], p.TimeoutSeconds)
	}
	env := podEnv(c, sts.Name+"-0")
	if env["FENCED_TLS_CERT"] == "" {
		return
	}
	if u.Scheme != "https" {
		fail("the %s probe asks %s over plain http, but the API serves TLS", kind, ep)
	}
	pick := func(flag, v string) string {
		if f := flags[flag]; f != "" {
			return f
		}
		return env[v]
	}
	if _, ok := mountedFile(&sts.Spec.Template.Spec, c, pick("--cacert", "FENCE_CACERT")); !ok {
		fail("the %s probe has no CA to verify the node's certificate with (--cacert or FENCE_CACERT)", kind)
	}
	if env["FENCED_TLS_CLIENT_AUTH"] == "require" {
		_, cert := mountedFile(&sts.Spec.Template.Spec, c, pick("--cert", "FENCE_CERT"))
		_, key := mountedFile(&sts.Spec.Template.Spec, c, pick("--key", "FENCE_KEY_FILE"))
		if !cert || !key {
			fail("the %s probe presents no client certificate, but the API requires one (clientAuth require): the pod would never be ready", kind)
		}
	}
}

// allowsPort reports whether a NetworkPolicy rule's ports let port (a
// container port, by name or number) in. No ports means every port.
func allowsPort(ports []networkingv1.NetworkPolicyPort, name string, number int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String && p.Port.StrVal == name:
			return true
		case p.Port.Type == intstr.Int && (p.Port.IntVal == number || (p.EndPort != nil && p.Port.IntVal <= number && number <= *p.EndPort)):
			return true
		}
	}
	return false
}

// onlyPodsWith reports whether a NetworkPolicy peer admits only pods of the
// policy's namespace that carry every label of want.
func onlyPodsWith(peer networkingv1.NetworkPolicyPeer, want map[string]string) bool {
	if peer.NamespaceSelector != nil || peer.IPBlock != nil || peer.PodSelector == nil {
		return false
	}
	for k, v := range want {
		if peer.PodSelector.MatchLabels[k] != v {
			return false
		}
	}
	return true
}

// checkNetworkPolicies: if NetworkPolicies select the fenced pods, the Raft
// port is open to the release's fenced pods only, the nodes still reach each
// other on both ports, and the backup job reaches the API.
func checkNetworkPolicies(o *objects, fail func(string, ...any)) {
	sts := o.statefulSets[0]
	podLabels, self := sts.Spec.Template.Labels, sts.Spec.Selector.MatchLabels
	ports := map[string]int32{}
	if c := container(sts.Spec.Template.Spec.Containers, "fenced"); c != nil {
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
	}
	var selecting []*networkingv1.NetworkPolicy
	for _, np := range o.networkPolicies {
		if selects(&np.Spec.PodSelector, podLabels) {
			selecting = append(selecting, np)
		}
	}
	if len(selecting) == 0 {
		return
	}
	peerRaft, peerHTTP := false, false
	from := func(rule networkingv1.NetworkPolicyIngressRule, labels map[string]string) bool {
		for _, p := range rule.From {
			if p.PodSelector != nil && p.NamespaceSelector == nil && p.IPBlock == nil && selectsMap(p.PodSelector.MatchLabels, labels) {
				return true
			}
		}
		return false
	}
	for _, np := range selecting {
		ingress := len(np.Spec.PolicyTypes) == 0
		for _, t := range np.Spec.PolicyTypes {
			ingress = ingress || t == networkingv1.PolicyTypeIngress
		}
		if !ingress {
			fail("NetworkPolicy %s does not restrict ingress", np.Name)
		}
		for i, rule := range np.Spec.Ingress {
			raft := allowsPort(rule.Ports, "raft", ports["raft"])
			if raft && len(rule.From) == 0 {
				fail("NetworkPolicy %s rule %d opens the raft port to everyone: only the release's fenced pods may reach it", np.Name, i)
			}
			for _, p := range rule.From {
				if raft && !onlyPodsWith(p, self) {
					fail("NetworkPolicy %s rule %d opens the raft port to pods other than the release's fenced pods", np.Name, i)
				}
			}
			if from(rule, podLabels) {
				peerRaft = peerRaft || raft
				peerHTTP = peerHTTP || allowsPort(rule.Ports, "http", ports["http"])
			}
		}
	}
	if !peerRaft || !peerHTTP {
		fail("the NetworkPolicy cuts the fenced pods off from each other: they need the raft and http ports (Raft, forwarding, joining)")
	}
	for _, cj := range o.cronJobs {
		labels := cj.Spec.JobTemplate.Spec.Template.Labels
		reached := false
		for _, np := range selecting {
			for _, rule := range np.Spec.Ingress {
				reached = reached || (from(rule, labels) && allowsPort(rule.Ports, "http", ports["http"]))
			}
		}
		if !reached {
			fail("the NetworkPolicy keeps CronJob %s from the API", cj.Name)
		}
	}
}

// checkServiceAccount: a fenced pod that mounts a service-account token
// gets only what the preStop hook needs: get on its own StatefulSet.
func checkServiceAccount(o *objects, fail func(string, ...any)) {
	sts := o.statefulSets[0]
	pod := sts.Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil {
		fail("the pod must say whether it mounts a service-account token (automountServiceAccountToken)")
		return
	}
	if !*pod.AutomountServiceAccountToken {
		return
	}
	if pod.ServiceAccountName == "" || pod.ServiceAccountName == "default" {
		fail("the pod mounts the namespace's default service-account token: give it an account of its own")
		return
	}
	mayGet := false
	for _, rb := range o.roleBindings {
		bound := false
		for _, s := range rb.Subjects {
			bound = bound || (s.Kind == "ServiceAccount" && s.Name == pod.ServiceAccountName)
		}
		if !bound {
			continue
		}
		if rb.RoleRef.Kind != "Role" {
			fail("RoleBinding %s binds the pods' account to a %s: only a Role of the namespace", rb.Name, rb.RoleRef.Kind)
			continue
		}
		for _, r := range o.roles {
			if r.Name != rb.RoleRef.Name {
				continue
			}
			for _, rule := range r.Rules {
				exact := slices.Equal(rule.APIGroups, []string{"apps"}) && slices.Equal(rule.Resources, []string{"statefulsets"}) &&
					slices.Equal(rule.ResourceNames, []string{sts.Name}) && slices.Equal(rule.Verbs, []string{"get"}) && len(rule.NonResourceURLs) == 0
				if !exact {
					fail("Role %s grants the pods %v on %v %v %v: only get on statefulsets/%s", r.Name, rule.Verbs, rule.APIGroups, rule.Resources, rule.ResourceNames, sts.Name)
				}
				mayGet = mayGet || exact
			}
		}
	}
	if !mayGet {
		fail("the pods mount a service-account token that may not get StatefulSet %s: the preStop hook cannot tell a scale-down", sts.Name)
	}
}

// checkBackupJob: the job's pods are not taken for fenced pods, it reaches
// the API with the protocol and credentials the API asks for (an admin's,
// and no node key), and it checks every backup against the cluster's key.
func checkBackupJob(o *objects, cj *batchv1.CronJob, fail func(string, ...any)) {
	sts := o.statefulSets[0]
	tmpl := cj.Spec.JobTemplate.Spec.Template
	if selects(sts.Spec.Selector, tmpl.Labels) {
		fail("CronJob %s's pods carry the fenced pods' labels: Services and the PodDisruptionBudget would take them for nodes", cj.Name)
	}
	for _, s := range o.services {
		if selectsMap(s.Spec.Selector, tmpl.Labels) {
			fail("Service %s selects CronJob %s's pods", s.Name, cj.Name)
		}
	}
	c := container(tmpl.Spec.Containers, "backup")
	if c == nil {
		fail("CronJob %s has no container named backup", cj.Name)
		return
	}
	flags := fencectlArgs(append(slices.Clone(c.Command[1:]), c.Args...))
	env := podEnv(c, cj.Name)
	nodes := podEnv(container(sts.Spec.Template.Spec.Containers, "fenced"), sts.Name+"-0")
	pod := &tmpl.Spec
	nodePod := &sts.Spec.Template.Spec
	nodeC := container(nodePod.Containers, "fenced")
	if nodes["FENCED_BACKUP_KEY_FILE"] != "" {
		want, _ := mountedFile(nodePod, nodeC, nodes["FENCED_BACKUP_KEY_FILE"])
		got, ok := mountedFile(pod, c, flags["--backup-key-file"])
		if !ok || got.kind != want.kind || got.name != want.name || got.key != want.key {
			fail("CronJob %s does not check its backups against the cluster's key (%s): it would keep unauthenticated backups", cj.Name, want)
		}
	}
	tlsOn := nodes["FENCED_TLS_CERT"] != ""
	if tlsOn {
		if !strings.HasPrefix(flags["--endpoints"], "https://") {
			fail("CronJob %s asks %s over plain http, but the API serves TLS", cj.Name, flags["--endpoints"])
		}
		if _, ok := mountedFile(pod, c, env["FENCE_CACERT"]); !ok {
			fail("CronJob %s has no CA to verify the nodes' certificates with", cj.Name)
		}
	}
	_, cert := mountedFile(pod, c, env["FENCE_CERT"])
	_, key := mountedFile(pod, c, env["FENCE_KEY_FILE"])
	token := strings.HasPrefix(env["FENCE_AUTH_TOKEN"], "<secret ")
	authOn := nodes["FENCED_AUTH_TOKENS"] != "" || (tlsOn && nodes["FENCED_TLS_CLIENT_AUTH"] != "none")
	switch {
	case authOn && !(cert && key) && !token:
		fail("CronJob %s presents no credential (a token from a Secret, or a client certificate): the API would refuse it", cj.Name)
	case nodes["FENCED_TLS_CLIENT_AUTH"] == "require" && !(cert && key):
		fail("CronJob %s presents no client certificate, but the API requires one", cj.Name)
	}
	// A node's key in the job would let it pass as that node.
	for _, v := range pod.Volumes {
		if v.Secret != nil && len(v.Secret.Items) == 0 {
			for _, name := range []string{"FENCED_TLS_KEY", "FENCED_PEER_TLS_KEY"} {
				if src, ok := mountedFile(nodePod, nodeC, nodes[name]); ok && src.name == v.Secret.SecretName {
					fail("CronJob %s mounts every key of Secret %s, the nodes' private keys among them", cj.Name, src.name)
				}
			}
		}
	}
}

// checkSecure returns what a manifest set leaves unprotected: the
// protections the chart's defaults and the plain manifests must all have.
func checkSecure(o *objects) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if len(o.statefulSets) != 1 {
		return []string{"want one StatefulSet"}
	}
	sts := o.statefulSets[0]
	env := podEnv(container(sts.Spec.Template.Spec.Containers, "fenced"), sts.Name+"-0")
	for v, why := range map[string]string{
		"FENCED_TLS_CERT":        "the API is not served over TLS",
		"FENCED_PEER_TLS_CERT":   "the Raft port has no mutual TLS",
		"FENCED_AUTH_TOKENS":     "no bearer tokens: authentication rests on client certificates alone",
		"FENCED_ACL_FILE":        "no key ACL: every client may use every key",
		"FENCED_BACKUP_KEY_FILE": "backups are not authenticated",
	} {
		if env[v] == "" {
			fail("%s is not set: %s", v, why)
		}
	}
	if env["FENCED_TLS_CLIENT_AUTH"] == "none" {
		fail("FENCED_TLS_CLIENT_AUTH none: client certificates are not accepted")
	}
	if env["FENCED_REQUIRE_BACKUP_AUTH"] != "true" {
		fail("FENCED_REQUIRE_BACKUP_AUTH is not true: an unauthenticated backup could be restored")
	}
	np := false
	for _, p := range o.networkPolicies {
		np = np || selects(&p.Spec.PodSelector, sts.Spec.Template.Labels)
	}
	if !np {
		fail("no NetworkPolicy selects the fenced pods: every pod can reach the Raft port")
	}
	if a := sts.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
		fail("the pods mount no service-account token: the preStop hook cannot remove a member on scale-down")
	}
	return errs
}
