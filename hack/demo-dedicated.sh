#!/usr/bin/env bash
# Dedicated nodes, end to end: a 3-node local host cluster with Nest (one
# control-plane node, two promotable workers), a virtual cluster that takes
# a worker out of the host as a node of its own, pods on that node and on
# the virtual node reaching each other by Service name, and the worker
# given back. Every step says what it does. Safe to run again.
set -euo pipefail

BIN=${BIN:-_output/bin}
OUT=${OUT:-_output}
TENANT_KUBECONFIG="$OUT/dedi.kubeconfig"
LABEL=demo.nest.dev/pool

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
host() { "$BIN/kube" kubectl --kubeconfig "$("$BIN/nest" dev kubeconfig)" "$@"; }
tenant() { "$BIN/kube" kubectl --kubeconfig "$TENANT_KUBECONFIG" "$@"; }
# apply makes a create idempotent: it renders the object and applies it.
apply() { tenant "$@" --dry-run=client -o yaml | tenant apply -f -; }
# fetch POD URL: GET URL from POD, retried for 30 s while a new Service's
# name reaches the tenant's DNS.
fetch() {
	local out
	for _ in $(seq 30); do
		if out=$(tenant exec "$1" -- /testapp get "$2" 2>&1); then
			echo "$out"
			return 0
		fi
		sleep 1
	done
	echo "$out"
	return 1
}

step "start a 3-node local host cluster with Nest installed"
"$BIN/nest" dev up --nodes 3 --with-nest

step "as the platform team: the inventory of nodes that may be promoted"
for n in nest-worker nest-worker2; do host wait --for=create "globalnode/$n" --timeout=120s; done
"$BIN/nest" nodes

step "create the virtual cluster dedi"
"$BIN/nest" create dedi --cpu 2 --memory 4Gi --wait
"$BIN/nest" kubeconfig dedi -o "$TENANT_KUBECONFIG"

# A worker that does not run dedi's control plane, which a drain would move.
cp_node=$(host -n vc-dedi get pod dedi-0 -o jsonpath='{.spec.nodeName}')
worker=nest-worker
[ "$cp_node" = nest-worker ] && worker=nest-worker2
step "as the platform team: give dedi one dedicated node from the pool $LABEL=gpu ($worker)"
host label node "$worker" "$LABEL=gpu" --overwrite
host wait --for=jsonpath="{.spec.labels.demo\.nest\.dev/pool}"=gpu "globalnode/$worker" --timeout=60s
"$BIN/nest" scale dedi --nodes 1 --node-selector "$LABEL=gpu"
host wait --for=jsonpath='{.status.phase}'=Tenant "globalnode/$worker" --timeout=300s
"$BIN/nest" nodes
echo "host Nodes now:"
host get nodes

step "as the tenant: two nodes, the virtual node and the dedicated one, with its real address"
tenant wait --for=condition=Ready "node/$worker" --timeout=120s
tenant get nodes -o wide

step "as the tenant: a privileged pod runs on the dedicated node (the virtual node refuses it)"
tenant wait --for=create serviceaccount/default --timeout=60s
tenant apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: tools, labels: {app: tools}}
spec:
  nodeSelector: {kubernetes.io/hostname: $worker}
  containers:
  - {name: app, image: nest.local/testapp:dev, securityContext: {privileged: true}}
YAML
apply run web --image=nest.local/testapp:dev --labels=app=web --overrides='{"spec":{"nodeSelector":{"type":"virtual-kubelet"}}}'
apply expose pod tools --port=80 --target-port=8080
apply expose pod web --port=80 --target-port=8080
tenant wait --for=condition=Ready pod/tools pod/web --timeout=180s
tenant get pods -o wide

step "as the tenant: each pod reaches the other by its Service name"
printf 'from tools (dedicated node): GET http://web/hostname -> '
fetch tools http://web/hostname
printf 'from web (virtual node): GET http://tools/hostname -> '
fetch web http://tools/hostname

step "as the platform team: release the node; it goes back to the host"
tenant delete pod tools web --wait=false
"$BIN/nest" scale dedi --nodes 0
host wait --for=jsonpath='{.status.phase}'=Host "globalnode/$worker" --timeout=300s
host wait --for=condition=Ready "node/$worker" --timeout=120s
"$BIN/nest" nodes
echo "tenant Nodes now:"
tenant get nodes

cat <<MSG

Done. Use the virtual cluster with:
  export KUBECONFIG=$TENANT_KUBECONFIG
  $BIN/kube kubectl get nodes
Stop everything with: make down
MSG
