{{/* Names and labels shared by every template. */}}

{{- define "genericdp.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "genericdp.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
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
