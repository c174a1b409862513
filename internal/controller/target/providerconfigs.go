package target

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// ProviderConfigChecks lends a ProviderConfig read from the API server the checks its reconciler
// could not write to its status (providerconfig.Reconciler, which lends nothing
// when nil): a front door then judges it by the same checks wherever the manager may not write
// ProviderConfig status.
type ProviderConfigChecks interface {
	WithUnwrittenChecks(pc *v1alpha1.ProviderConfig)
}

// LoadProviderConfig is how every front door reads the ProviderConfig its object names (key, as
// the object's ProviderConfigKey defaults its namespace): nil when it does not exist, which
// ResolveProviderConfig reports as a wait naming the field; with the checks that could not be
// written lent to its status when checks is not nil.
func LoadProviderConfig(ctx context.Context, c client.Reader, key client.ObjectKey, checks ProviderConfigChecks) (*v1alpha1.ProviderConfig, error) {
	pc := &v1alpha1.ProviderConfig{}
	if err := c.Get(ctx, key, pc); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if checks != nil {
		checks.WithUnwrittenChecks(pc)
	}
	return pc, nil
}
