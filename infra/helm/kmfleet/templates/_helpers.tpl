{{/* Names: <release>-kmfleet unless the release is already called kmfleet-something. */}}
{{- define "kmfleet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; workloads and their pods add kmfleet.selector (which names the instance). */}}
{{- define "kmfleet.labels" -}}
app.kubernetes.io/part-of: kmfleet
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Labels of an object that has no selector labels of its own. */}}
{{- define "kmfleet.objectLabels" -}}
{{ include "kmfleet.labels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "worker-cpu") */}}
{{- define "kmfleet.selector" -}}
app.kubernetes.io/name: kmfleet
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kmfleet.image" -}}
{{- if .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) }}{{ fail "image.digest must be sha256:<64 hex digits>" }}{{ end -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{- $tag := toString (required "image.tag is required: pin a version (or set image.digest)" .Values.image.tag) -}}
{{- if eq $tag "latest" }}{{ fail "image.tag latest is not allowed: pin a version or a digest" }}{{ end -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{- define "kmfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kmfleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kmfleet.redisUrl" -}}
{{- if eq .Values.redis.mode "internal" -}}
redis://{{ include "kmfleet.fullname" . }}-redis:6379
{{- else if eq .Values.redis.mode "external" -}}
{{- $url := required "redis.external.url is required with redis.mode external" .Values.redis.external.url -}}
{{- if regexMatch "^rediss?://[^/@]*:[^/@]*@" $url -}}
{{- fail "redis.external.url must not carry a password: put it in the Secret redis.passwordSecret names" -}}
{{- end -}}
{{- $url -}}
{{- else -}}
{{- fail "redis.mode must be internal or external" -}}
{{- end -}}
{{- end -}}

{{/* The Redis password from its Secret (REDIS_PASSWORD: producer/connection.ts). */}}
{{- define "kmfleet.redisPasswordEnv" -}}
{{- if .Values.redis.passwordSecret.name }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.passwordSecret.name }}
      key: {{ .Values.redis.passwordSecret.key }}
{{- else if eq .Values.redis.mode "internal" }}
{{- fail "redis.passwordSecret.name is required with the in-cluster Redis (it runs with requirepass)" }}
{{- end }}
{{- end -}}

{{- define "kmfleet.s3Env" -}}
{{- if .Values.s3.credentialsSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .Values.s3.credentialsSecret }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.s3.credentialsSecret }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}
{{- end -}}

{{/* Host names a Service of this release answers to: for --allowed-host. (dict "root" $ "name" "...-dashboard") */}}
{{- define "kmfleet.serviceHosts" -}}
{{- $ns := .root.Release.Namespace -}}
{{- range list .name (printf "%s.%s" .name $ns) (printf "%s.%s.svc" .name $ns) (printf "%s.%s.svc.cluster.local" .name $ns) }}
- --allowed-host
- {{ . }}
{{- end }}
{{- end -}}
