{{/* Chart name, at most 63 characters. */}}
{{- define "ftcomm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name: the release name when it already contains the chart
name (release "ftcomm" -> "ftcomm"), else "<release>-<chart>".
*/}}
{{- define "ftcomm.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The controller's objects: Deployment, Service, ServiceAccount, RBAC, Lease. */}}
{{- define "ftcomm.controllerName" -}}
{{- printf "%s-controller" (include "ftcomm.fullname" .) }}
{{- end }}

{{- define "ftcomm.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the controller's pods (never change them in an upgrade). */}}
{{- define "ftcomm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ftcomm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/* Standard labels of every object. */}}
{{- define "ftcomm.labels" -}}
helm.sh/chart: {{ include "ftcomm.chart" . }}
{{ include "ftcomm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: ftcomm
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "ftcomm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ftcomm.controllerName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: give the existing ServiceAccount to use when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ftcomm.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "ftcomm.dumpClaimName" -}}
{{- default (printf "%s-dumps" (include "ftcomm.fullname" .)) .Values.dumps.persistence.existingClaim }}
{{- end }}

{{/* Checks across values that values.schema.json cannot express with a clear message. */}}
{{- define "ftcomm.validate" -}}
{{- $le := .Values.controller.leaderElection }}
{{- if and (gt (int .Values.controller.replicas) 1) (not $le.enabled) }}
{{- fail (printf "controller.replicas is %d but controller.leaderElection.enabled is false: two controllers would reconcile the same jobs; enable leader election or set replicas to 1" (int .Values.controller.replicas)) }}
{{- end }}
{{- if not (and (gt (int $le.leaseDuration) (int $le.renewDeadline)) (gt (int $le.renewDeadline) (int $le.retryPeriod))) }}
{{- fail (printf "controller.leaderElection: need leaseDuration (%d) > renewDeadline (%d) > retryPeriod (%d)" (int $le.leaseDuration) (int $le.renewDeadline) (int $le.retryPeriod)) }}
{{- end }}
{{- end }}
