package v1alpha1

import "github.com/butlerdotdev/butler-provider-harvester/api/reasons"

// Condition types of HarvesterClusters and HarvesterMachines.
const (
	// ConditionReady is the summary of a HarvesterCluster or HarvesterMachine through its whole
	// life, provisioning and deletion included; Cluster API mirrors it into the Cluster's or
	// Machine's InfrastructureReady condition. True: the cluster's infrastructure is ready for
	// machines (ReasonReady), or the machine's VM runs with its address (ReasonVMRunning). False
	// or Unknown: the reason says what it waits for or why it cannot be made, and the message
	// names the fix.
	ConditionReady = "Ready"
	// ConditionPaused is True while the object is paused: its Cluster's spec.paused is true, or
	// it carries the annotation cluster.x-k8s.io/paused. A paused object is not reconciled.
	ConditionPaused = "Paused"
	// ConditionProgressing is True while the provider works towards what the spec asks (creating
	// the VM, waiting for its address, deleting it) and False once it got there or cannot go on;
	// its reason and message are Ready's while Ready is False.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when something needs a person to act (a ProviderConfig problem,
	// missing permissions, a name taken on Harvester, a VM Harvester cannot start): the reason
	// and message say what and how to fix it. False with ReasonAsExpected otherwise.
	ConditionDegraded = "Degraded"
	// ConditionGuestCredentialsReady (HarvesterCluster) says where the tenant cluster's Harvester
	// credentials stand (spec.guestCredentials): True once the ServiceAccount, its bindings and
	// token exist on Harvester and Secret <Cluster name>-harvester-cloud-config holds their
	// kubeconfig (ReasonGuestCredentialsIssued), or when the user opted out
	// (ReasonGuestCredentialsNotManaged); False with the reason and the fix otherwise. It never
	// holds Ready back: machines are made either way, but without the cloud-config their Nodes get
	// no providerID. Its messages never carry the credentials.
	ConditionGuestCredentialsReady = "GuestCredentialsReady"
	// ConditionGuestCredentialsIsolated (HarvesterCluster) says whether the delivered Harvester
	// credentials reach this cluster's objects alone: True when they are bound in the cluster's
	// Harvester namespace only and nothing of others is there (ReasonGuestNamespaceExclusive);
	// False when others' VMs, disks or credentials share the namespace
	// (ReasonGuestNamespaceShared) or the credentials are still bound cluster-wide
	// (ReasonGuestBindingClusterWide). Set while credentials are delivered; like
	// GuestCredentialsReady, it never holds Ready back.
	ConditionGuestCredentialsIsolated = "GuestCredentialsIsolated"
	// ConditionOwned (HarvesterCluster) says whether this management cluster runs the tenant
	// cluster's machines on Harvester: True while it holds the cluster's ownership Lease there
	// (ReasonOwnershipHeld, or ReasonOwnershipTakenOver just after a move or a hand-over); False
	// while another management cluster does (ReasonOwnedByAnotherManagementCluster). While it is
	// False nothing made for the other is taken, changed or deleted, Ready is False, and no
	// credentials are issued. A paused cluster releases its Lease, for the target of
	// `clusterctl move` to take.
	ConditionOwned = "Owned"
)

// Reasons of the Owned condition.
const (
	// ReasonOwnershipHeld (True): this management cluster holds the tenant cluster's ownership
	// Lease on Harvester and renews it.
	ReasonOwnershipHeld = reasons.OwnershipHeld
	// ReasonOwnershipTakenOver (True): it took the Lease from another management cluster, which
	// released it (a move) or was handed over (annotation
	// harvester.butler.butlerlabs.dev/hand-over-from on the ProviderConfig); the message names
	// VMs that management cluster made for HarvesterMachines this one does not have.
	ReasonOwnershipTakenOver = reasons.OwnershipTakenOver
	// ReasonOwnedByAnotherManagementCluster (False): another management cluster holds the Lease
	// (this copy was restored from a backup while that one runs, or is the source of a move that
	// went on). The message names it, how long it has gone unrenewed here, and the hand-over for
	// when that management cluster is gone for good.
	ReasonOwnedByAnotherManagementCluster = reasons.OwnedByAnotherManagementCluster
	// ReasonOwnershipReleased (False): the Cluster is paused and its Lease released, for the
	// target of a move to take; resumed here, it is taken back unless another took it.
	ReasonOwnershipReleased = reasons.OwnershipReleased
	// ReasonOwnershipUnknown (Unknown): the Lease cannot be read or written (Harvester cannot be
	// reached, the credentials lack leases in the namespace, or this management cluster's
	// identity is unknown); the message says which. Where Harvester refused it (credentials
	// granted before Leases), the cluster runs on as before, unguarded, until the rule is granted.
	ReasonOwnershipUnknown = reasons.OwnershipUnknown
)

// Reasons of the GuestCredentialsReady condition.
const (
	// ReasonGuestCredentialsIssued (True): the credentials exist on Harvester and are delivered.
	ReasonGuestCredentialsIssued = reasons.GuestCredentialsIssued
	// ReasonGuestCredentialsNotManaged (True): spec.guestCredentials is None; the provider makes
	// none (and has deleted what it made before).
	ReasonGuestCredentialsNotManaged = reasons.GuestCredentialsNotManaged
	// ReasonGuestCredentialsPending (False): they are being made (Harvester has not filled the
	// token in yet, or the ProviderConfig is not usable yet: the message says which).
	ReasonGuestCredentialsPending = reasons.GuestCredentialsPending
	// ReasonGuestPermissionsMissing (False): the provider's own Harvester credentials may not make
	// them; the message names each missing permission. Grant config/harvester/guest-rbac.yaml
	// (docs/harvester-rbac.md), or set spec.guestCredentials to None and give the tenant cluster
	// its cloud-config yourself.
	ReasonGuestPermissionsMissing = reasons.GuestPermissionsMissing
	// ReasonGuestCredentialsNameConflict (False): an object with the name the provider needs
	// exists on Harvester and was not made for this HarvesterCluster; it is never changed. Delete
	// or rename it.
	ReasonGuestCredentialsNameConflict = reasons.GuestCredentialsNameConflict
	// ReasonGuestCredentialsFailed (False): Harvester or the management cluster refused or did not
	// answer a request; the provider retries with backoff.
	ReasonGuestCredentialsFailed = reasons.GuestCredentialsFailed
	// ReasonGuestNamespaceShared (GuestCredentialsReady False, GuestCredentialsIsolated False): the
	// cluster's Harvester namespace holds VMs, PVCs or credentials of others (other clusters,
	// MachineRequests, the operator's own), which Harvester's roles, bound there, would let the
	// tenant stop, re-volume or delete. No credentials are issued in such a namespace; those
	// issued before stay, and GuestCredentialsIsolated says so until the cluster is recreated in
	// a namespace of its own. The message names the objects. Give the cluster a ProviderConfig
	// whose harvester.namespace it has to itself, or let clusters share it on purpose with the
	// ProviderConfig annotation harvester.butler.butlerlabs.dev/shared-namespace: "true".
	ReasonGuestNamespaceShared = reasons.GuestNamespaceShared
	// ReasonGuestTenantServerInvalid (False): the tenant server the operator gave beside the
	// ProviderConfig's credentials (annotation harvester.butler.butlerlabs.dev/tenant-server on
	// their Secret, key tenant-ca.crt) is not usable; the message names the Secret and what is
	// wrong. Credentials already delivered are kept as they are.
	ReasonGuestTenantServerInvalid = reasons.GuestTenantServerInvalid
)

// Reasons of the GuestCredentialsIsolated condition besides ReasonGuestNamespaceShared.
const (
	// ReasonGuestNamespaceExclusive (True): the credentials are bound in the cluster's Harvester
	// namespace only (and read-only cluster-wide), and nothing of others is there.
	ReasonGuestNamespaceExclusive = reasons.GuestNamespaceExclusive
	// ReasonGuestBindingClusterWide (False): the credentials were issued with Harvester's own,
	// cluster-wide binding of its CSI driver role (which may patch every VM on Harvester), and
	// the provider may not narrow them: the message names what it lacks. Apply the current
	// config/harvester/guest-rbac.yaml on Harvester; the credentials are narrowed in place, with
	// the same token.
	ReasonGuestBindingClusterWide = reasons.GuestBindingClusterWide
)

// Reasons of the Degraded condition besides those of Ready.
const (
	// ReasonAsExpected (Degraded=False): nothing needs attention.
	ReasonAsExpected = reasons.AsExpected
)

// Reasons of the Paused condition (those of Cluster API's own objects).
const (
	// ReasonPaused (Paused=True): the Cluster or the object is paused.
	ReasonPaused = reasons.Paused
	// ReasonNotPaused (Paused=False): nothing pauses the object.
	ReasonNotPaused = reasons.NotPaused
)

// Reasons of the Ready condition. Each is the provider's word for one cause on every kind
// (package api/reasons, which also says what each means for the object: its behaviour), so that
// people and tools reading MachineRequests and HarvesterMachines see one word for one cause.
//
// Since the Cluster API contract v1beta2 has no terminal failures (no failureReason or
// failureMessage), the reasons whose behaviour is permanent are reported as Ready=False with that
// reason, and the provider does not retry until the cause changes.
const (
	// ReasonReady (HarvesterCluster, Ready=True): the ProviderConfig is usable and the control
	// plane endpoint is known.
	ReasonReady = reasons.Ready
	// ReasonWaitingForOwner: the object has no owner of Cluster API yet (a Cluster for a
	// HarvesterCluster, a Machine for a HarvesterMachine); Cluster API sets it.
	ReasonWaitingForOwner = reasons.WaitingForOwner
	// ReasonWaitingForControlPlaneEndpoint (HarvesterCluster): neither spec.controlPlaneEndpoint
	// nor the Cluster's spec.controlPlaneEndpoint is set. Set one of them (or let the control
	// plane provider set the Cluster's).
	ReasonWaitingForControlPlaneEndpoint = reasons.WaitingForControlPlaneEndpoint
	// ReasonWaitingForClusterInfrastructure (HarvesterMachine): the Cluster's infrastructure is
	// not provisioned yet (its HarvesterCluster is not Ready).
	ReasonWaitingForClusterInfrastructure = reasons.WaitingForClusterInfrastructure
	// ReasonWaitingForBootstrapData (HarvesterMachine): the Machine's bootstrap data Secret
	// (spec.bootstrap.dataSecretName) is not set yet.
	ReasonWaitingForBootstrapData = reasons.WaitingForBootstrapData

	// ReasonProviderConfigNotFound: the HarvesterCluster's spec.providerConfigRef names
	// a ProviderConfig that does not exist.
	ReasonProviderConfigNotFound = reasons.ProviderConfigNotFound
	// ReasonInvalidProviderConfig: the ProviderConfig's harvester block is missing or
	// malformed; the message names the field.
	ReasonInvalidProviderConfig = reasons.InvalidProviderConfig
	// ReasonProviderConfigNotShared: the ProviderConfig is in another namespace and its
	// spec.scope.type is not "platform".
	ReasonProviderConfigNotShared = reasons.ProviderConfigNotShared
	// ReasonProviderConfigNotReady: a preflight check of the ProviderConfig failed; the
	// message names it and its fix.
	ReasonProviderConfigNotReady = reasons.ProviderConfigNotReady
	// ReasonProviderConfigMoved: the ProviderConfig now points at another Harvester cluster or
	// namespace than the one the machine was created in; the machine stays where it is and is
	// still observed and deleted there.
	ReasonProviderConfigMoved = reasons.ProviderConfigMoved
	// ReasonCredentialsUnavailable: the credentials Secret is missing, lacks the key, or
	// holds an unusable kubeconfig.
	ReasonCredentialsUnavailable = reasons.CredentialsUnavailable
	// ReasonUntrustedEndpoint: the ProviderConfig's spec.harvester.endpoint names
	// another host than the kubeconfig, which pins no CA; nothing is sent.
	ReasonUntrustedEndpoint = reasons.UntrustedEndpoint
	// ReasonInsecureCredentials: the kubeconfig skips TLS verification, uses plain http
	// or a proxy, and its Secret does not allow it.
	ReasonInsecureCredentials = reasons.InsecureCredentials
	// ReasonPermissionDenied: Harvester refused a request with the credentials; the
	// message names the verb and resource.
	ReasonPermissionDenied = reasons.PermissionDenied
	// ReasonHarvesterUnavailable: a Harvester API request failed; the provider retries
	// with backoff.
	ReasonHarvesterUnavailable = reasons.HarvesterUnavailable
	// ReasonQuotaExceeded: a ResourceQuota of the Harvester namespace refused an object.
	ReasonQuotaExceeded = reasons.QuotaExceeded

	// ReasonFailureDomainNotFound (HarvesterMachine): the Machine's spec.failureDomain is
	// not one of the HarvesterCluster's spec.failureDomains; nothing is created until it is (add
	// it to the HarvesterCluster, or correct the Machine). A machine whose VM exists is not judged:
	// it stays in the failure domain it was created in.
	ReasonFailureDomainNotFound = reasons.FailureDomainNotFound
	// ReasonNetworkNotFound (HarvesterMachine): a NetworkAttachmentDefinition of
	// spec.networks does not exist on Harvester.
	ReasonNetworkNotFound = reasons.NetworkNotFound
	// ReasonImageNotReady: the VirtualMachineImage exists but is not imported yet.
	ReasonImageNotReady = reasons.ImageNotReady
	// ReasonVMProvisioning: the machine's disks, cloud-init Secret and VM are being created on
	// Harvester, and the VM is starting until it runs and reports its address. It is the
	// MachineRequest's VMCreating, named as Cluster API names provisioning.
	ReasonVMProvisioning = reasons.VMProvisioning
	// ReasonDeviceUnavailable (HarvesterMachine): Harvester offers no device of a resource
	// spec.hostDevices or spec.gpus names (passthrough not enabled for any device of it, no vGPU of
	// the type enabled, or no such device at all); nothing is made until it does. The message
	// names the field, what Harvester has of the resource, and what to enable.
	ReasonDeviceUnavailable = reasons.DeviceUnavailable
	// ReasonVMUnschedulable: Harvester cannot place the VM; the message carries the
	// scheduler's reason.
	ReasonVMUnschedulable = reasons.VMUnschedulable
	// ReasonVolumeNotBound: a disk of the VM is Pending.
	ReasonVolumeNotBound = reasons.VolumeNotBound
	// ReasonVolumeMissing: a disk of the VM was deleted outside the provider.
	ReasonVolumeMissing = reasons.VolumeMissing
	// ReasonVMNotStarting: the VM's instance does not start.
	ReasonVMNotStarting = reasons.VMNotStarting
	// ReasonNoIPAddress: the VM runs without an address on its primary NIC past the
	// time the guest agent needs; check the guest agent and DHCP.
	ReasonNoIPAddress = reasons.NoIPAddress
	// ReasonProvisioningTimeout: the machine has not become ready within the
	// provisioning timeout; the message carries the diagnosis. Cluster API's MachineHealthCheck
	// may replace the machine.
	ReasonProvisioningTimeout = reasons.ProvisioningTimeout
	// ReasonVMRunning (HarvesterMachine, Ready=True): the VM runs and its address is in
	// status.addresses.
	ReasonVMRunning = reasons.VMRunning
	// ReasonVMNotReady: a provisioned machine's VM exists but is not running (stopped, migrating,
	// crashed); the message carries KubeVirt's printable status.
	ReasonVMNotReady = reasons.VMNotReady
	// ReasonDiskInUse: a disk of ours cannot be deleted because a VM uses it.
	ReasonDiskInUse = reasons.DiskInUse
	// ReasonIPAddressPending (HarvesterMachine): an IPAddressClaim of the machine's
	// spec.interfaces[].addressesFromPools has no address yet (its IPAM provider has not answered,
	// or, after clusterctl move, has not linked the claim to its address again); nothing is made
	// until every claim has one. The message names the claim and its pool.
	ReasonIPAddressPending = reasons.IPAddressPending
	// ReasonIPPoolNotReady (HarvesterMachine): the IPAM provider says the pool of an
	// IPAddressClaim is not ready (for example it does not exist); its message is quoted.
	ReasonIPPoolNotReady = reasons.IPPoolNotReady
	// ReasonIPPoolExhausted (HarvesterMachine): the pool of an IPAddressClaim has no address left.
	// Add addresses to the pool, or free some; the claim is answered when one is free.
	ReasonIPPoolExhausted = reasons.IPPoolExhausted
	// ReasonIPAddressAllocationFailed (HarvesterMachine): the IPAM provider could not allocate an
	// address for an IPAddressClaim; its message is quoted.
	ReasonIPAddressAllocationFailed = reasons.IPAddressAllocationFailed
	// ReasonIPPoolKindNotServed (HarvesterMachine): no CRD serves the kind of group an entry of
	// spec.interfaces[].addressesFromPools names: install its IPAM provider (for example
	// clusterctl init --ipam in-cluster), or correct the reference. No claim is made.
	ReasonIPPoolKindNotServed = reasons.IPPoolKindNotServed
	// ReasonIPAddressInvalid (HarvesterMachine): an address an IPAM provider gave (its IPAddress)
	// cannot configure the NIC: no prefix, a gateway outside its prefix, two of one family on a
	// NIC; the message names the IPAddress, the field and the fix. Nothing is made.
	ReasonIPAddressInvalid = reasons.IPAddressInvalid
	// ReasonIPAddressClaimConflict (HarvesterMachine): an IPAddressClaim of the name the machine
	// needs exists and is not its own (another controller owns it, or it names another pool). It
	// is never changed: delete it.
	ReasonIPAddressClaimConflict = reasons.IPAddressClaimConflict
	// ReasonGuestAddressMismatch (HarvesterMachine, Degraded): the guest agent reports another
	// address on the primary NIC than the one its pool assigned (the image ignores cloud-init's
	// network configuration, or DHCP gave it another): the message names both.
	ReasonGuestAddressMismatch = reasons.GuestAddressMismatch
	// ReasonManagementNetworkMismatch (HarvesterMachine, Degraded): the HarvesterCluster's
	// spec.managementNetwork, which Harvester's cloud provider reads Node addresses from, is not
	// the network of the machine's first NIC: its Node gets another NIC's address, or none. The
	// message names both networks.
	ReasonManagementNetworkMismatch = reasons.ManagementNetworkMismatch
	// ReasonPlacementNotRecorded: the API server did not keep the record of where the
	// machine lives; nothing is created, and a deletion waits, until it is kept.
	ReasonPlacementNotRecorded = reasons.PlacementNotRecorded
	// ReasonPlacementRefused: the HarvesterMachine's record of where its
	// machine lives (annotation harvester.butler.butlerlabs.dev/placement) names another VM
	// namespace or name than its own (its ProviderConfig's Harvester namespace, its own name),
	// and no VM exists there, or one that is another's; or its spec.providerID was set with no
	// place recorded (the provider writes it only after recording one). The record and the
	// providerID are the provider's, and a new machine is made only where its ProviderConfig puts
	// it: nothing is made or changed on Harvester. Remove the annotation and the provider records
	// the machine's own place; for a providerID, delete the Machine.
	ReasonPlacementRefused = reasons.PlacementRefused
	// ReasonDeleting: the object is being deleted: the machine's VM, disks and cloud-init Secret
	// are being removed from Harvester, and the same one of them has been left there for 30
	// seconds past the VM's shutdown grace period (the message names it). A deletion that makes
	// progress is not reported step by step.
	ReasonDeleting = reasons.Deleting
	// ReasonDeletionBlocked: the object is being deleted but Harvester cannot be reached
	// (ProviderConfig or credentials gone).
	ReasonDeletionBlocked = reasons.DeletionBlocked

	// ReasonInvalidSpec: a field is invalid in a way the schema cannot express.
	ReasonInvalidSpec = reasons.InvalidSpec
	// ReasonImageNotFound: the VirtualMachineImage does not
	// exist on Harvester.
	ReasonImageNotFound = reasons.ImageNotFound
	// ReasonImageImportFailed: Harvester failed to import the image.
	ReasonImageImportFailed = reasons.ImageImportFailed
	// ReasonImageBackendUnsupported: the image's storage backend is not one the
	// provider clones root disks from.
	ReasonImageBackendUnsupported = reasons.ImageBackendUnsupported
	// ReasonDiskTooSmall: spec.rootDisk.size is smaller than the image's virtual
	// size.
	ReasonDiskTooSmall = reasons.DiskTooSmall
	// ReasonUserDataTooLarge: the bootstrap data exceeds what a Secret can hold
	// (1 MiB).
	ReasonUserDataTooLarge = reasons.UserDataTooLarge
	// ReasonNameConflict: an object with the name the provider needs exists on
	// Harvester and was not made for this machine; it is never adopted or changed.
	ReasonNameConflict = reasons.NameConflict
	// ReasonVMDeleted: the VM of a provisioned machine was deleted outside the
	// provider; Cluster API's MachineHealthCheck may replace the machine.
	ReasonVMDeleted = reasons.VMDeleted
)

// Finalizers. Both are domain-qualified names with a path, as the API server asks of finalizers
// (it warns about names without one).
const (
	// HarvesterClusterFinalizer holds a HarvesterCluster until the provider has released what it
	// keeps for the cluster.
	HarvesterClusterFinalizer = "infrastructure.butlerlabs.dev/harvestercluster"
	// HarvesterMachineFinalizer holds a HarvesterMachine until its VM, disks and cloud-init Secret
	// are gone from Harvester.
	HarvesterMachineFinalizer = "infrastructure.butlerlabs.dev/harvestermachine"
)
