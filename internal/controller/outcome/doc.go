// Package outcome is how the engine's outcomes become the APIs' words: the engine's waits and
// permanent failures as the front door's error classes (FromEngineIn, FromEngine), its reasons
// as the APIs spell them (APIReason), the conditions butler.butlerlabs.dev's kinds report
// (ButlerConditions), and the reasons that need the user to act and so set Degraded
// (DegradingReasons). It knows no front door: each adds its own advice (machinerequest's and
// clusterapi's engine_errors.go).
package outcome
