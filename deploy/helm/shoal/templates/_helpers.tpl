{{- define "shoal.name" -}}shoal{{- end -}}

{{- define "shoal.labels" -}}
app.kubernetes.io/name: shoal
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "shoal.selector" -}}
app.kubernetes.io/name: shoal
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "shoal.serviceAccount" -}}{{ .Values.serviceAccount.name | default "shoal" }}{{- end -}}

{{- /* "true" when the scheduler's replicas serve the admission webhooks (shoal run --webhook-port), else empty. */ -}}
{{- define "shoal.webhookInScheduler" -}}
{{- if .Values.webhook.enabled }}{{ if .Values.webhook.inScheduler }}true{{ end }}{{ end -}}
{{- end -}}
