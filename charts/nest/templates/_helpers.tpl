{{- define "nest.labels" -}}
app.kubernetes.io/name: nest-manager
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "nest.dashboardLabels" -}}
app.kubernetes.io/name: nest-dashboard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- /*
The nest-manager flags only the chart sets, from values.yaml. The rest of the
Deployment (templates/manager.yaml) is generated from config/manager/manager.yaml
by `make generate`; these follow its args.
*/ -}}
{{- define "nest.managerArgs" -}}
- --kube-image-repository={{ .Values.controlPlane.kubeImageRepository }}
- --coredns-image={{ .Values.controlPlane.corednsImage }}
- --syncer-image={{ .Values.controlPlane.syncerImage }}
- --image-pull-policy={{ .Values.controlPlane.imagePullPolicy }}
- --default-service-type={{ .Values.controlPlane.serviceType }}
- --host-cluster-domain={{ .Values.hostClusterDomain }}
- --manager-namespace={{ .Release.Namespace }}
- --node-network-agent={{ .Values.nodeNetwork.enabled }}
- --host-verifies-pull-credentials={{ .Values.tenantImages.hostVerifiesPullCredentials }}
{{- if .Values.tenantImages.registryDenylist }}
- --image-registry-denylist={{ join "," .Values.tenantImages.registryDenylist }}
{{- end }}
{{- with .Values.hostNetwork }}
{{- if .podCIDRs }}
- --host-pod-cidrs={{ join "," .podCIDRs }}
{{- end }}
{{- if .serviceCIDRs }}
- --host-service-cidrs={{ join "," .serviceCIDRs }}
{{- end }}
{{- if .nodeCIDRs }}
- --host-node-cidrs={{ join "," .nodeCIDRs }}
{{- end }}
{{- end }}
{{- if not (kindIs "invalid" .Values.hostMetadata.labels) }}
- --host-label-allowlist={{ join "," .Values.hostMetadata.labels }}
{{- end }}
{{- if not (kindIs "invalid" .Values.hostMetadata.annotations) }}
- --host-annotation-allowlist={{ join "," .Values.hostMetadata.annotations }}
{{- end }}
{{- end -}}

{{- /*
The node network agent's flags the chart derives from values.yaml: its pull
proxy refuses to dial the host's ranges (hostNetwork) and the registry deny
list's CIDRs, besides the addresses it reads from the API. Names in the deny
list are refused in tenant pod specs by nest-syncer, not here.
*/ -}}
{{- define "nest.nodeNetworkArgs" -}}
{{- $deny := concat .Values.hostNetwork.podCIDRs .Values.hostNetwork.serviceCIDRs .Values.hostNetwork.nodeCIDRs -}}
{{- range .Values.tenantImages.registryDenylist -}}
{{- if contains "/" . }}{{ $deny = append $deny . }}{{ end -}}
{{- end -}}
{{- if $deny }}
- --pull-proxy-deny={{ join "," $deny }}
{{- end }}
{{- end -}}
