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

{{/* The number of seconds in a Go duration ("1m30s", "500ms"), as values.schema.json allows them. */}}
{{- define "bph.seconds" -}}
{{- $seconds := 0.0 }}
{{- $unit := dict "ns" 1e-9 "us" 1e-6 "µs" 1e-6 "ms" 1e-3 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- range regexFindAll `[0-9.]+[^0-9.]+` . -1 }}
{{- $number := regexFind `^[0-9.]+` . }}
{{- $seconds = addf $seconds (mulf (float64 $number) (get $unit (trimPrefix $number .))) }}
{{- end }}
{{- $seconds }}
{{- end }}

{{/* The manager's flags, one per value (docs/configuration.md maps each). */}}
{{- define "bph.args" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true: without it every replica would reconcile the same MachineRequests" }}
{{- end }}
{{- /* Time left after the graceful shutdown to release the leader Lease and exit. */}}
{{- $margin := 5 }}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- if gt (addf (include "bph.seconds" .Values.gracefulShutdownTimeout | float64) $margin) (float64 $grace) }}
{{- fail (printf "gracefulShutdownTimeout %s must end at least %ds before terminationGracePeriodSeconds (%ds): the manager releases its leader Lease only after it, and the kubelet kills the Pod at the end of the grace period" .Values.gracefulShutdownTimeout $margin $grace) }}
{{- end }}
- --leader-elect={{ .Values.leaderElection.enabled }}
- --leader-election-id={{ .Values.leaderElection.id }}
{{- if .Values.metrics.enabled }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
- --metrics-secure={{ .Values.metrics.secure }}
- --enable-http2={{ .Values.metrics.enableHTTP2 }}
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
- --cluster-api={{ .Values.clusterAPI.enabled }}
- --kube-api-qps={{ .Values.managementAPI.qps }}
- --kube-api-burst={{ .Values.managementAPI.burst }}
- --harvester-qps={{ .Values.harvesterAPI.qps }}
- --harvester-burst={{ .Values.harvesterAPI.burst }}
- --creating-poll-interval={{ .Values.intervals.creatingPoll }}
- --watched-poll-interval={{ .Values.intervals.watchedPoll }}
- --health-check-interval={{ .Values.intervals.healthCheck }}
- --watched-health-check-interval={{ .Values.intervals.watchedHealthCheck }}
- --providerconfig-recheck-interval={{ .Values.intervals.providerConfigRecheck }}
- --provisioning-timeout={{ .Values.intervals.provisioningTimeout }}
- --ip-report-timeout={{ .Values.intervals.ipReportTimeout }}
- --config-grace-period={{ .Values.intervals.configGracePeriod }}
- --graceful-shutdown-timeout={{ .Values.gracefulShutdownTimeout }}
{{- range .Values.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}
