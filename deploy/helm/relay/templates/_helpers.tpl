{{- define "relay.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "relay.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "relay.labels" -}}
{{ include "relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "relay.externalIdSecretName" -}}
{{- default (printf "%s-external-id" (include "relay.fullname" .)) .Values.externalIdSecret.name -}}
{{- end -}}

{{- define "relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "relay.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
relay.apiHosts: the Host names the API answers (config.api.allowed_hosts), one a line:
the Service's own names, the Ingress's hosts when it is on, then .Values.allowedHosts.
*/}}
{{- define "relay.apiHosts" -}}
{{- $svc := include "relay.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) -}}
{{- if .Values.ingress.enabled }}{{ $hosts = concat $hosts (.Values.ingress.hosts | default list) }}{{ end -}}
{{- concat $hosts (.Values.allowedHosts | default list) | uniq | join "\n" -}}
{{- end -}}

{{/*
relay.goMemLimit: goMemLimitRatio of resources.limits.memory in bytes (a plain byte
count is what GOMEMLIMIT takes), or nothing when either is unset. The limit is a
Kubernetes quantity: digits with an optional fraction and a binary (Ki…Ei) or decimal
(k…E) suffix; a number from a values file arrives as a float.
*/}}
{{- define "relay.goMemLimit" -}}
{{- $q := dig "limits" "memory" "" (.Values.resources | default dict) -}}
{{- $ratio := float64 (.Values.goMemLimitRatio | default 0) -}}
{{- if and $q (gt $ratio 0.0) -}}
{{- $bytes := 0.0 -}}
{{- if kindIs "string" $q -}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" $q) -}}
{{- fail (printf "resources.limits.memory is %q, which the chart cannot turn into GOMEMLIMIT: write it as 512Mi, 1Gi or 500M, or set goMemLimitRatio: 0 and GOMEMLIMIT in extraEnv" $q) -}}
{{- end -}}
{{- $units := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- $number := regexReplaceAll "[A-Za-z]+$" $q "" -}}
{{- $unit := trimPrefix $number $q -}}
{{- $bytes = mulf (float64 $number) (get $units $unit) -}}
{{- else -}}
{{- $bytes = float64 $q -}}
{{- end -}}
{{- mulf $bytes $ratio | floor | int64 -}}
{{- end -}}
{{- end -}}

{{/*
relay.secretRef refuses a secret in the values: the chart renders config into a
ConfigMap, which anyone who may read ConfigMaps in the namespace reads. A secret value
must be env:NAME with NAME set from a Secret (secretEnv, or extraEnv with
valueFrom.secretKeyRef) or file:PATH under a secretVolumes mountPath. The message names
the value's path and never quotes a literal. Arguments: dict "root" $ "path" <values
path> "value" <value> "url" <true: a literal URL is fine unless it holds a password>.
*/}}
{{- define "relay.secretRef" -}}
{{- $root := .root -}}
{{- $v := toString .value -}}
{{- if hasPrefix "env:" $v -}}
{{- $name := trimPrefix "env:" $v -}}
{{- $backed := false -}}
{{- range $root.Values.secretEnv }}{{ if eq (toString .name) $name }}{{ $backed = true }}{{ end }}{{ end -}}
{{- range $root.Values.extraEnv }}{{ if and (eq (toString .name) $name) .valueFrom }}{{ if .valueFrom.secretKeyRef }}{{ $backed = true }}{{ end }}{{ end }}{{ end -}}
{{- if and $root.Values.externalIdSecret.create (eq $name "RELAY_EXTERNAL_ID_SECRET") }}{{ $backed = true }}{{ end -}}
{{- if not $backed -}}
{{- fail (printf "%s is env:%s, but no Secret sets %s: add {name: %s, secretName: …, key: …} to secretEnv" .path $name $name $name) -}}
{{- end -}}
{{- else if hasPrefix "file:" $v -}}
{{- $file := clean (trimPrefix "file:" $v) -}}
{{- $backed := false -}}
{{- range $root.Values.secretVolumes }}{{ if hasPrefix (printf "%s/" (trimSuffix "/" (toString .mountPath))) $file }}{{ $backed = true }}{{ end }}{{ end -}}
{{- if not $backed -}}
{{- fail (printf "%s is file:%s, which is under no secretVolumes mountPath: mount the Secret that holds it ({secretName: …, mountPath: …})" .path $file) -}}
{{- end -}}
{{- else if or (not .url) (regexMatch "^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*:[^/?#]*@" $v) -}}
{{- $what := ternary "is a URL with a password" "is a secret" (not (not .url)) -}}
{{- fail (printf "%s %s written in the values (not shown here): the chart renders values into a ConfigMap, which is no place for a secret. Put it in a Secret and write env:NAME (NAME in secretEnv) or file:PATH (under a secretVolumes mountPath)" .path $what) -}}
{{- end -}}
{{- end -}}

{{/*
relay.checkSecrets runs relay.secretRef on every value of config that holds a secret.
An empty value is left to relay check-config, which says what it must be.
*/}}
{{- define "relay.checkSecrets" -}}
{{- $c := .Values.config -}}
{{- range $i, $t := dig "api" "tokens" list $c -}}
{{- with (get ($t | default dict) "token") }}{{ include "relay.secretRef" (dict "root" $ "path" (printf "config.api.tokens[%d].token" $i) "value" .) }}{{ end -}}
{{- end -}}
{{- range $i, $k := dig "signature" "keys" list $c -}}
{{- with $k }}{{ include "relay.secretRef" (dict "root" $ "path" (printf "config.signature.keys[%d]" $i) "value" .) }}{{ end -}}
{{- end -}}
{{- with dig "signature" "master_key" "" $c }}{{ include "relay.secretRef" (dict "root" $ "path" "config.signature.master_key" "value" .) }}{{ end -}}
{{- with dig "identity" "external_id_secret" "" $c }}{{ include "relay.secretRef" (dict "root" $ "path" "config.identity.external_id_secret" "value" .) }}{{ end -}}
{{- with dig "rabbitmq" "url" "" $c }}{{ include "relay.secretRef" (dict "root" $ "path" "config.rabbitmq.url" "value" . "url" true) }}{{ end -}}
{{- range $i, $u := dig "rabbitmq" "urls" list $c -}}
{{- with $u }}{{ include "relay.secretRef" (dict "root" $ "path" (printf "config.rabbitmq.urls[%d]" $i) "value" . "url" true) }}{{ end -}}
{{- end -}}
{{- with dig "redis" "url" "" $c }}{{ include "relay.secretRef" (dict "root" $ "path" "config.redis.url" "value" . "url" true) }}{{ end -}}
{{- end -}}
