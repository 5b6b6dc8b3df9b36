{{/* The labels every object carries (as deploy/'s manifests). */}}
{{- define "weft.labels" -}}
app.kubernetes.io/name: weft
{{- end }}

{{/* The ServiceAccount as an RBAC subject. */}}
{{- define "weft.subject" -}}
- kind: ServiceAccount
  name: {{ .Values.name }}
  namespace: {{ .Values.namespace }}
{{- end }}

{{/* The verbs of a kind Weft applies, prunes and watches. */}}
{{- define "weft.writeVerbs" -}}
["get", "list", "watch", "create", "update", "patch", "delete"]
{{- end }}
