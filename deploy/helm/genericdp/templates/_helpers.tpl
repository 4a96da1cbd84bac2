{{/* Names, namespace and labels shared by every template. */}}

{{- define "genericdp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "genericdp.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Every namespaced object goes here: the release's namespace unless overridden. */}}
{{- define "genericdp.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "genericdp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "genericdp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "genericdp.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "genericdp.selectorLabels" . }}
app.kubernetes.io/component: device-plugin
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The pod template's labels: no chart or app version here. Any change to the
pod template rolls the DaemonSet, so a version label would restart the plugin
on every node at each chart bump, even when the pod itself did not change.
*/}}
{{- define "genericdp.podLabels" -}}
{{ include "genericdp.selectorLabels" . }}
app.kubernetes.io/component: device-plugin
{{- end }}

{{- define "genericdp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "genericdp.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "genericdp.configMapName" -}}
{{- printf "%s-config" (include "genericdp.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The image: by digest when one is given (what a signature covers), else by tag. */}}
{{- define "genericdp.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}
