// Package frontdoor is the kit every front door shares: reading the ProviderConfig an object
// names into the Target it points at (LoadProviderConfig, ResolveProviderConfig, SharedWith), the
// intervals of the reconcilers, the placement record (RecordPlace), the management cluster's
// identity, the routing of the engine's notifications to the queue of the owner's kind
// (HarvesterEvents), the update predicates, and the engine's errors in the APIs' reasons
// (FromEngineIn, APIReason). It knows no front door: each maps the engine's words to its own
// advice (machinerequest's and clusterapi's engine_errors.go).
package frontdoor
