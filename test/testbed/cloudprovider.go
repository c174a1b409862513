package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// The delivery contract of the tenant's Harvester credentials (docs/cluster-api.md), spelled here
// on the harness's side, as Cluster API's ClusterResourceSet and Harvester's cloud provider read
// them; the provider's spelling is its own (internal/controller/harvestercluster_guest.go).
const (
	// CloudConfigSecretSuffix: the provider delivers Secret <Cluster name>-harvester-cloud-config
	// in the Cluster's namespace.
	CloudConfigSecretSuffix = "-harvester-cloud-config"
	// CloudConfigSecretKey is its key: the YAML of the Secret a ClusterResourceSet applies.
	CloudConfigSecretKey = "cloud-config.yaml" //nolint:gosec // G101: a key name, not a credential
	// ClusterResourceSetSecretType is the type a ClusterResourceSet takes Secrets of.
	ClusterResourceSetSecretType corev1.SecretType = "addons.cluster.x-k8s.io/resource-set" //nolint:gosec // G101: a Secret type, not a credential
	// TenantCloudConfigNamespace, TenantCloudConfigName and TenantCloudConfigKey are the Secret and
	// key the cloud provider mounts as /etc/kubernetes/cloud-config (and the CSI driver as
	// /etc/csi/cloud-config) in the tenant cluster.
	TenantCloudConfigNamespace = "kube-system"
	TenantCloudConfigName      = "cloud-config"
	TenantCloudConfigKey       = "cloud-config"
	// TenantSecretMount is where the cluster templates mount that Secret, as a directory, in
	// both components' pods too: the kubeconfig's tokenFile points into it.
	TenantSecretMount = "/var/run/secrets/harvester" //nolint:gosec // G101: a path, not a credential
)

// cloudProviderTick is how often the player looks at the tenant's Nodes, and
// addressRefreshInterval how often it looks at their VMIs' addresses again (the real node
// controller's period is five minutes: the tests do not wait that long).
const (
	cloudProviderTick      = 200 * time.Millisecond
	addressRefreshInterval = time.Second
)

// CloudProvider plays, for one tenant cluster, two parts that stand between the provider's
// delivered credentials and a Node's providerID, each acting only on what that part really has:
//
//   - Cluster API's ClusterResourceSet (strategy Reconcile): it applies the Secret manifest the
//     delivered Secret <cluster>-harvester-cloud-config carries into the tenant cluster (Secret
//     kube-system/cloud-config), and again whenever it changes;
//   - kubelet's Secret volume: the tenant Secret's keys as files in a directory, written again
//     when the Secret changes (TenantSecretMount in the pod, a directory of the player's here);
//   - Harvester's cloud provider (harvester/cloud-provider-harvester pkg/cloud-controller-manager,
//     ccm.go and instance.go): from that tenant Secret alone, read once when it starts (ccm.go's
//     newCloudProvider reads its cloud-config once, and so does the player until Restart), it
//     builds its Harvester client with client-go (the kubeconfig's current context; its
//     namespace, "default" if none, is where VMs are looked up; a tokenFile in the mounted
//     directory is read again every minute, as client-go does), finds each Node's VM by the
//     Node's name, and sets spec.providerID harvester://<VM UID> on a Node that has none,
//     removing the uninitialized taint as the cloud node controller does; and it keeps each
//     Node's status.addresses those of its VMI that NodeAddresses selects with the flags it was
//     started with (RestartWith), as the cloud node controller does at initialization and then
//     periodically.
//
// It never uses the harness's own view of Harvester: a missing, wrong or revoked credential, or a
// wrong namespace, leaves the Nodes without providerID (Err says why), as on a real tenant.
type CloudProvider struct {
	mgmt                   client.Reader
	namespace, clusterName string
	tenant                 client.Client
	stop                   context.CancelFunc
	done                   chan struct{}

	mu      sync.Mutex
	err     error
	applied []byte // the tenant Secret's data last applied
	// mount is the directory that plays the pod's TenantSecretMount; mounted is what it holds.
	mount   string
	mounted map[string][]byte
	// harvester is the client built when the cloud provider started, and vmNamespace its
	// namespace; nil until it starts, and after Restart.
	harvester   client.Client
	vmNamespace string
	// flags are the address flags it runs with; refreshed is when it last looked at the Nodes'
	// addresses.
	flags     CloudProviderFlags
	refreshed time.Time
}

// PlayCloudProvider starts the player for Cluster clusterName of namespace on the management
// cluster mgmt reads, and tenant; it runs until Stop or until ctx ends.
func PlayCloudProvider(ctx context.Context, mgmt client.Reader, namespace, clusterName string, tenant *Tenant) *CloudProvider {
	ctx, cancel := context.WithCancel(ctx)
	p := &CloudProvider{mgmt: mgmt, namespace: namespace, clusterName: clusterName, tenant: tenant.Client, stop: cancel, done: make(chan struct{})}
	p.mount, p.err = os.MkdirTemp("", "cloud-config-")
	if p.err != nil {
		cancel()
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		PlayEvery(ctx, cloudProviderTick, p.sync, p.record)
	}()
	return p
}

func (p *CloudProvider) record(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

// Stop stops the player and waits for it.
func (p *CloudProvider) Stop() {
	p.stop()
	<-p.done
	_ = os.RemoveAll(p.mount)
}

// Restart plays the cloud provider's pod restarting: it reads its cloud-config again.
func (p *CloudProvider) Restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.harvester = nil
}

// RestartWith plays the cloud provider's pod restarting with other args (its Deployment changed):
// it reads its cloud-config again, and selects Node addresses with the address flags of args.
func (p *CloudProvider) RestartWith(args ...string) error {
	flags, err := ParseCloudProviderFlags(args)
	if err != nil {
		return err // the real one exits at start
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.harvester, p.flags, p.refreshed = nil, flags, time.Time{}
	return nil
}

// Err is what kept the player from initializing a Node in its last pass (nil: every Node it saw
// has its providerID).
func (p *CloudProvider) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *CloudProvider) sync(ctx context.Context) error {
	if err := p.applyResourceSet(ctx); err != nil {
		return fmt.Errorf("ClusterResourceSet: %w", err)
	}
	if err := p.syncMount(ctx); err != nil {
		return fmt.Errorf("kubelet's Secret volume: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := p.tenant.List(ctx, nodes); err != nil {
		return err
	}
	p.mu.Lock()
	refresh := time.Since(p.refreshed) >= addressRefreshInterval
	if refresh {
		p.refreshed = time.Now()
	}
	p.mu.Unlock()
	var errs []error
	for i := range nodes.Items {
		switch node := &nodes.Items[i]; {
		case node.Spec.ProviderID == "":
			errs = append(errs, p.initialize(ctx, node))
		case refresh:
			errs = append(errs, p.updateAddresses(ctx, node))
		}
	}
	return errors.Join(errs...)
}

// applyResourceSet applies the delivered Secret's manifest into the tenant, as a
// ClusterResourceSet with strategy Reconcile does: only a Secret of the ClusterResourceSet type,
// labelled with the cluster's name.
func (p *CloudProvider) applyResourceSet(ctx context.Context) error {
	delivered := &corev1.Secret{}
	name := p.clusterName + CloudConfigSecretSuffix
	if err := p.mgmt.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: name}, delivered); err != nil {
		return fmt.Errorf("read Secret %s/%s: %w", p.namespace, name, err)
	}
	if delivered.Type != ClusterResourceSetSecretType {
		return fmt.Errorf("the Secret %s/%s is of type %q, not %s: a ClusterResourceSet does not apply it", p.namespace, name, delivered.Type, ClusterResourceSetSecretType)
	}
	manifest := &corev1.Secret{}
	if err := yaml.UnmarshalStrict(delivered.Data[CloudConfigSecretKey], manifest); err != nil {
		return fmt.Errorf("the Secret %s/%s key %s is not a Secret manifest: %w", p.namespace, name, CloudConfigSecretKey, err)
	}
	if manifest.APIVersion != "v1" || manifest.Kind != "Secret" || manifest.Namespace != TenantCloudConfigNamespace || manifest.Name != TenantCloudConfigName {
		return fmt.Errorf("the Secret %s/%s carries %s %s %s/%s, not v1 Secret %s/%s", p.namespace, name, manifest.APIVersion, manifest.Kind,
			manifest.Namespace, manifest.Name, TenantCloudConfigNamespace, TenantCloudConfigName)
	}
	data := manifest.Data[TenantCloudConfigKey]
	p.mu.Lock()
	same := bytes.Equal(p.applied, data)
	p.mu.Unlock()
	if same {
		return nil
	}
	existing := &corev1.Secret{}
	switch err := p.tenant.Get(ctx, client.ObjectKeyFromObject(manifest), existing); {
	case apierrors.IsNotFound(err):
		manifest.ResourceVersion = ""
		if err := p.tenant.Create(ctx, manifest); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		existing.Data, existing.Type = manifest.Data, manifest.Type
		if err := p.tenant.Update(ctx, existing); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.applied = data
	p.mu.Unlock()
	return nil
}

// syncMount writes the tenant Secret's keys as files of the mounted directory, as kubelet does
// for a Secret volume (files replaced by rename), when they change.
func (p *CloudProvider) syncMount(ctx context.Context) error {
	secret := &corev1.Secret{}
	if err := p.tenant.Get(ctx, client.ObjectKey{Namespace: TenantCloudConfigNamespace, Name: TenantCloudConfigName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the pod would not start: nothing to mount
		}
		return err
	}
	p.mu.Lock()
	same := maps.EqualFunc(p.mounted, secret.Data, bytes.Equal)
	p.mu.Unlock()
	if same {
		return nil
	}
	for key, value := range secret.Data {
		tmp := filepath.Join(p.mount, "."+key)
		if err := os.WriteFile(tmp, value, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(p.mount, key)); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.mounted = secret.Data
	p.mu.Unlock()
	return nil
}

// harvesterClient is the cloud provider's client: built once, when it starts, from the tenant's
// Secret alone.
func (p *CloudProvider) harvesterClient(ctx context.Context) (client.Client, string, error) {
	p.mu.Lock()
	if p.harvester != nil {
		defer p.mu.Unlock()
		return p.harvester, p.vmNamespace, nil
	}
	p.mu.Unlock()
	secret := &corev1.Secret{}
	if err := p.tenant.Get(ctx, client.ObjectKey{Namespace: TenantCloudConfigNamespace, Name: TenantCloudConfigName}, secret); err != nil {
		return nil, "", fmt.Errorf("read the tenant's Secret %s/%s: %w", TenantCloudConfigNamespace, TenantCloudConfigName, err)
	}
	// As ccm.go's newCloudProvider: clientcmd from the bytes, the current context's namespace.
	// The pod's mount is this player's directory: a tokenFile under it is read from there.
	raw, err := clientcmd.Load(secret.Data[TenantCloudConfigKey])
	if err != nil {
		return nil, "", fmt.Errorf("the cloud-config is not a kubeconfig: %w", err)
	}
	for _, user := range raw.AuthInfos {
		if rest, ok := strings.CutPrefix(user.TokenFile, TenantSecretMount+"/"); ok {
			user.TokenFile = filepath.Join(p.mount, rest)
		}
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("the cloud-config is not a usable kubeconfig: %w", err)
	}
	namespace := ""
	if ctx := raw.Contexts[raw.CurrentContext]; ctx != nil {
		namespace = ctx.Namespace
	}
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	c, err := client.New(cfg, client.Options{Scheme: sim.Scheme()})
	if err != nil {
		return nil, "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.harvester, p.vmNamespace = c, namespace
	return c, namespace, nil
}

// getNodesObject reads, with the cloud provider's own client, the object of the Node's name (its VM
// or VMI) in the namespace of that client's kubeconfig.
func (p *CloudProvider) getNodesObject(ctx context.Context, node *corev1.Node, obj client.Object) error {
	hv, namespace, err := p.harvesterClient(ctx)
	if err != nil {
		return err
	}
	if err := hv.Get(ctx, client.ObjectKey{Namespace: namespace, Name: node.Name}, obj); err != nil {
		return fmt.Errorf("node %s: get %T %s/%s on Harvester: %w", node.Name, obj, namespace, node.Name, err)
	}
	return nil
}

// initialize sets the Node's providerID from its VM, as the cloud node controller does with
// instance.go's InstanceMetadata, and removes the uninitialized taint.
func (p *CloudProvider) initialize(ctx context.Context, node *corev1.Node) error {
	vm := &kubevirtv1.VirtualMachine{}
	if err := p.getNodesObject(ctx, node, vm); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	node.Spec.ProviderID = "harvester://" + string(vm.UID)
	var taints []corev1.Taint
	for _, t := range node.Spec.Taints {
		if t.Key != TaintUninitialized {
			taints = append(taints, t)
		}
	}
	node.Spec.Taints = taints
	if err := p.tenant.Patch(ctx, node, patch); err != nil {
		return err
	}
	return p.updateAddresses(ctx, node)
}

// updateAddresses sets the Node's status.addresses to those NodeAddresses selects from its VMI,
// when they differ.
func (p *CloudProvider) updateAddresses(ctx context.Context, node *corev1.Node) error {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := p.getNodesObject(ctx, node, vmi); err != nil {
		return client.IgnoreNotFound(err) // stopped: the addresses stay as they were
	}
	p.mu.Lock()
	flags := p.flags
	p.mu.Unlock()
	want := NodeAddresses(node.Name, vmi, flags)
	if slices.Equal(node.Status.Addresses, want) {
		return nil
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	node.Status.Addresses = want
	return p.tenant.Status().Patch(ctx, node, patch)
}
