package objmeta

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// PatchFinalizersAndAnnotations sets obj's finalizers and annotations to those given, in one JSON
// patch that first tests the stored object still has the finalizers and annotations obj was read
// with. A merge patch would replace the whole finalizer list, so it must be locked; locked on the
// resourceVersion, every other write to the object fails it, and Cluster API writes its
// infrastructure machines (labels, owners) while the provider records their place and lets them
// go: a conflict, and a reconcile more, for most machines. Locked on what it
// changes, a finalizer or annotation written meanwhile still fails it, as a conflict (retried
// quietly); nothing else does. obj becomes the server's answer (see objstatus.Scope.PatchMeta).
func PatchFinalizersAndAnnotations[O client.Object, S any](ctx context.Context, c client.Client, s *objstatus.Scope[O, S], obj O, finalizers []string, annotations map[string]string) error {
	patch, err := finalizersAndAnnotationsPatch(obj, finalizers, annotations)
	if err != nil {
		return err
	}
	err = s.PatchMeta(ctx, c, patch)
	if failedTest(err) {
		return apierrors.NewConflict(schema.GroupResource{Resource: obj.GetObjectKind().GroupVersionKind().Kind}, obj.GetName(),
			errors.New("its finalizers or annotations changed since it was read"))
	}
	return err
}

// RemoveFinalizer removes finalizer from obj (see PatchFinalizersAndAnnotations); nothing is
// written if obj does not hold it.
func RemoveFinalizer[O client.Object, S any](ctx context.Context, c client.Client, s *objstatus.Scope[O, S], obj O, finalizer string) error {
	if !slices.Contains(obj.GetFinalizers(), finalizer) {
		return nil
	}
	keep := slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == finalizer })
	return PatchFinalizersAndAnnotations(ctx, c, s, obj, keep, obj.GetAnnotations())
}

// finalizersAndAnnotationsPatch is the JSON patch of PatchFinalizersAndAnnotations. A test of a
// member with null passes when it is absent (RFC 6902 as the API server's json-patch reads it).
func finalizersAndAnnotationsPatch(read client.Object, finalizers []string, annotations map[string]string) (client.Patch, error) {
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": nilIfEmpty(read.GetFinalizers())},
		{"op": "test", "path": "/metadata/annotations", "value": nilIfEmptyMap(read.GetAnnotations())},
	}
	set := func(path string, value any, empty, present bool) {
		switch {
		case !empty:
			ops = append(ops, map[string]any{"op": "add", "path": path, "value": value}) // add replaces a member that exists
		case present:
			ops = append(ops, map[string]any{"op": "remove", "path": path})
		}
	}
	set("/metadata/finalizers", finalizers, len(finalizers) == 0, len(read.GetFinalizers()) > 0)
	set("/metadata/annotations", annotations, len(annotations) == 0, len(read.GetAnnotations()) > 0)
	body, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.JSONPatchType, body), nil
}

// nilIfEmpty and nilIfEmptyMap are how an absent list or map reads in a JSON patch's test: the
// API server drops empty ones, so the stored object has none.
func nilIfEmpty(s []string) any {
	if len(s) == 0 {
		return nil
	}
	return s
}

func nilIfEmptyMap(m map[string]string) any {
	if len(m) == 0 {
		return nil
	}
	return m
}

// failedTest reports whether the API server refused a JSON patch because a test failed: an
// Invalid answer without the field causes a validation failure carries.
func failedTest(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	return details == nil || len(details.Causes) == 0
}
