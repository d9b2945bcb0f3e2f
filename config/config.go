// Package config embeds the manifests that install Nest into a host cluster:
// the generated CRDs and RBAC, and the nest-manager Deployment. They are the
// same files `kubectl apply -R -f config/` would use.
//
// These files are the one source of Nest's install manifests: `make generate`
// derives the Helm chart's crds/ and its manager, RBAC and PriorityClass
// templates from them (hack/chartgen), so edit them here, not in charts/nest.
package config

import "embed"

// Manifests holds 00-namespace.yaml (nest-system), crd/, rbac/, syncer/
// (nest-syncer's ClusterRole), scheduling/ (the tenant PriorityClass),
// manager/ and nodenetwork/ (the node network agent's DaemonSet).
//
//go:embed 00-namespace.yaml crd/*.yaml rbac/*.yaml syncer/*.yaml scheduling/*.yaml manager/*.yaml nodenetwork/*.yaml
var Manifests embed.FS

// Order lists the folders of Manifests in apply order: the namespace and CRDs
// before what lives in them. It is also the order `kubectl apply -R -f
// config/` walks them in (lexical), which is why the namespace file sorts first.
var Order = []string{"00-namespace.yaml", "crd", "rbac", "syncer", "scheduling", "manager", "nodenetwork"}
