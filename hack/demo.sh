#!/usr/bin/env bash
# The main job, end to end: a local host cluster with Nest, one virtual cluster
# with a 4 CPU / 8Gi share, and a tenant workload on its virtual node, used
# with plain kubectl. Every step says what it does. Safe to run again.
set -euo pipefail

BIN=${BIN:-_output/bin}
OUT=${OUT:-_output}
NODES=${NODES:-2}
TENANT_KUBECONFIG="$OUT/demo.kubeconfig"

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
tenant() { "$BIN/kube" kubectl --kubeconfig "$TENANT_KUBECONFIG" "$@"; }
# apply makes a create idempotent: it renders the object and applies it.
apply() { tenant "$@" --dry-run=client -o yaml | tenant apply -f -; }

step "start a $NODES-node local host cluster with Nest installed"
"$BIN/nest" dev up --nodes "$NODES" --with-nest
"$BIN/kube" kubectl --kubeconfig "$("$BIN/nest" dev kubeconfig)" get nodes -o wide

step "create the virtual cluster demo: its own control plane, and a 4 CPU / 8Gi share of host capacity"
"$BIN/nest" create demo --cpu 4 --memory 8Gi --wait
"$BIN/nest" kubeconfig demo -o "$TENANT_KUBECONFIG"
echo "tenant kubeconfig: $TENANT_KUBECONFIG"

step "as the tenant: the cluster has one node, the virtual node, sized to the share"
tenant wait --for=condition=Ready node/nest-virtual-node --timeout=120s
tenant get nodes -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="Ready")].type,CPU:.status.capacity.cpu,MEMORY:.status.capacity.memory,PODS:.status.capacity.pods'
tenant wait --for=create serviceaccount/default --timeout=60s

step "as the tenant: create deployment web (3 replicas) and expose it"
apply create deployment web --image=nest.local/testapp:dev --replicas=3
apply expose deployment web --port=80 --target-port=8080
tenant rollout status deployment/web --timeout=180s
tenant get pods -o wide

step "as the tenant: from another pod, reach web by its DNS name"
apply run client --image=nest.local/testapp:dev
tenant wait --for=condition=Ready pod/client --timeout=180s
for name in web.default.svc.cluster.local web; do
	printf 'GET http://%s/hostname -> ' "$name"
	tenant exec client -- /testapp get "http://$name/hostname"
	echo
done

step "as the tenant: kubectl logs and kubectl exec"
pod=$(tenant get pods -l app=web -o jsonpath='{.items[0].metadata.name}')
tenant logs "$pod" --tail=5
printf 'exec hostname in %s -> ' "$pod"
tenant exec "$pod" -- /testapp get http://localhost:8080/hostname
echo

step "as the platform team: the same pods, translated, in the tenant's host namespace"
"$BIN/kube" kubectl --kubeconfig "$("$BIN/nest" dev kubeconfig)" -n vc-demo get pods,services,resourcequota

step "as the platform team: snapshot the tenant to the local registry, and list it"
registry=$("$BIN/nest" dev registry)
"$BIN/nest" snapshot create demo --to "oci://$registry/demo/demo:latest-demo" --plain-http --insecure-plaintext-keys
"$BIN/nest" snapshot list demo --in "oci://$registry/demo/demo" --plain-http

cat <<MSG

Done. Use the virtual cluster with:
  export KUBECONFIG=$TENANT_KUBECONFIG
  $BIN/kube kubectl get pods
Stop everything with: make down
MSG
