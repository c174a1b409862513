// Package target is what a ProviderConfig reference comes to: the one way a front door or
// controller reads the ProviderConfig its object names (LoadProviderConfig, with the checks its
// reconciler could not write lent to it), the one place that ProviderConfig becomes the Harvester
// Target it points at (ResolveProviderConfig: credentials, the Harvester namespace, network,
// default image and storage class), and who may use it as Butler scopes it (ConsumerOf,
// SharedWith: its namespace, a platform's, a team's namespaces). Every problem it finds is the
// ProviderConfig's, so it is a wait that names the field and the fix, the same wherever it is met.
package target
