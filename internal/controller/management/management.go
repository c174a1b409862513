package management

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// IdentifyManagementCluster reads the UID of the management cluster's kube-system namespace, which
// stays the same for the cluster's life, whatever URL reaches it. Without permission to read it
// (get on that one namespace) the objects are not labelled with it, and a left-over VM of the same
// MachineRequest namespace and name is taken over as by earlier versions: said once in the log.
func IdentifyManagementCluster(ctx context.Context, reader client.Reader, logger logr.Logger) string {
	ns := &corev1.Namespace{}
	if err := reader.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		logger.Info("Cannot read the management cluster's identity (the UID of namespace kube-system): objects on Harvester are not labelled with it, and a left-over VM of a MachineRequest of the same namespace and name is taken over whichever management cluster made it; grant get on namespace kube-system",
			"reason", err.Error())
		return ""
	}
	return string(ns.UID)
}
