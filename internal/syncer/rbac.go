package syncer

// nest-syncer's host permissions. They form the nest-syncer ClusterRole,
// which each tenant's RoleBinding grants in that tenant's host namespace only:
// pods and their log, exec, attach, port-forward, ephemeral-container and
// resize subresources; the ConfigMaps, Secrets and Services it copies and
// the EndpointSlices of Services without a selector;
// events to read and forward; the claims of virtual nodes' disks, made on
// first use and deleted with their virtual node; the Lease through which
// the syncers of a control plane's replicas elect their leader.
//
// +kubebuilder:rbac:groups="",resources=pods;configmaps;secrets;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get
// +kubebuilder:rbac:groups="",resources=pods/ephemeralcontainers;pods/resize,verbs=update;patch
// +kubebuilder:rbac:groups="",resources=pods/exec;pods/attach;pods/portforward,verbs=create;get
// +kubebuilder:rbac:groups="",resources=events,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;delete
