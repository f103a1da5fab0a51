{{/* Names and labels. */}}
{{- define "ovserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ovserve.fullname" -}}
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

{{- define "ovserve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ovserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ovserve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ovserve.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ovserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ovserve.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ovserve.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
INFERENCE_NUM_THREADS: server.inferenceNumThreads, or floor(resources.limits.cpu) and at least 1.
limits.cpu may be a number (2, 2.5) or a quantity string ("2", "1500m").
*/}}
{{- define "ovserve.threads" -}}
{{- $threads := int .Values.server.inferenceNumThreads -}}
{{- if le $threads 0 -}}
{{- $cpu := toString (required "resources.limits.cpu is required: the engine's thread count is derived from it" .Values.resources.limits.cpu) -}}
{{- $millis := 0 -}}
{{- if hasSuffix "m" $cpu -}}
{{- $millis = int (trimSuffix "m" $cpu) -}}
{{- else -}}
{{- $millis = int (mulf (float64 $cpu) 1000) -}}
{{- end -}}
{{- $threads = max 1 (div $millis 1000) -}}
{{- end -}}
{{- $threads -}}
{{- end -}}

{{- define "ovserve.pluginConfig" -}}
{{- $config := dict "INFERENCE_NUM_THREADS" (int (include "ovserve.threads" .)) -}}
{{- with .Values.server.openvinoCacheDir -}}
{{- $_ := set $config "CACHE_DIR" . -}}
{{- end -}}
{{- toJson $config -}}
{{- end -}}

{{- define "ovserve.preStopSeconds" -}}
{{- int .Values.preStop.sleepSeconds -}}
{{- end -}}

{{/* Grace period: above preStop sleep + drain timeout, or the pod is killed mid-drain. */}}
{{- define "ovserve.terminationGracePeriodSeconds" -}}
{{- $floor := add (int .Values.preStop.sleepSeconds) (int .Values.server.drainTimeoutSeconds) -}}
{{- if .Values.terminationGracePeriodSeconds -}}
{{- $grace := int .Values.terminationGracePeriodSeconds -}}
{{- if le $grace $floor -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStop.sleepSeconds + server.drainTimeoutSeconds (%d)" $grace $floor) -}}
{{- end -}}
{{- $grace -}}
{{- else -}}
{{- add $floor 15 -}}
{{- end -}}
{{- end -}}

{{/* The server's arguments after `ovserve serve` (the image's ENTRYPOINT). */}}
{{- define "ovserve.args" -}}
{{- $v := .Values -}}
{{- if eq $v.model.mode "config" }}
- --config_path
- {{ printf "/models/%s" $v.model.configFile | quote }}
{{- else if eq $v.model.mode "single" }}
- --model_path
- {{ printf "/models/%s" $v.model.single.path | quote }}
- --model_name
- {{ $v.model.single.name | quote }}
- --device
- {{ $v.model.single.device | quote }}
- --cache_size
- {{ $v.model.single.cacheSize | quote }}
- --max_num_seqs
- {{ $v.model.single.maxNumSeqs | quote }}
- --enable_prefix_caching
- {{ $v.model.single.enablePrefixCaching | quote }}
{{- else }}
{{- fail (printf "model.mode must be config or single, not %q" $v.model.mode) }}
{{- end }}
- --host
- "0.0.0.0"
- --port
- {{ $v.server.port | quote }}
- --plugin_config
- {{ include "ovserve.pluginConfig" . | quote }}
- --log_level
- {{ $v.server.logLevel | quote }}
- --drain_timeout
- {{ $v.server.drainTimeoutSeconds | quote }}
- --max_queued_requests
- {{ $v.server.maxQueuedRequests | quote }}
- --request_timeout
- {{ $v.server.requestTimeoutSeconds | quote }}
{{- if and $v.apiKey.enabled (eq $v.apiKey.mode "file") }}
- --api_key_file
- "/etc/ovserve/api-keys/keys"
{{- end }}
{{- if $v.server.metricsPublic }}
- --metrics_public
{{- end }}
{{- range $v.server.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/*
The endpoint picker (inferencePool.enabled): its names and labels. Its selector differs from the
server's (name ovserve-epp), so the server's Service, PDB and HPA never take in its pods.
*/}}
{{- define "ovserve.epp.fullname" -}}
{{- printf "%s-epp" (include "ovserve.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ovserve.epp.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-epp" (include "ovserve.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: endpoint-picker
{{- end -}}

{{- define "ovserve.epp.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ovserve.epp.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
The model whose series the picker reads: inferencePool.modelName, else the single mode's model.
It goes into PromQL-style selectors (name{model="..."}) that the picker splits on commas and
braces, so those (and quotes, backslashes) are refused.
*/}}
{{- define "ovserve.routedModel" -}}
{{- $v := .Values -}}
{{- $model := $v.inferencePool.modelName -}}
{{- if and (not $model) (eq $v.model.mode "single") -}}
{{- $model = $v.model.single.name -}}
{{- end -}}
{{- if not $model -}}
{{- fail "inferencePool.modelName is required with model.mode=config: the endpoint picker reads one model's series of ovserve's per-model gauges" -}}
{{- end -}}
{{- if not (regexMatch "^[^\"{},\\\\]+$" $model) -}}
{{- fail (printf "inferencePool.modelName %q cannot go into a metric selector: no quotes, commas, braces or backslashes" $model) -}}
{{- end -}}
{{- $model -}}
{{- end -}}

{{/* One of ovserve's metric families, selected for the routed model. */}}
{{- define "ovserve.routedMetric" -}}
{{- printf "%s{model=\"%s\"}" .metric (include "ovserve.routedModel" .root) -}}
{{- end -}}

{{/* The picker scrapes /metrics with no credentials: refuse a chart where the key guards it. */}}
{{- define "ovserve.inferencePool.checks" -}}
{{- if and .Values.apiKey.enabled (not .Values.server.metricsPublic) -}}
{{- fail "inferencePool.enabled needs server.metricsPublic=true (or apiKey.enabled=false): the endpoint picker scrapes each pod's /metrics without a key" -}}
{{- end -}}
{{- $_ := include "ovserve.routedModel" . -}}
{{- end -}}
