package testbed

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// Cluster API's kinds, in their storage version (its conversion webhook serves the others, see
// StartClusterAPI).
var (
	ClusterGVK           = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"}
	MachineGVK           = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Machine"}
	MachineDeploymentGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"}
)

// Cluster API's labels.
const (
	ClusterNameLabel    = "cluster.x-k8s.io/cluster-name"
	DeploymentNameLabel = "cluster.x-k8s.io/deployment-name"
	ControlPlaneLabel   = "cluster.x-k8s.io/control-plane"
)

// ClusterAPIObject returns a Cluster API object of the kind with the spec given.
func ClusterAPIObject(gvk schema.GroupVersionKind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// TenantCluster describes a Cluster API workload (tenant) cluster on this provider as a user
// writes it without a control plane or bootstrap provider: a Cluster whose infrastructure is a
// HarvesterCluster with the control plane endpoint given, and machines whose bootstrap data is one
// Secret, named by spec.bootstrap.dataSecretName. Its methods build the objects; the caller
// creates them (CreateAll).
type TenantCluster struct {
	Namespace, Name string
	// ProviderConfig is the HarvesterCluster's spec.providerConfigRef (its namespace defaults to
	// Namespace).
	ProviderConfig infrav1.ProviderConfigReference
	// Endpoint is the control plane endpoint, given as a kube-vip VIP would be.
	Endpoint infrav1.APIEndpoint
	// FailureDomains are the HarvesterCluster's (none: machines go wherever Harvester puts them).
	FailureDomains []infrav1.HarvesterFailureDomain
	// MachineSpec is the spec of every HarvesterMachine.
	MachineSpec infrav1.HarvesterMachineSpec
	// GuestCredentials is the HarvesterCluster's spec.guestCredentials ("": the default, Managed).
	GuestCredentials infrav1.GuestCredentialsPolicy
	// BootstrapData is the bootstrap data of every machine; empty: a small cloud-config.
	BootstrapData string
}

// BootstrapSecretName names the Secret that holds the bootstrap data of every machine.
func (tc TenantCluster) BootstrapSecretName() string { return tc.Name + "-bootstrap" }

// Cluster returns the Cluster, its infrastructure the HarvesterCluster of the same name.
func (tc TenantCluster) Cluster() *unstructured.Unstructured {
	return ClusterAPIObject(ClusterGVK, tc.Namespace, tc.Name, map[string]any{
		"clusterNetwork":    map[string]any{"serviceDomain": "cluster.local"},
		"infrastructureRef": tc.infrastructureRef("HarvesterCluster", tc.Name),
	})
}

// ClusterObjects returns what the Cluster needs before its machines, in creation order: the
// HarvesterCluster, the bootstrap data Secret (a small cloud-config) and the Cluster.
func (tc TenantCluster) ClusterObjects() []client.Object {
	hc := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: tc.Namespace, Name: tc.Name},
		Spec: infrav1.HarvesterClusterSpec{ProviderConfigRef: tc.ProviderConfig,
			ControlPlaneEndpoint: tc.Endpoint, FailureDomains: tc.FailureDomains, GuestCredentials: tc.GuestCredentials}}
	bootstrap := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tc.Namespace, Name: tc.BootstrapSecretName()},
		Data: map[string][]byte{"value": []byte(tc.bootstrapData()), "format": []byte("cloud-config")}}
	return []client.Object{hc, bootstrap, tc.Cluster()}
}

func (tc TenantCluster) bootstrapData() string {
	if tc.BootstrapData == "" {
		return "#cloud-config\n"
	}
	return tc.BootstrapData
}

// Machine returns a standalone Machine of the cluster in failureDomain ("" for none) and its
// HarvesterMachine, both named name.
func (tc TenantCluster) Machine(name, failureDomain string) (*infrav1.HarvesterMachine, *unstructured.Unstructured) {
	hm := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tc.Namespace, Name: name}, Spec: tc.MachineSpec}
	spec := tc.machineSpec(tc.infrastructureRef("HarvesterMachine", name))
	if failureDomain != "" {
		spec["failureDomain"] = failureDomain
	}
	m := ClusterAPIObject(MachineGVK, tc.Namespace, name, spec)
	m.SetLabels(map[string]string{ClusterNameLabel: tc.Name})
	return hm, m
}

// ControlPlaneMachine returns a control plane Machine and its HarvesterMachine. Cluster API counts
// the control plane of a Cluster without a control plane provider initialized once such a Machine
// has a Node, and only then watches the tenant's Nodes (which links the other Machines to theirs
// at once) and remediates machines.
func (tc TenantCluster) ControlPlaneMachine(name string) (*infrav1.HarvesterMachine, *unstructured.Unstructured) {
	hm, m := tc.Machine(name, "")
	m.SetLabels(map[string]string{ClusterNameLabel: tc.Name, ControlPlaneLabel: ""})
	return hm, m
}

// MachineDeployment returns a MachineDeployment of replicas machines and its
// HarvesterMachineTemplate, both named name, as a user writes them: Cluster API's defaulting
// webhook adds the selector, the labels and the rollout strategy.
func (tc TenantCluster) MachineDeployment(name string, replicas int) (*infrav1.HarvesterMachineTemplate, *unstructured.Unstructured) {
	tmpl := &infrav1.HarvesterMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: tc.Namespace, Name: name},
		Spec: infrav1.HarvesterMachineTemplateSpec{Template: infrav1.HarvesterMachineTemplateResource{Spec: tc.MachineSpec}}}
	md := ClusterAPIObject(MachineDeploymentGVK, tc.Namespace, name, map[string]any{
		"clusterName": tc.Name,
		"replicas":    int64(replicas),
		"template":    map[string]any{"spec": tc.machineSpec(tc.infrastructureRef("HarvesterMachineTemplate", name))},
	})
	return tmpl, md
}

func (tc TenantCluster) machineSpec(infrastructureRef map[string]any) map[string]any {
	return map[string]any{
		"clusterName":       tc.Name,
		"bootstrap":         map[string]any{"dataSecretName": tc.BootstrapSecretName()},
		"infrastructureRef": infrastructureRef,
	}
}

func (tc TenantCluster) infrastructureRef(kind, name string) map[string]any {
	return map[string]any{"apiGroup": infrav1.GroupVersion.Group, "kind": kind, "name": name}
}

// CreateAll creates the objects in order.
func CreateAll(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

// Tenant is a second API server that plays a tenant cluster: Cluster API reaches it through the
// kubeconfig Secret StartTenant writes, and the kubelet player (PlayKubelets) registers its Nodes.
// Its serving certificate is signed by a CA of the testbed's (CA), as a hosted control plane's is
// by the cluster CA its provider keeps, so that the testbed can hand that CA over as the provider
// does (WriteClusterCA).
type Tenant struct {
	env     *envtest.Environment
	certDir string
	ca      keyPair
	Config  *rest.Config
	Client  client.Client
}

// StartTenant starts the tenant API server and gives Cluster API its kubeconfig as a control plane
// provider would: Secret <cluster>-kubeconfig in namespace, key value, type cluster.x-k8s.io/secret,
// labelled with the cluster's name. Stop it with Stop, also after an error.
func StartTenant(ctx context.Context, mgmt client.Client, namespace, cluster string) (*Tenant, error) {
	t := &Tenant{env: &envtest.Environment{}}
	if err := t.prepareCerts(); err != nil {
		return t, fmt.Errorf("the tenant API server's certificates: %w", err)
	}
	cfg, err := t.env.Start()
	if err != nil {
		return t, fmt.Errorf("start the tenant API server: %w", err)
	}
	t.Config = cfg
	if t.Client, err = client.New(cfg, client.Options{}); err != nil {
		return t, err
	}
	return t, mgmt.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster + "-kubeconfig", Labels: map[string]string{ClusterNameLabel: cluster}},
		Type:       "cluster.x-k8s.io/secret",
		Data:       map[string][]byte{"value": sim.KubeconfigFor(cfg)},
	})
}

// prepareCerts gives the API server a certificate directory that envtest takes as it is (it
// makes its own certificates only where apiserver.crt is missing): a serving certificate signed
// by the tenant's CA, and the key that signs service account tokens (sa-signer.crt, .key, the
// names envtest passes to the API server). The client configuration trusts that CA.
func (t *Tenant) prepareCerts() error {
	dir, err := os.MkdirTemp("", "tenant-certs-")
	if err != nil {
		return err
	}
	t.certDir = dir
	if t.ca, err = newCA("tenant cluster CA"); err != nil {
		return err
	}
	serving, err := t.ca.issueServing()
	if err != nil {
		return err
	}
	if err := serving.write(dir, "apiserver.crt", "apiserver.key"); err != nil {
		return err
	}
	signer, err := newCA("tenant service account signer")
	if err != nil {
		return err
	}
	if err := signer.write(dir, "sa-signer.crt", "sa-signer.key"); err != nil {
		return err
	}
	server := &envtest.APIServer{CertDir: dir}
	server.CA = t.ca.certPEM
	t.env.ControlPlane.APIServer = server
	return nil
}

// CA is the certificate (PEM) of the CA that signs the tenant API server's serving certificate.
func (t *Tenant) CA() []byte { return t.ca.certPEM }

// Endpoint is the tenant API server's address, host:port: the endpoint of a hosted control plane.
func (t *Tenant) Endpoint() (string, error) {
	server, err := url.Parse(t.Config.Host)
	if err != nil {
		return "", err
	}
	return server.Host, nil
}

// WriteClusterCA writes the cluster CA Secret a control plane provider keeps for Cluster API
// (Steward and the kubeadm control plane provider alike): <cluster>-ca in namespace, tls.crt and
// tls.key of the CA that signs the tenant API server's certificate, type cluster.x-k8s.io/secret,
// labelled with the cluster's name. The kubeadm bootstrap provider reads it to give joining nodes
// the CA's hash (discovery.bootstrapToken.caCertHashes).
func (t *Tenant) WriteClusterCA(ctx context.Context, mgmt client.Client, namespace, cluster string) error {
	return mgmt.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster + "-ca", Labels: map[string]string{ClusterNameLabel: cluster}},
		Type:       "cluster.x-k8s.io/secret",
		Data:       map[string][]byte{corev1.TLSCertKey: t.ca.certPEM, corev1.TLSPrivateKeyKey: t.ca.keyPEM},
	})
}

// Stop stops the tenant API server.
func (t *Tenant) Stop() error {
	err := t.env.Stop()
	if t.certDir != "" {
		err = errors.Join(err, os.RemoveAll(t.certDir))
	}
	return err
}
