package objmeta

import (
	"context"
	"maps"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// RecordPlace stores where the machine of obj (of any front door's kind) lives in
// AnnotationPlacement, with finalizer, in one write locked on both (PatchFinalizersAndAnnotations), and checks the
// API server's answer (see recordPlacement).
func RecordPlace[O client.Object, S any](ctx context.Context, c client.Client, s *objstatus.Scope[O, S], obj O, kind, finalizer string, place harvester.Place) error {
	p := v1alpha1.Placement{ClusterID: place.ClusterID, Server: place.Server, Namespace: place.Namespace, Name: place.Name}
	finalizers := obj.GetFinalizers()
	if !slices.Contains(finalizers, finalizer) {
		finalizers = append(slices.Clone(finalizers), finalizer)
	}
	annotations := maps.Clone(obj.GetAnnotations())
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[v1alpha1.AnnotationPlacement] = v1alpha1.EncodePlacement(p)
	if err := PatchFinalizersAndAnnotations(ctx, c, s, obj, finalizers, annotations); err != nil {
		return err
	}
	// obj is the server's answer now.
	got, err := v1alpha1.DecodePlacement(obj.GetAnnotations())
	if err != nil || got == nil || *got != p || !controllerutil.ContainsFinalizer(obj, finalizer) {
		return errkind.Waiting(v1alpha1.ReasonPlacementNotRecorded, requeue.ProviderConfigRetry,
			"the API server did not keep annotation %s or finalizer %s on the %s: nothing is created until they persist; check the admission webhooks and policies that change %ss",
			v1alpha1.AnnotationPlacement, finalizer, kind, kind)
	}
	log.FromContext(ctx).V(1).Info("Recorded the machine's place", "cluster", p.Server, "namespace", p.Namespace, "name", p.Name)
	return nil
}
