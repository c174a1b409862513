{{/* Name of the chart, or nameOverride. */}}
{{- define "bph.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: fullnameOverride, else the release name (containing the chart's name or not). */}}
{{- define "bph.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "bph.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "bph.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "bph.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bph.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "bph.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "bph.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: butler
{{- end }}

{{- define "bph.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "bph.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The manager's flags, one per value (docs/configuration.md maps each). */}}
{{- define "bph.args" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true: without it every replica would reconcile the same MachineRequests" }}
{{- end }}
- --leader-elect={{ .Values.leaderElection.enabled }}
- --leader-election-id={{ .Values.leaderElection.id }}
{{- if .Values.metrics.enabled }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
- --metrics-secure={{ .Values.metrics.secure }}
{{- if .Values.metrics.certSecret }}
- --metrics-cert-dir=/etc/butler/metrics-certs
{{- end }}
{{- else }}
- --metrics-bind-address=0
{{- end }}
- --health-probe-bind-address=:{{ .Values.healthProbe.port }}
- --log-level={{ .Values.logging.level }}
- --log-format={{ .Values.logging.format }}
{{- with .Values.watchNamespaces }}
- --watch-namespaces={{ join "," . }}
{{- end }}
- --sync-period={{ .Values.syncPeriod }}
- --max-concurrent-reconciles={{ .Values.concurrency }}
- --kube-api-qps={{ .Values.managementAPI.qps }}
- --kube-api-burst={{ .Values.managementAPI.burst }}
- --harvester-qps={{ .Values.harvesterAPI.qps }}
- --harvester-burst={{ .Values.harvesterAPI.burst }}
- --creating-poll-interval={{ .Values.intervals.creatingPoll }}
- --health-check-interval={{ .Values.intervals.healthCheck }}
- --providerconfig-recheck-interval={{ .Values.intervals.providerConfigRecheck }}
- --provisioning-timeout={{ .Values.intervals.provisioningTimeout }}
- --ip-report-timeout={{ .Values.intervals.ipReportTimeout }}
{{- range .Values.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}
