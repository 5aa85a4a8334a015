{{/* The name of every object of the release. */}}
{{- define "fenced.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fenced.headless" -}}
{{- printf "%s-headless" (include "fenced.fullname" .) -}}
{{- end -}}

{{- define "fenced.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fenced.labels" -}}
{{ include "fenced.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The DNS pattern of the bootstrap members: NAME-{0..N-1}.HEADLESS:RAFT. */}}
{{- define "fenced.peersFromDNS" -}}
{{- printf "%s-{0..%d}.%s:%d" (include "fenced.fullname" .) (sub (int .Values.bootstrapReplicas) 1) (include "fenced.headless" .) (int .Values.ports.raft) -}}
{{- end -}}

{{/* The labels of the backup job's pods: not the fenced pods' selector. */}}
{{- define "fenced.backupSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-backup
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* "true" when the API authenticates clients: tokens, or client certificates. */}}
{{- define "fenced.authOn" -}}
{{- if or .Values.auth.tokens.enabled (and .Values.tls.enabled (ne .Values.tls.clientAuth "none")) }}true{{ end -}}
{{- end -}}

{{/* The address a container of a pod reaches its own node's API at. */}}
{{- define "fenced.localEndpoint" -}}
{{- if .Values.tls.enabled }}https://{{ end }}127.0.0.1:{{ .Values.ports.http -}}
{{- end -}}

{{/* The address the backup job reaches the cluster at: the client Service. */}}
{{- define "fenced.serviceEndpoint" -}}
{{- if .Values.tls.enabled }}https://{{ end }}{{ include "fenced.fullname" . }}:{{ .Values.ports.http -}}
{{- end -}}
