// Package management is what the controllers know of the management cluster they run in: its
// identity (IdentifyManagementCluster, the UID of its kube-system namespace, with which objects on
// Harvester are labelled so that two management clusters do not take each other's machines), and
// whether it serves a controller's kinds (KindsUnavailable: their CRDs installed, list and watch
// granted), so that a controller whose kinds are not served stays off.
package management
