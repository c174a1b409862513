package clustercache

import (
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// rememberingMapper answers repeated RESTMapping questions from memory. controller-runtime's
// cache, restricted to one namespace, asks on every Get and List whether the kind is namespaced,
// and the dynamic mapper answers by asking each API group it has discovered in turn, allocating
// an error for every group that does not have it: at 1000 machines that was 30% of everything the
// manager allocated. Only mappings are remembered, never "no such kind", so that a CRD installed
// later (CDI's DataVolume) is still found.
type rememberingMapper struct {
	meta.RESTMapper
	mappings sync.Map // mappingKey -> *meta.RESTMapping
}

type mappingKey struct {
	kind     schema.GroupKind
	versions string
}

// newRESTMapper returns the mapper one Harvester client and its cache share. Its discovery
// requests take no context, and through a client of their own they get no timeout either: one
// that never got an answer held the client being built, and every reconcile waiting for it, for
// good (a chaos run's "timeout" fault). They get discoveryTimeout.
func newRESTMapper(cfg *rest.Config) (meta.RESTMapper, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = discoveryTimeout
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	dynamic, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return &rememberingMapper{RESTMapper: dynamic}, nil
}

// discoveryTimeout bounds each discovery request of a REST mapper (a variable for tests).
var discoveryTimeout = 30 * time.Second

func (m *rememberingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	key := mappingKey{kind: gk, versions: strings.Join(versions, ",")}
	if known, ok := m.mappings.Load(key); ok {
		return known.(*meta.RESTMapping), nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err == nil {
		m.mappings.Store(key, mapping)
	}
	return mapping, err
}
