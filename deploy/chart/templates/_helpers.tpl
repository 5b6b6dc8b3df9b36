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

{{/* The name of a cluster-scoped RBAC object: `<name>-<tier>`, and `:<namespace>` outside
     weft-system (as `weft install --namespace` names them), so two installations do not share. */}}
{{- define "weft.clusterName" -}}
{{- $root := index . 0 -}}
{{- $name := printf "%s-%s" $root.Values.name (index . 1) -}}
{{- if eq $root.Values.namespace "weft-system" -}}
{{ $name }}
{{- else -}}
{{ printf "%s:%s" $name $root.Values.namespace }}
{{- end -}}
{{- end }}
