// Package clusterapi is the Cluster API front door (contract v1beta2): the HarvesterCluster
// reconciler, which names the ProviderConfig its machines are made with and reports the cluster
// provisioned, and the HarvesterMachine reconciler, which turns a Machine's bootstrap data into a
// VM through the engine and reports its providerID and addresses. The manager registers both
// (internal/controller/setup) only where Unavailable finds their CRDs and Cluster API's served.
package clusterapi
