{{- define "mcpcache.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mcpcache.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* The chart's labels, and commonLabels beside them (which cannot replace them). */ -}}
{{- define "mcpcache.labels" -}}
{{- $chart := dict
  "app.kubernetes.io/name" (include "mcpcache.name" .)
  "app.kubernetes.io/instance" .Release.Name
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/managed-by" .Release.Service
  "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version) -}}
{{- toYaml (merge $chart (.Values.commonLabels | default dict)) -}}
{{- end -}}

{{- define "mcpcache.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcpcache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "mcpcache.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-operator" (include "mcpcache.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* The image by its digest when one is given (it wins over the tag), else by its tag. */ -}}
{{- define "mcpcache.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- /* The same image, unless sidecar.image names another repository or tag. */ -}}
{{- define "mcpcache.sidecarImage" -}}
{{- if or .Values.sidecar.image.repository .Values.sidecar.image.tag -}}
{{- $repository := default .Values.image.repository .Values.sidecar.image.repository -}}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) .Values.sidecar.image.tag -}}
{{- printf "%s:%s" $repository $tag -}}
{{- else -}}
{{- include "mcpcache.image" . -}}
{{- end -}}
{{- end -}}

{{- /* runAsUser and runAsGroup, or neither when securityContext.runAsUser is null: the
platform assigns them (OpenShift's restricted-v2). 65532 (the image's user) where the
values have no securityContext at all, as a release of an earlier chart has. */ -}}
{{- define "mcpcache.runAsUser" -}}
{{- $user := 65532 -}}
{{- if hasKey .Values "securityContext" -}}
{{- $user = .Values.securityContext.runAsUser -}}
{{- end -}}
{{- if $user -}}
runAsUser: {{ $user }}
runAsGroup: {{ $user }}
{{- end -}}
{{- end -}}

{{- define "mcpcache.webhookService" -}}
{{- printf "%s-webhook" (include "mcpcache.fullname" .) -}}
{{- end -}}

{{- /* The Lease the operator's replicas elect their reconciler with, in the release's namespace. */ -}}
{{- define "mcpcache.leaseName" -}}
{{- printf "%s-operator" (include "mcpcache.fullname" .) -}}
{{- end -}}

{{- /* The sidecar's user for the operator to inject: a number, or "null" (the platform's). */ -}}
{{- define "mcpcache.sidecarUser" -}}
{{- $user := 65532 -}}
{{- if hasKey .Values "securityContext" -}}
{{- $user = .Values.securityContext.runAsUser -}}
{{- end -}}
{{- $user | default "null" -}}
{{- end -}}
