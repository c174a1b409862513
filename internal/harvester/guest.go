package harvester

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A guest identity is what a cluster whose nodes are VMs on Harvester (a guest cluster) needs
// to run Harvester's cloud provider and CSI driver. Harvester's own guest integration
// (harvester/harvester pkg/api/kubeconfig/generate_handler.go at 3d63c2af) binds Harvester's CSI
// driver role cluster-wide, which lets every guest patch every VM on Harvester (and, from
// Harvester v1.7, reach every VolumeSnapshot). The provider binds narrower, so that a tenant who
// reads its cluster's cloud-config reaches nothing past its own Harvester namespace:
//
//   - a ServiceAccount in the VMs' namespace;
//   - RoleBindings in that namespace to Harvester's ClusterRoles harvesterhci.io:cloudprovider
//     and harvesterhci.io:csi-driver: through a RoleBinding a ClusterRole grants its namespaced
//     rules in that namespace only, and none of its cluster-scoped ones (snapshot contents and
//     classes, Harvester settings, storage classes);
//   - a ClusterRoleBinding to GuestReaderRole, a read-only ClusterRole the operator installs with
//     config/harvester/guest-rbac.yaml (the provider binds it by name and never creates it): what
//     the CSI driver reads outside the namespace (storage classes, volume attachments, two named
//     settings);
//   - a kubernetes.io/service-account-token Secret, which kube-controller-manager fills in with a
//     token that lives until the Secret (or the ServiceAccount) is deleted. A re-issued token goes
//     to a second Secret, so that the one before keeps working while the new one reaches the
//     tenant; re-issues alternate between the two;
//   - a kubeconfig of that token whose context namespace is the VMs' namespace, and whose server is
//     where tenants reach Harvester: as Harvester's generator writes it, its VIP (ConfigMap
//     harvester-system/vip, key ip) on port 6443, trusted by the token's CA (GuestEndpoint says
//     the exceptions). It never skips TLS verification.
//
// What that leaves out of Harvester's own binding: NetworkFilesystems in harvester-system (RWX
// volumes; RBAC cannot limit them to one tenant's) and everything cluster-scoped of snapshots.
// docs/harvester-rbac.md has the table, per Harvester version.
//
// Identities made with Harvester's cluster-wide binding are narrowed in place: the new bindings
// are made, then the old ClusterRoleBinding is deleted; the ServiceAccount and its token stay.
//
// Every object carries the owner's labels; their names derive from the owner's namespace and
// name only, so the owner finds them again from another management cluster after a move.

// Harvester's ClusterRoles a guest identity is bound to in its namespace (harvester/harvester
// deploy/charts/harvester/templates/rbac.yaml).
const (
	GuestCloudProviderRole = "harvesterhci.io:cloudprovider"
	GuestCSIDriverRole     = "harvesterhci.io:csi-driver"
)

// GuestReaderRole is the read-only ClusterRole config/harvester/guest-rbac.yaml installs on
// Harvester, the one cluster-wide grant of a guest identity.
const GuestReaderRole = "butler-provider-harvester:guest-reader"

// GuestReaderClusterRole is GuestReaderRole as config/harvester/guest-rbac.yaml installs it (a
// test holds the two equal): what Harvester's CSI driver v0.2.9 reads outside its namespace
// (harvester/harvester-csi-driver at 97b6c358, whose Go code is v0.2.9's), and nothing more:
//
//   - get storage classes by name (pkg/csi/controller_server.go: validStorageClass,
//     isLHRWXVolume, buildHostPVCFromSnap);
//   - list volume attachments (controller_server.go: waitForVASettled, before a hot-plug);
//   - get the settings csi-driver-config (CreateSnapshot) and csi-online-expand-validation
//     (ControllerExpandVolume, node_server.go NodeExpandVolume). The driver's other setting,
//     server-version, Harvester grants every authenticated user (harvester/harvester
//     pkg/data/rbac.go).
//
// Left out of what harvesterhci.io:csi-driver grants cluster-wide, each degrading to a warning in
// the driver: Longhorn volumes (one list at start whose result is dropped), NetworkFilesystems in
// harvester-system (RWX volumes: listed at start to advertise RWX, then made, changed and
// deleted by name; RBAC cannot limit them to one tenant's, so managed credentials offer no RWX),
// VolumeRemoteBackups of every namespace (ListSnapshots), and snapshot contents and classes (the
// driver reads none). The cloud provider reads nothing outside its namespace.
func GuestReaderClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: GuestReaderRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"list"}},
			{APIGroups: []string{"harvesterhci.io"}, Resources: []string{"settings"}, ResourceNames: []string{"csi-driver-config", "csi-online-expand-validation"}, Verbs: []string{"get"}},
		},
	}
}

// guestTokenRetry is how soon to look again at a token Secret kube-controller-manager has not
// filled in yet (it does so within a second or two).
const guestTokenRetry = 2 * time.Second

// Reasons of a guest identity's waits.
const (
	// ReasonGuestTokenPending means the token Secret exists but has no token yet.
	ReasonGuestTokenPending = "GuestTokenPending"
	// ReasonGuestReaderRoleMissing means GuestReaderRole is not installed on Harvester.
	ReasonGuestReaderRoleMissing = "GuestReaderRoleMissing"
)

// guestReaderRoleRetry is how soon to look again for GuestReaderRole, which a person installs.
const guestReaderRoleRetry = time.Minute

// GuestSpec is the guest identity of one owner.
type GuestSpec struct {
	Owner Owner
	// Namespace is the VMs' namespace on Harvester: where the identity lives, what its binding
	// to the cloud provider's role covers, and its kubeconfig's context namespace.
	Namespace string
	// Endpoint is where the operator says tenants reach Harvester (empty: its VIP).
	Endpoint GuestEndpoint
	// TokenSecret names the token Secret whose token is delivered (GuestNames' TokenSecret or
	// SpareTokenSecret; empty: TokenSecret). A re-issue names the other one, and retires this
	// one later (RetireGuestToken).
	TokenSecret string
}

// GuestEndpoint is where tenant clusters reach Harvester when the operator says so: an address
// only the management cluster reaches (a proxy, an internal name) breaks tenants, and Harvester's
// VIP may not be reachable from the tenants' network either.
type GuestEndpoint struct {
	// Server, if set, is the API server URL the tenants' kubeconfig names. Empty: Harvester's VIP
	// on port 6443 (harvester/harvester pkg/api/kubeconfig/generate_handler.go, getServerURL),
	// else, where Harvester publishes none, the server the provider itself reaches.
	Server string
	// CA, if set, is the PEM bundle that server is trusted with; empty: the token's ca.crt
	// (Harvester's cluster CA), or the provider's own CA for its own server.
	CA []byte
}

// Harvester's VIP: ConfigMap vip of its namespace, key ip (harvester/harvester
// pkg/controller/master/rancher, VipConfigmapName and VIPConfig), and the port its kubeconfig
// generator names.
const (
	harvesterNamespace = "harvester-system"
	vipConfigMap       = "vip"
	vipKey             = "ip"
	vipPort            = "6443"
)

// GuestNames are the names of a guest identity's objects on Harvester.
type GuestNames struct {
	ServiceAccount string
	// TokenSecret and SpareTokenSecret hold the identity's tokens: re-issues alternate between
	// them (OtherTokenSecret), so that the token before stays valid until it is retired.
	TokenSecret, SpareTokenSecret string
	// RoleBinding binds GuestCloudProviderRole and CSIRoleBinding GuestCSIDriverRole, in the
	// namespace; ClusterRoleBinding binds GuestReaderRole.
	RoleBinding, CSIRoleBinding, ClusterRoleBinding string
	// WideClusterRoleBinding is where identities made before they were narrowed bound
	// GuestCSIDriverRole cluster-wide; it is deleted once the narrow bindings exist.
	WideClusterRoleBinding string
}

// guestPrefix starts the name of every guest identity.
const guestPrefix = "butler-guest-"

// GuestNamesFor names the guest identity of owner in namespace: the ServiceAccount and its
// cloud provider RoleBinding butler-guest-<owner namespace>-<owner name>-<hash>, its token Secret
// that name with -token (as generate_addon.sh names it), its CSI driver RoleBinding that name with
// -csi, and its ClusterRoleBinding the namespace, that name and -reader (cluster-wide names carry
// the namespace, as Harvester's generate_handler.go names them; the old wide binding is the
// namespace and that name). The hash of the owner's namespace and name keeps two owners apart
// whose joined names are the same; names are shortened to fit 63 characters.
func GuestNamesFor(owner Owner, namespace string) GuestNames {
	sum := sha256.Sum256([]byte(owner.kind() + "/" + owner.Namespace + "/" + owner.Name))
	hash := hex.EncodeToString(sum[:])[:8]
	const maxBase = validation.DNS1123LabelMaxLength - len("-token")
	base := strings.ToLower(owner.Namespace + "-" + owner.Name)
	if room := maxBase - len(guestPrefix) - len(hash) - 1; len(base) > room {
		base = strings.TrimRight(base[:room], "-.")
	}
	sa := guestPrefix + strings.ReplaceAll(base, ".", "-") + "-" + hash
	return GuestNames{
		ServiceAccount: sa, TokenSecret: sa + "-token", SpareTokenSecret: concatName(sa, "token2"),
		RoleBinding: sa, CSIRoleBinding: sa + "-csi", ClusterRoleBinding: concatName(namespace, sa+"-reader"),
		WideClusterRoleBinding: concatName(namespace, sa),
	}
}

// OtherTokenSecret is the token Secret a token re-issued from the one in name goes to.
func (n GuestNames) OtherTokenSecret(name string) string {
	if name == n.SpareTokenSecret {
		return n.TokenSecret
	}
	return n.SpareTokenSecret
}

// concatName joins two names with "-", shortened to 63 characters with a hash of the whole when
// longer (as wrangler's name.SafeConcatName, which Harvester names its bindings with).
func concatName(a, b string) string {
	name := a + "-" + b
	if len(name) <= validation.DNS1123LabelMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:])[:8]
	return strings.TrimRight(name[:validation.DNS1123LabelMaxLength-len(hash)-1], "-.") + "-" + hash
}

// guestLabels are the labels of a guest identity's objects: the owner's, without its UID. A
// guest identity is recognised by its owner's kind, namespace and name: it survives the owner
// being moved to another management cluster (a new UID) by name.
func guestLabels(o Owner) map[string]string {
	l := ownerLabels(o, "")
	delete(l, LabelMachineRequestUID)
	delete(l, LabelManagementCluster)
	return l
}

// isGuestOf reports whether an object on Harvester belongs to owner's guest identity.
func isGuestOf(obj metav1.Object, o Owner) bool {
	l := obj.GetLabels()
	return l[LabelManagedBy] == ManagedByValue && l[LabelOwnerKind] == o.kind() &&
		l[LabelMachineRequestNamespace] == o.Namespace && l[LabelMachineRequestName] == labelSafe(o.Name) &&
		obj.GetAnnotations()[AnnotationMachineRequest] == o.Namespace+"/"+o.Name
}

func guestMeta(o Owner, namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: guestLabels(o), Annotations: ownerAnnotations(o)}
}

// BuildGuestServiceAccount is the guest identity's ServiceAccount. It mounts no token into pods:
// nothing runs as it on Harvester.
func BuildGuestServiceAccount(o Owner, namespace string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   guestMeta(o, namespace, GuestNamesFor(o, namespace).ServiceAccount),
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// BuildGuestTokenSecret is the token Secret of sa, as generate_addon.sh writes it: annotated
// with the ServiceAccount's name and UID (kube-controller-manager's token controller fills in
// token, ca.crt and namespace, and deletes a Secret whose UID is not the ServiceAccount's), and
// owned by it, so that the garbage collector deletes it with the ServiceAccount.
func BuildGuestTokenSecret(o Owner, sa *corev1.ServiceAccount, name string) *corev1.Secret {
	meta := guestMeta(o, sa.Namespace, name)
	meta.Annotations[corev1.ServiceAccountNameKey] = sa.Name
	meta.Annotations[corev1.ServiceAccountUIDKey] = string(sa.UID)
	meta.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ServiceAccount", Name: sa.Name, UID: sa.UID}}
	return &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeServiceAccountToken}
}

// BuildGuestRoleBinding binds the ServiceAccount to Harvester's cloud provider role in the VMs'
// namespace only (Harvester's generate_handler.go does the same).
func BuildGuestRoleBinding(o Owner, namespace string) *rbacv1.RoleBinding {
	names := GuestNamesFor(o, namespace)
	return guestRoleBinding(o, namespace, names.RoleBinding, GuestCloudProviderRole)
}

// BuildGuestCSIRoleBinding binds the ServiceAccount to Harvester's CSI driver role in the VMs'
// namespace only, where Harvester binds it cluster-wide: its VM patches and snapshots then reach
// this namespace's alone, and its cluster-scoped rules nothing (GuestReaderRole reads what the
// driver needs of them).
func BuildGuestCSIRoleBinding(o Owner, namespace string) *rbacv1.RoleBinding {
	names := GuestNamesFor(o, namespace)
	return guestRoleBinding(o, namespace, names.CSIRoleBinding, GuestCSIDriverRole)
}

func guestRoleBinding(o Owner, namespace, name, clusterRole string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: guestMeta(o, namespace, name),
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: GuestNamesFor(o, namespace).ServiceAccount}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
	}
}

// BuildGuestClusterRoleBinding binds the ServiceAccount to GuestReaderRole, cluster-wide: the
// storage classes, volume attachments and settings the CSI driver reads are cluster-scoped.
func BuildGuestClusterRoleBinding(o Owner, namespace string) *rbacv1.ClusterRoleBinding {
	names := GuestNamesFor(o, namespace)
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: guestMeta(o, "", names.ClusterRoleBinding),
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: names.ServiceAccount}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: GuestReaderRole},
	}
}

// GuestTokenFile is where the tenant's cloud provider and CSI driver find the token of their
// cloud-config as a file of its own: the tenant Secret mounted as a directory there (the cluster
// templates do). client-go reads a kubeconfig's tokenFile again every minute, where both
// components read the kubeconfig itself once, at start (cloud-provider-harvester ccm.go,
// harvester-csi-driver pkg/csi/manager.go): a re-issued token reaches them without a restart.
// It is absolute because the cloud provider resolves no path against its kubeconfig's directory
// (clientcmd.NewClientConfigFromBytes), and the two mount the Secret at different places.
const GuestTokenFile = "/var/run/secrets/harvester/token" //nolint:gosec // G101: a path, not a credential

// BuildGuestKubeconfig is the kubeconfig of a guest identity's token: server trusted with ca (the
// system roots when empty; never without verification), and the VMs' namespace as the context's
// namespace (the cloud provider looks VMs up there, and the CSI driver works there; the driver
// takes its pod's namespace when the context names none). The token is inline, and its file
// GuestTokenFile too: client-go uses the inline one at start and where the file is missing (a
// pod from older templates, which mount no such directory), and the file's once it reads it.
func BuildGuestKubeconfig(server string, ca []byte, namespace string, token []byte) ([]byte, error) {
	c := clientcmdapi.NewConfig()
	c.Clusters["harvester"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	c.AuthInfos["harvester"] = &clientcmdapi.AuthInfo{Token: string(token), TokenFile: GuestTokenFile}
	c.Contexts["harvester"] = &clientcmdapi.Context{Cluster: "harvester", AuthInfo: "harvester", Namespace: namespace}
	c.CurrentContext = "harvester"
	return clientcmd.Write(*c)
}

// GuestPermissions is what making, re-issuing, narrowing and deleting the guest identity of VMs'
// namespace needs, beyond nothing: the ServiceAccount, its token Secret, its RoleBindings and
// ClusterRoleBindings, bind on exactly the three roles it binds (binding a role needs either bind
// on it or every permission it grants; bind, limited to these names, is the narrower), and get on
// GuestReaderRole, to say when it is not installed. No escalate, no update: nothing is ever
// changed in place.
func GuestPermissions(namespace string) []Permission {
	var out []Permission
	add := func(ns, group, resource string, verbs ...string) {
		for _, v := range verbs {
			out = append(out, Permission{Verb: v, Group: group, Resource: resource, Namespace: ns})
		}
	}
	// list: guest identities of other owners in the namespace (GuestNeighbours).
	add(namespace, "", "serviceaccounts", "get", "list", "create", "delete")
	add(namespace, "", "secrets", "get", "create", "delete")
	add(namespace, rbacv1.GroupName, "rolebindings", "get", "create", "delete")
	add("", rbacv1.GroupName, "clusterrolebindings", "get", "create", "delete")
	// Harvester's VIP, for the tenants' server.
	out = append(out, Permission{Verb: "get", Resource: "configmaps", Namespace: harvesterNamespace, Name: vipConfigMap})
	// A RoleBinding's bind is checked in its namespace, a ClusterRoleBinding's cluster-wide.
	out = append(out,
		Permission{Verb: "bind", Group: rbacv1.GroupName, Resource: "clusterroles", Name: GuestCloudProviderRole, Namespace: namespace},
		Permission{Verb: "bind", Group: rbacv1.GroupName, Resource: "clusterroles", Name: GuestCSIDriverRole, Namespace: namespace},
		Permission{Verb: "bind", Group: rbacv1.GroupName, Resource: "clusterroles", Name: GuestReaderRole},
		Permission{Verb: "get", Group: rbacv1.GroupName, Resource: "clusterroles", Name: GuestReaderRole})
	return out
}

// GuestCredentials is an issued guest identity.
type GuestCredentials struct {
	// Kubeconfig is the guest's cloud-config. Secret material: never log it.
	Kubeconfig []byte
	// Source names what it was issued from (see GuestCluster.GuestSource).
	Source string
	// Token is the kubeconfig's token, and TokenSecret the Secret that holds it. Secret
	// material: never log the token.
	Token       []byte
	TokenSecret string
	// Endpoint names the server and CA the kubeconfig points the tenant at (GuestState's).
	Endpoint string
	// Issued is true when this call issued a new token.
	Issued bool
}

// GuestCluster makes, re-issues and deletes guest identities on one Harvester cluster. The
// engine's Cluster implements it.
type GuestCluster interface {
	// GuestSource names, without a request, the provider's credentials and the namespace a
	// guest identity of namespace would be issued with now: when a delivered identity's source
	// differs, its token is to be re-issued.
	GuestSource(namespace string) string
	// MissingGuestPermissions asks Harvester (SelfSubjectAccessReviews) which of
	// GuestPermissions(namespace) the provider's credentials lack.
	MissingGuestPermissions(ctx context.Context, namespace string) ([]Permission, error)
	// EnsureGuest makes whatever of the identity does not exist (a token in spec.TokenSecret
	// included), and returns its kubeconfig; a WaitingError with ReasonGuestTokenPending while the
	// token is not filled in. It never changes an object that is not the owner's
	// (ReasonNameTaken).
	EnsureGuest(ctx context.Context, spec GuestSpec) (GuestCredentials, error)
	// RetireGuestToken deletes the owner's token Secret name, which revokes its token: the API
	// server accepts a Secret-based token only while its Secret exists. Done once it is gone.
	RetireGuestToken(ctx context.Context, owner Owner, namespace, name string) (done bool, err error)
	// CheckGuest looks at a delivered identity that nothing else changed: whether its token
	// Secret still exists with the token that kubeconfig carries, whether it is bound as
	// EnsureGuest binds it now, and where tenants are to reach Harvester now (four reads).
	CheckGuest(ctx context.Context, owner Owner, namespace, tokenSecret string, kubeconfig []byte, endpoint GuestEndpoint) (GuestState, error)
	// GuestNeighbours lists what in namespace belongs to others than ours says: VMs, PVCs and
	// guest identities, by their owner labels (an object without them is the operator's).
	// Unlabelled PVCs count only with unlabelledClaims: Harvester's CSI driver makes the volumes
	// of a guest's own PersistentVolumes without labels.
	GuestNeighbours(ctx context.Context, namespace string, ours func(OwnerRef) bool, unlabelledClaims bool) (Neighbours, error)
	// DeleteGuest deletes the identity's objects in namespace that are the owner's; done once
	// none is left.
	DeleteGuest(ctx context.Context, owner Owner, namespace string) (done bool, err error)
}

var _ GuestCluster = (*engine)(nil)

// GuestSource implements GuestCluster: a hash of the credentials' digest, the server and the
// namespace.
func (c *engine) GuestSource(namespace string) string {
	rc := c.remote.cluster
	sum := sha256.Sum256([]byte(rc.CredentialsDigest() + "\x00" + rc.Server() + "\x00" + namespace))
	return hex.EncodeToString(sum[:])[:16]
}

// MissingGuestPermissions implements GuestCluster.
func (c *engine) MissingGuestPermissions(ctx context.Context, namespace string) ([]Permission, error) {
	perms := GuestPermissions(namespace)
	allowed, err := c.remote.reviewAccess(ctx, perms)
	if err != nil {
		return nil, err
	}
	var missing []Permission
	for i, p := range perms {
		if !allowed[i] {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// EnsureGuest implements GuestCluster.
func (c *engine) EnsureGuest(ctx context.Context, spec GuestSpec) (GuestCredentials, error) {
	r := c.remote
	sa := BuildGuestServiceAccount(spec.Owner, spec.Namespace)
	if err := r.ensureGuestObject(ctx, spec.Owner, sa, "ServiceAccount"); err != nil {
		return GuestCredentials{}, err
	}
	if err := r.ensureGuestObject(ctx, spec.Owner, BuildGuestRoleBinding(spec.Owner, spec.Namespace), "RoleBinding"); err != nil {
		return GuestCredentials{}, err
	}
	if err := r.ensureGuestObject(ctx, spec.Owner, BuildGuestCSIRoleBinding(spec.Owner, spec.Namespace), "RoleBinding"); err != nil {
		return GuestCredentials{}, err
	}
	if err := r.readerRoleInstalled(ctx); err != nil {
		return GuestCredentials{}, err
	}
	if err := r.ensureGuestObject(ctx, spec.Owner, BuildGuestClusterRoleBinding(spec.Owner, spec.Namespace), "ClusterRoleBinding"); err != nil {
		return GuestCredentials{}, err
	}
	if err := r.deleteWideBinding(ctx, spec.Owner, spec.Namespace); err != nil {
		return GuestCredentials{}, err
	}
	secret, issued, err := r.ensureGuestToken(ctx, spec.Owner, sa, spec.tokenSecret())
	if err != nil {
		return GuestCredentials{}, err
	}
	server, ca, err := r.tenantServer(ctx, spec.Endpoint, secret.Data[corev1.ServiceAccountRootCAKey])
	if err != nil {
		return GuestCredentials{}, err
	}
	kubeconfig, err := BuildGuestKubeconfig(server, ca, spec.Namespace, secret.Data[corev1.ServiceAccountTokenKey])
	if err != nil {
		return GuestCredentials{}, err
	}
	return GuestCredentials{Kubeconfig: kubeconfig, Token: secret.Data[corev1.ServiceAccountTokenKey], TokenSecret: secret.Name,
		Source: c.GuestSource(spec.Namespace), Endpoint: endpointID(server, ca), Issued: issued}, nil
}

func (s GuestSpec) tokenSecret() string {
	if s.TokenSecret != "" {
		return s.TokenSecret
	}
	return GuestNamesFor(s.Owner, s.Namespace).TokenSecret
}

// tenantServer says where the tenants' kubeconfig points, and with which CA (see GuestEndpoint):
// the operator's endpoint, else Harvester's VIP with the token's CA, else, where Harvester
// publishes no VIP, the provider's own server with its own CA (or the token's, where the
// provider's credentials skip verification: tenants never do).
func (m *remote) tenantServer(ctx context.Context, override GuestEndpoint, tokenCA []byte) (string, []byte, error) {
	if override.Server != "" {
		if len(override.CA) > 0 {
			return override.Server, override.CA, nil
		}
		return override.Server, tokenCA, nil
	}
	cm := &corev1.ConfigMap{}
	switch err := m.c.Get(ctx, client.ObjectKey{Namespace: harvesterNamespace, Name: vipConfigMap}, cm); {
	case err == nil && net.ParseIP(cm.Data[vipKey]) != nil:
		return "https://" + net.JoinHostPort(cm.Data[vipKey], vipPort), tokenCA, nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", nil, classify(err, "get ConfigMap "+harvesterNamespace+"/"+vipConfigMap)
	}
	if ca := m.cluster.Trust().CAData; len(ca) > 0 {
		return m.cluster.Server(), ca, nil
	}
	return m.cluster.Server(), tokenCA, nil
}

// endpointID names a tenant endpoint for the record of what was delivered: the server and a hash
// of its CA.
func endpointID(server string, ca []byte) string {
	sum := sha256.Sum256(ca)
	return server + "#" + hex.EncodeToString(sum[:])[:12]
}

// readerRoleInstalled says, with ReasonGuestReaderRoleMissing, when GuestReaderRole is not on
// Harvester: a binding to a ClusterRole that does not exist is accepted and grants nothing, and
// the CSI driver would then fail on its first read.
func (m *remote) readerRoleInstalled(ctx context.Context) error {
	err := m.c.Get(ctx, client.ObjectKey{Name: GuestReaderRole}, &rbacv1.ClusterRole{})
	if apierrors.IsNotFound(err) {
		return Waiting(ReasonGuestReaderRoleMissing, guestReaderRoleRetry,
			"ClusterRole %s is not on Harvester: apply config/harvester/guest-rbac.yaml there (docs/harvester-rbac.md)", GuestReaderRole)
	}
	return classify(err, "get ClusterRole "+GuestReaderRole)
}

// deleteWideBinding deletes the owner's cluster-wide binding of GuestCSIDriverRole, which
// identities made before they were narrowed have; someone else's of that name is left alone.
func (m *remote) deleteWideBinding(ctx context.Context, o Owner, namespace string) error {
	crb := &rbacv1.ClusterRoleBinding{}
	key := client.ObjectKey{Name: GuestNamesFor(o, namespace).WideClusterRoleBinding}
	if ours, err := m.guestObject(ctx, o, key, crb, "ClusterRoleBinding"); err != nil || !ours {
		return err
	}
	uid := crb.UID
	if err := m.c.Delete(ctx, crb, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return classify(err, "delete "+guestObjectName("ClusterRoleBinding", crb))
	}
	return nil
}

// ensureGuestObject creates obj, or finds it made for the owner (obj is then what exists).
func (m *remote) ensureGuestObject(ctx context.Context, o Owner, obj client.Object, kind string) error {
	what := guestObjectName(kind, obj)
	err := m.c.Create(ctx, obj)
	if !apierrors.IsAlreadyExists(err) {
		return createError(err, what)
	}
	if err := m.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return classify(err, "get "+what)
	}
	if !isGuestOf(obj, o) {
		return Permanent(ReasonNameTaken, "%s exists on Harvester and was not made for %s: the provider never changes it; delete or rename it", what, o)
	}
	return nil
}

func guestObjectName(kind string, obj client.Object) string {
	if obj.GetNamespace() == "" {
		return kind + " " + obj.GetName()
	}
	return kind + " " + obj.GetNamespace() + "/" + obj.GetName()
}

// ensureGuestToken returns token Secret name of sa, filled in, creating it if needed, and making
// it again when it was made for an earlier ServiceAccount of the same name.
func (m *remote) ensureGuestToken(ctx context.Context, o Owner, sa *corev1.ServiceAccount, name string) (filled *corev1.Secret, issued bool, err error) {
	want := BuildGuestTokenSecret(o, sa, name)
	what := guestObjectName("Secret", want)
	secret := &corev1.Secret{}
	switch err := m.c.Get(ctx, client.ObjectKeyFromObject(want), secret); {
	case apierrors.IsNotFound(err):
		secret = nil
	case err != nil:
		return nil, false, classify(err, "get "+what)
	case !isGuestOf(secret, o) || secret.Type != corev1.SecretTypeServiceAccountToken:
		return nil, false, Permanent(ReasonNameTaken, "%s exists on Harvester and was not made for %s: the provider never changes it; delete or rename it", what, o)
	case secret.Annotations[corev1.ServiceAccountUIDKey] != string(sa.UID):
		// The token of a ServiceAccount that is gone: kube-controller-manager deletes it anyway.
		if err := m.c.Delete(ctx, secret, client.Preconditions{UID: &secret.UID}); client.IgnoreNotFound(err) != nil {
			return nil, false, classify(err, "delete "+what)
		}
		secret = nil
	}
	if secret == nil {
		secret = want
		if err := m.c.Create(ctx, secret); err != nil {
			return nil, false, createError(err, what)
		}
		issued = true
	}
	if len(secret.Data[corev1.ServiceAccountTokenKey]) == 0 {
		if err := m.c.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
			return nil, issued, classify(err, "get "+what)
		}
	}
	if len(secret.Data[corev1.ServiceAccountTokenKey]) == 0 {
		return nil, issued, Waiting(ReasonGuestTokenPending, guestTokenRetry,
			"the token of %s is not filled in yet (Harvester's kube-controller-manager does it)", what)
	}
	return secret, issued, nil
}

// RetireGuestToken implements GuestCluster.
func (c *engine) RetireGuestToken(ctx context.Context, owner Owner, namespace, name string) (bool, error) {
	secret := &corev1.Secret{}
	ours, err := c.remote.guestObject(ctx, owner, client.ObjectKey{Namespace: namespace, Name: name}, secret, "Secret")
	if err != nil || !ours {
		return err == nil, err
	}
	uid := secret.UID
	if err := c.remote.c.Delete(ctx, secret, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return false, classify(err, "delete "+guestObjectName("Secret", secret))
	}
	return false, nil
}

// GuestState is what CheckGuest found.
type GuestState struct {
	// TokenValid: the token Secret exists, the owner's, with the delivered kubeconfig's token.
	TokenValid bool
	// Narrow: the owner's GuestReaderRole binding exists and no cluster-wide binding of
	// GuestCSIDriverRole of the owner is left (false when the token is not valid).
	Narrow bool
	// Endpoint names where the tenants' kubeconfig is to point now (GuestCredentials'); when
	// it is not what was delivered, EnsureGuest writes the kubeconfig again, with the same
	// token. Empty when the token is not valid.
	Endpoint string
}

// CheckGuest implements GuestCluster.
func (c *engine) CheckGuest(ctx context.Context, owner Owner, namespace, tokenSecret string, kubeconfig []byte, endpoint GuestEndpoint) (GuestState, error) {
	names := GuestNamesFor(owner, namespace)
	if tokenSecret == "" {
		tokenSecret = names.TokenSecret
	}
	secret := &corev1.Secret{}
	found, err := c.remote.guestObject(ctx, owner, client.ObjectKey{Namespace: namespace, Name: tokenSecret}, secret, "Secret")
	if err != nil || !found {
		return GuestState{}, err
	}
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil || cfg.Contexts[cfg.CurrentContext] == nil {
		return GuestState{}, nil
	}
	user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	token := secret.Data[corev1.ServiceAccountTokenKey]
	if user == nil || len(token) == 0 || user.Token != string(token) {
		return GuestState{}, nil
	}
	server, ca, err := c.remote.tenantServer(ctx, endpoint, secret.Data[corev1.ServiceAccountRootCAKey])
	if err != nil {
		return GuestState{}, err
	}
	state := GuestState{TokenValid: true, Endpoint: endpointID(server, ca)}
	reader, err := c.remote.guestObject(ctx, owner, client.ObjectKey{Name: names.ClusterRoleBinding}, &rbacv1.ClusterRoleBinding{}, "ClusterRoleBinding")
	if err != nil || !reader {
		return state, err
	}
	wide, err := c.remote.guestObject(ctx, owner, client.ObjectKey{Name: names.WideClusterRoleBinding}, &rbacv1.ClusterRoleBinding{}, "ClusterRoleBinding")
	state.Narrow = !wide
	return state, err
}

// guestObject reads the object at key and reports whether it exists and is the owner's.
func (m *remote) guestObject(ctx context.Context, owner Owner, key client.ObjectKey, obj client.Object, kind string) (bool, error) {
	err := m.c.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		obj.SetNamespace(key.Namespace)
		obj.SetName(key.Name)
		return false, classify(err, "get "+guestObjectName(kind, obj))
	}
	return isGuestOf(obj, owner), nil
}

// DeleteGuest implements GuestCluster: the token Secrets first (which revokes the tokens at once),
// then the bindings, then the ServiceAccount.
func (c *engine) DeleteGuest(ctx context.Context, owner Owner, namespace string) (bool, error) {
	names := GuestNamesFor(owner, namespace)
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: names.TokenSecret}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: names.SpareTokenSecret}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: names.RoleBinding}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: names.CSIRoleBinding}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: names.ClusterRoleBinding}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: names.WideClusterRoleBinding}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: names.ServiceAccount}},
	}
	kinds := []string{"Secret", "Secret", "RoleBinding", "RoleBinding", "ClusterRoleBinding", "ClusterRoleBinding", "ServiceAccount"}
	left := 0
	for i, obj := range objs {
		what := guestObjectName(kinds[i], obj)
		switch err := c.remote.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return false, classify(err, "get "+what)
		case !isGuestOf(obj, owner):
			continue // not ours: never deleted
		}
		uid := obj.GetUID()
		if err := c.remote.c.Delete(ctx, obj, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return false, classify(err, "delete "+what)
		}
		// None of them has finalizers: each is gone at once, unless someone holds it.
		if err := c.remote.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			left++
		}
	}
	return left == 0, nil
}

// reviewAccess asks Harvester whether the credentials may do each of perms.
func (m *remote) reviewAccess(ctx context.Context, perms []Permission) ([]bool, error) {
	allowed := make([]bool, len(perms))
	for i, p := range perms {
		ok, err := selfReview(ctx, m.c, p)
		if err != nil {
			return nil, classify(err, "create a SelfSubjectAccessReview")
		}
		allowed[i] = ok
	}
	return allowed, nil
}

// selfReview asks whether the credentials may do p (a SelfSubjectAccessReview).
func selfReview(ctx context.Context, c client.Client, p Permission) (bool, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: p.Verb, Group: p.Group, Resource: p.Resource, Namespace: p.Namespace, Name: p.Name},
	}}
	if err := c.Create(ctx, review); err != nil {
		return false, err
	}
	return review.Status.Allowed, nil
}

// DescribePermissions lists permissions for messages, "; "-separated.
func DescribePermissions(perms []Permission) string {
	out := make([]string, len(perms))
	for i, p := range perms {
		out[i] = p.String()
	}
	return strings.Join(out, "; ")
}
