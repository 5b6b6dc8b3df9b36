{{/*
A container. Called with (dict "root" $ "name" NAME ["env" MAP]): image.repository is required,
image.tag defaults to the chart version; port, env (unless given) and resources come from the
chart's values.
*/}}
{{- define "demo-lib.container" -}}
{{- $values := .root.Values -}}
- name: {{ .name }}
  image: {{ printf "%s:%s" (required "image.repository is required" $values.image.repository) ($values.image.tag | default .root.Chart.Version | toString) | quote }}
  ports:
    - name: http
      containerPort: {{ $values.port | default 8080 }}
  {{- with (.env | default $values.env) }}
  env:
    {{- range $name, $value := . }}
    - name: {{ $name }}
      value: {{ $value | quote }}
    {{- end }}
  {{- end }}
  {{- with $values.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
