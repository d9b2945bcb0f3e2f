package nodenet

// ProofSocket is the abstract unix socket ("@" + name, scoped to one
// network namespace) that a hostNetwork pod's helper init container listens
// on while it waits for the agent, uid being its host pod's UID. The agent
// sets up a network namespace that holds a pod's IP only once this socket
// answers there (or the namespace carries the agent's mark for that UID):
// a pod IP alone may, for a moment, be another pod's, whose sandbox took the
// IP a dead sandbox let go.
func ProofSocket(uid string) string { return "@nest-node-network/" + uid }
