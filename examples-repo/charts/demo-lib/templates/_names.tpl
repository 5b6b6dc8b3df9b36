{{/*
The objects' name: the release name when it already contains the chart name (demo-api), else
<release>-<chart>; at most 63 characters, as Kubernetes names must be.
*/}}
{{- define "demo-lib.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
