// Package clustercache keeps one client per remote cluster (a Harvester cluster) and credentials:
// it reads the kubeconfig from its Secret in the management cluster, refuses kubeconfigs that
// could run programs, read the manager's files or send the credentials elsewhere, and builds a
// client, a cache of what its user watches in one namespace (informers retried in the background
// when they do not sync), and the cluster's identity. A client is reused for as long as its
// Secret holds the same kubeconfig, retired when the Secret changes or goes, and stopped when
// nobody has asked for it in a while.
//
// It knows nothing of Harvester or of the objects it caches: the engine (package harvester) says
// which kinds to watch and handles their events (Watches), and keeps its per-cluster state in the
// Cluster (Attachment). Its model is cluster-api's controllers/clustercache.
package clustercache
