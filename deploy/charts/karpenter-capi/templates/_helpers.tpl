{{/*
Names and labels shared by every template of this chart, including the RBAC templates.
*/}}

{{/* The chart's name, or .Values.nameOverride. */}}
{{- define "karpenter-capi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object: .Values.fullnameOverride, else the release name when it already
contains the chart name (so `helm install karpenter-capi ...` gives `karpenter-capi`, not
`karpenter-capi-karpenter-capi`), else "<release>-<chart>". 63 characters at most (DNS label).
*/}}
{{- define "karpenter-capi.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "karpenter-capi.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "<chart>-<version>", for the helm.sh/chart label. */}}
{{- define "karpenter-capi.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels every object carries. */}}
{{- define "karpenter-capi.labels" -}}
helm.sh/chart: {{ include "karpenter-capi.chart" . }}
{{ include "karpenter-capi.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels that select the controller's pods (immutable on a Deployment: keep them few). */}}
{{- define "karpenter-capi.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter-capi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount the controller runs as: created by the chart, or one that exists. */}}
{{- define "karpenter-capi.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpenter-capi.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The namespace of the leader-election Lease: .Values.leaderElection.namespace, else the release's. */}}
{{- define "karpenter-capi.leaderElectionNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace }}
{{- end }}

{{/* image: repository:tag (tag defaults to appVersion), or repository@digest when a digest is given. */}}
{{- define "karpenter-capi.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where the management cluster's kubeconfig Secret is mounted (mode kubeconfigSecret). */}}
{{- define "karpenter-capi.managementKubeconfigDir" -}}
/etc/karpenter-capi/management
{{- end }}

{{/* Where mode urlToken mounts the management cluster's token Secret. */}}
{{- define "karpenter-capi.managementTokenDir" -}}
/etc/karpenter-capi/management-token
{{- end }}
