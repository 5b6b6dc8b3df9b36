{{- define "api.labels" -}}
{{ include "demo-lib.labels" . }}
app.kubernetes.io/component: api
{{- end -}}
