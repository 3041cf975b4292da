{{/* The chart name, or nameOverride. */}}
{{- define "disagg-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every object name: fullnameOverride, or <release>-<chart> unless the release already says it. */}}
{{- define "disagg-operator.fullname" -}}
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

{{- define "disagg-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator pod; never change them (Deployment selectors are immutable). */}}
{{- define "disagg-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "disagg-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "disagg-operator.labels" -}}
helm.sh/chart: {{ include "disagg-operator.chart" . }}
{{ include "disagg-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: disagg-operator
{{- end }}

{{- define "disagg-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "disagg-operator.fullname" .) .Values.serviceAccount.name }}
{{- else if .Values.serviceAccount.name }}
{{- .Values.serviceAccount.name }}
{{- else }}
{{- fail "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" }}
{{- end }}
{{- end }}

{{- define "disagg-operator.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
RBAC rules for what the operator does inside a watched namespace, as derived from its calls in
operator/disagg/reconcile/access.py (tests/unit/reconcile/test_access.py keeps these, in this order, equal to it):
- its own resource: list/watch (kopf; the pass reads it from the cache), patch status; update finalizers because
  children's ownerReferences set blockOwnerDeletion, which OwnerReferencesPermissionEnforcement allows only to those
  who may update the owner's finalizers;
- every child kind: server-side apply (create + patch), list/watch (the informers that fill the cache), delete to
  prune, get to claim a desired child the cache does not hold as ours (a name taken by an object that is not ours is
  never written) and to read a workload before a replicas hand-over;
- pods: list/watch (the informer: diagnostics, the scaler's metrics, the serving check) and get because the router's
  Role grants it (RBAC lets the operator grant only what it holds itself), delete (the serving check's Recreate
  remediation); pods/status: patch (the serving readiness gate); replicasets: list/watch (the informer: which pods
  are our workloads', rolling a stuck rollout back); events: create.
*/}}
{{- define "disagg-operator.namespacedRules" -}}
- apiGroups: [disagg.dev]
  resources: [disaggdeployments]
  verbs: [list, watch]
- apiGroups: [disagg.dev]
  resources: [disaggdeployments/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [serviceaccounts, configmaps, services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [deployments, daemonsets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, delete]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [disagg.dev]
  resources: [disaggdeployments/finalizers]
  verbs: [update]
{{- end }}

{{/*
Leader election, in the release namespace only (a Role in every mode; reconcile/access.py LEADER_ELECTION): the
Lease (get, create, update) and the Event recording each handover on it.
*/}}
{{- define "disagg-operator.leaderElectionRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/*
The cluster-scope read kopf makes in every mode: CRDs, listed and watched to notice resources appearing.
Namespace mode adds namespaces list/watch (see rbac.yaml); cluster-wide mode does not need it.
*/}}
{{- define "disagg-operator.clusterRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
{{- end }}
