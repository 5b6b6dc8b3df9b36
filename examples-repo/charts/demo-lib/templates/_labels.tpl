{{/*
The labels a selector uses: stable across upgrades. Armada's `wait.labels` select on
app.kubernetes.io/instance, which is the release name (`<release_prefix>-<release>`).
*/}}
{{- define "demo-lib.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
Every object's labels.
*/}}
{{- define "demo-lib.labels" -}}
{{ include "demo-lib.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.Version | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
{{- end -}}
