package clustercache

import (
	"context"
	"net/http"

	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// unreadDeletes is a Harvester client whose deletes do not read what the API server answers
// with. controller-runtime's Delete (typed, unstructured, or of a PartialObjectMetadata) decodes
// the deleted object the server sends back, and the typed one then encodes it and decodes it
// again into an unstructured copy it returns: three passes over a whole VM that the provider
// never reads, a tenth of the manager's CPU while it deletes machines
// (docs/proposals/20261126-unread-deletes.md).
// client-go's metadata client sends the same DELETE and reads the answer only when it is an
// error, which it returns as the API's error (NotFound, Conflict, a webhook's refusal).
type unreadDeletes struct {
	client.Client
	metadata metadata.Interface
}

// withUnreadDeletes wraps c, which talks to the API server of cfg through httpClient.
func withUnreadDeletes(c client.Client, cfg *rest.Config, httpClient *http.Client) (client.Client, error) {
	m, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return unreadDeletes{Client: c, metadata: m}, nil
}

// Delete deletes obj by its kind, namespace and name, with opts (preconditions, propagation).
func (c unreadDeletes) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return err
	}
	mapping, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	var o client.DeleteOptions
	o.ApplyOptions(opts)
	return c.metadata.Resource(mapping.Resource).Namespace(obj.GetNamespace()).Delete(ctx, obj.GetName(), *o.AsDeleteOptions())
}
