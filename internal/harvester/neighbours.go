package harvester

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A guest identity is bound to Harvester's cloud provider and CSI driver roles in its namespace,
// which reach every VM, VMI and PVC there: whoever holds it can stop, re-volume or delete what
// others keep in that namespace. GuestNeighbours finds those others, so that the front door
// issues an identity only in a namespace the cluster has to itself (or where the operator allows
// sharing), and says so of identities that already share one.

// OwnerRef names the owner an object on Harvester was made for, from its labels and annotations.
type OwnerRef struct {
	Kind, Namespace, Name string
}

func (o OwnerRef) String() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// Neighbours is what GuestNeighbours found.
type Neighbours struct {
	// Count is how many objects are others'.
	Count int
	// Examples names up to maxNeighbourExamples of them, for messages.
	Examples []string
}

// maxNeighbourExamples bounds the objects a message names.
const maxNeighbourExamples = 5

// String names the neighbours for a condition's message: "3 (VirtualMachine vms/a of
// MachineRequest ns/a, ...)".
func (n Neighbours) String() string {
	more := ""
	if n.Count > len(n.Examples) {
		more = fmt.Sprintf(" and %d more", n.Count-len(n.Examples))
	}
	return fmt.Sprintf("%d (%s%s)", n.Count, strings.Join(n.Examples, ", "), more)
}

// ownerRefOf reads the owner of an object on Harvester from its labels; false for an object
// this provider did not make (the operator's, or another tool's).
func ownerRefOf(obj metav1.Object) (OwnerRef, bool) {
	l := obj.GetLabels()
	if l[LabelManagedBy] != ManagedByValue {
		return OwnerRef{}, false
	}
	kind := l[LabelOwnerKind]
	if kind == "" {
		kind = OwnerKindMachineRequest
	}
	// The annotation has the name unabridged; the label may be hashed.
	if ns, name, ok := strings.Cut(obj.GetAnnotations()[AnnotationMachineRequest], "/"); ok {
		return OwnerRef{Kind: kind, Namespace: ns, Name: name}, true
	}
	return OwnerRef{Kind: kind, Namespace: l[LabelMachineRequestNamespace], Name: l[LabelMachineRequestName]}, true
}

// GuestNeighbours implements GuestCluster. It lists metadata only, live: what it counts are
// mostly objects the provider's caches do not hold (the operator's, other tools').
func (c *engine) GuestNeighbours(ctx context.Context, namespace string, ours func(OwnerRef) bool, unlabelledClaims bool) (Neighbours, error) {
	var n Neighbours
	kinds := []struct {
		gvk       schema.GroupVersionKind
		unlabeled bool // whether an object without our labels counts
		guests    bool // only guest identities count (other ServiceAccounts are Harvester's own)
	}{
		{gvk: kubevirtv1.SchemeGroupVersion.WithKind("VirtualMachine"), unlabeled: true},
		{gvk: corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"), unlabeled: unlabelledClaims},
		{gvk: corev1.SchemeGroupVersion.WithKind("ServiceAccount"), guests: true},
	}
	// The VMs come first: a state claim KubeVirt made for one of ours (StateClaimLabel, no
	// labels of ours) is ours too.
	oursVMs := map[string]bool{}
	for _, k := range kinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
		opts := []client.ListOption{client.InNamespace(namespace)}
		if k.guests {
			opts = append(opts, client.MatchingLabels{LabelManagedBy: ManagedByValue})
		}
		if err := c.remote.c.List(ctx, list, opts...); err != nil {
			return n, classify(err, fmt.Sprintf("list %ss in namespace %s", k.gvk.Kind, namespace))
		}
		for i := range list.Items {
			obj := &list.Items[i]
			if obj.DeletionTimestamp != nil {
				continue // going: it threatens nothing
			}
			owner, labelled := ownerRefOf(obj)
			switch {
			case labelled && ours(owner):
				if k.gvk.Kind == "VirtualMachine" {
					oursVMs[obj.Name] = true
				}
				continue
			case !labelled && !k.unlabeled, !labelled && oursVMs[obj.Labels[StateClaimLabel]]:
				continue
			}
			n.Count++
			if len(n.Examples) < maxNeighbourExamples {
				what := k.gvk.Kind + " " + namespace + "/" + obj.Name
				if labelled {
					what += " of " + owner.String()
				}
				n.Examples = append(n.Examples, what)
			}
		}
	}
	return n, nil
}
