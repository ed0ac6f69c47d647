{{- define "rlscore.labels" -}}
app.kubernetes.io/part-of: rlscore
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "rlscore.serverURL" -}}
{{ if .Values.tls.enabled }}https{{ else }}http{{ end }}://rlscore-suggestion-server.{{ .Release.Namespace }}.svc:8000/suggest
{{- end }}

{{- define "rlscore.prometheusURL" -}}
{{ if .Values.prometheus.enabled }}http://rlscore-prometheus.{{ .Release.Namespace }}.svc:9090{{ else }}{{ .Values.prometheusURL }}{{ end }}
{{- end }}

{{- define "rlscore.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end }}

{{- /* one of rlscore's own images: <images.registry>/<name:tag> */ -}}
{{- define "rlscore.image" -}}
{{ trimSuffix "/" .root.Values.images.registry }}/{{ index .root.Values.images .name }}
{{- end }}

{{- /* what the Ray head and workers share: a token-less account, non-root, RuntimeDefault seccomp */ -}}
{{- define "rlscore.rayPod" -}}
serviceAccountName: rlscore-ray
automountServiceAccountToken: false
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile: {type: RuntimeDefault}
{{- end }}
