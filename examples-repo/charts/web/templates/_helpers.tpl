{{- define "web.labels" -}}
{{ include "demo-lib.labels" . }}
app.kubernetes.io/component: frontend
{{- end -}}
