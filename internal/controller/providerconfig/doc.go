// Package providerconfig is the ProviderConfig controller: it runs a harvester ProviderConfig's
// preflight checks on Harvester (credentials, permissions, network, image, storage) and reports
// them as conditions; PreflightGate is how a front door lets those checks gate creation, and
// WithUnwrittenChecks lends them where the manager may not write a ProviderConfig's status.
package providerconfig
