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
{{- if or $root.Values.namespaced (eq $root.Values.namespace "weft-system") -}}
{{ $name }}
{{- else -}}
{{ printf "%s:%s" $name $root.Values.namespace }}
{{- end -}}
{{- end }}

{{/* A tier's role: a ClusterRole, or with `namespaced` a Role in Weft's namespace (as `weft
     install --namespaced` renders it). */}}
{{- define "weft.roleKind" -}}
{{- if .Values.namespaced }}Role{{ else }}ClusterRole{{ end -}}
{{- end }}

{{- define "weft.bindingKind" -}}
{{- if .Values.namespaced }}RoleBinding{{ else }}ClusterRoleBinding{{ end -}}
{{- end }}

{{/* The metadata.namespace line of a tier's role or binding: only when `namespaced`. */}}
{{- define "weft.roleNamespace" -}}
{{- if .Values.namespaced }}
namespace: {{ .Values.namespace }}
{{- end }}
{{- end }}
