package v1alpha1

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
	// its reason and message are Ready's while Ready is False. Same as the MachineRequest's.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when something needs a person to act (a ProviderConfig problem,
	// missing permissions, a name taken on Harvester, a VM Harvester cannot start): the reason
	// and message say what and how to fix it. False with ReasonAsExpected otherwise. Same as the
	// MachineRequest's.
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
	ReasonOwnershipHeld = "OwnershipHeld"
	// ReasonOwnershipTakenOver (True): it took the Lease from another management cluster, which
	// released it (a move) or was handed over (annotation
	// harvester.butler.butlerlabs.dev/hand-over-from on the ProviderConfig); the message names
	// VMs that management cluster made for HarvesterMachines this one does not have.
	ReasonOwnershipTakenOver = "OwnershipTakenOver"
	// ReasonOwnedByAnotherManagementCluster (False): another management cluster holds the Lease
	// (this copy was restored from a backup while that one runs, or is the source of a move that
	// went on). The message names it, how long it has gone unrenewed here, and the hand-over for
	// when that management cluster is gone for good.
	ReasonOwnedByAnotherManagementCluster = "OwnedByAnotherManagementCluster"
	// ReasonOwnershipReleased (False): the Cluster is paused and its Lease released, for the
	// target of a move to take; resumed here, it is taken back unless another took it.
	ReasonOwnershipReleased = "OwnershipReleased"
	// ReasonOwnershipUnknown (Unknown): the Lease cannot be read or written (Harvester cannot be
	// reached, the credentials lack leases in the namespace, or this management cluster's
	// identity is unknown); the message says which. Where Harvester refused it (credentials
	// granted before Leases), the cluster runs on as before, unguarded, until the rule is granted.
	ReasonOwnershipUnknown = "OwnershipUnknown"
)

// Reasons of the GuestCredentialsReady condition.
const (
	// ReasonGuestCredentialsIssued (True): the credentials exist on Harvester and are delivered.
	ReasonGuestCredentialsIssued = "GuestCredentialsIssued"
	// ReasonGuestCredentialsNotManaged (True): spec.guestCredentials is None; the provider makes
	// none (and has deleted what it made before).
	ReasonGuestCredentialsNotManaged = "GuestCredentialsNotManaged"
	// ReasonGuestCredentialsPending (False): they are being made (Harvester has not filled the
	// token in yet, or the ProviderConfig is not usable yet: the message says which).
	ReasonGuestCredentialsPending = "GuestCredentialsPending"
	// ReasonGuestPermissionsMissing (False): the provider's own Harvester credentials may not make
	// them; the message names each missing permission. Grant config/harvester/guest-rbac.yaml
	// (docs/harvester-rbac.md), or set spec.guestCredentials to None and give the tenant cluster
	// its cloud-config yourself.
	ReasonGuestPermissionsMissing = "GuestPermissionsMissing"
	// ReasonGuestCredentialsNameConflict (False): an object with the name the provider needs
	// exists on Harvester and was not made for this HarvesterCluster; it is never changed. Delete
	// or rename it.
	ReasonGuestCredentialsNameConflict = "GuestCredentialsNameConflict"
	// ReasonGuestCredentialsFailed (False): Harvester or the management cluster refused or did not
	// answer a request; the provider retries with backoff.
	ReasonGuestCredentialsFailed = "GuestCredentialsFailed"
	// ReasonGuestNamespaceShared (GuestCredentialsReady False, GuestCredentialsIsolated False): the
	// cluster's Harvester namespace holds VMs, PVCs or credentials of others (other clusters,
	// MachineRequests, the operator's own), which Harvester's roles, bound there, would let the
	// tenant stop, re-volume or delete. No credentials are issued in such a namespace; those
	// issued before stay, and GuestCredentialsIsolated says so until the cluster is recreated in
	// a namespace of its own. The message names the objects. Give the cluster a ProviderConfig
	// whose harvester.namespace it has to itself, or let clusters share it on purpose with the
	// ProviderConfig annotation harvester.butler.butlerlabs.dev/shared-namespace: "true".
	ReasonGuestNamespaceShared = "GuestNamespaceShared"
	// ReasonGuestTenantServerInvalid (False): the tenant server the operator gave beside the
	// ProviderConfig's credentials (annotation harvester.butler.butlerlabs.dev/tenant-server on
	// their Secret, key tenant-ca.crt) is not usable; the message names the Secret and what is
	// wrong. Credentials already delivered are kept as they are.
	ReasonGuestTenantServerInvalid = "GuestTenantServerInvalid"
)

// Reasons of the GuestCredentialsIsolated condition besides ReasonGuestNamespaceShared.
const (
	// ReasonGuestNamespaceExclusive (True): the credentials are bound in the cluster's Harvester
	// namespace only (and read-only cluster-wide), and nothing of others is there.
	ReasonGuestNamespaceExclusive = "GuestNamespaceExclusive"
	// ReasonGuestBindingClusterWide (False): the credentials were issued with Harvester's own,
	// cluster-wide binding of its CSI driver role (which may patch every VM on Harvester), and
	// the provider may not narrow them: the message names what it lacks. Apply the current
	// config/harvester/guest-rbac.yaml on Harvester; the credentials are narrowed in place, with
	// the same token.
	ReasonGuestBindingClusterWide = "GuestBindingClusterWide"
)

// Reasons of the Degraded condition besides those of Ready.
const (
	// ReasonAsExpected (Degraded=False): nothing needs attention. Same as the MachineRequest's.
	ReasonAsExpected = "AsExpected"
)

// Reasons of the Paused condition (those of Cluster API's own objects).
const (
	// ReasonPaused (Paused=True): the Cluster or the object is paused.
	ReasonPaused = "Paused"
	// ReasonNotPaused (Paused=False): nothing pauses the object.
	ReasonNotPaused = "NotPaused"
)

// Reasons of the Ready condition. Where a reason means what a MachineRequest's reason of
// butler.butlerlabs.dev/v1alpha1 means, it has the same value, so that people and tools reading
// both kinds see one word for one cause.
//
// Since the Cluster API contract v1beta2 has no terminal failures (no failureReason or
// failureMessage), the reasons a MachineRequest documents as permanent are reported as
// Ready=False with that reason, and the provider does not retry until the cause changes.
const (
	// ReasonReady (HarvesterCluster, Ready=True): the ProviderConfig is usable and the control
	// plane endpoint is known.
	ReasonReady = "Ready"
	// ReasonWaitingForOwner: the object has no owner of Cluster API yet (a Cluster for a
	// HarvesterCluster, a Machine for a HarvesterMachine); Cluster API sets it.
	ReasonWaitingForOwner = "WaitingForOwner"
	// ReasonWaitingForControlPlaneEndpoint (HarvesterCluster): neither spec.controlPlaneEndpoint
	// nor the Cluster's spec.controlPlaneEndpoint is set. Set one of them (or let the control
	// plane provider set the Cluster's).
	ReasonWaitingForControlPlaneEndpoint = "WaitingForControlPlaneEndpoint"
	// ReasonWaitingForClusterInfrastructure (HarvesterMachine): the Cluster's infrastructure is
	// not provisioned yet (its HarvesterCluster is not Ready).
	ReasonWaitingForClusterInfrastructure = "WaitingForClusterInfrastructure"
	// ReasonWaitingForBootstrapData (HarvesterMachine): the Machine's bootstrap data Secret
	// (spec.bootstrap.dataSecretName) is not set yet.
	ReasonWaitingForBootstrapData = "WaitingForBootstrapData"

	// ReasonProviderConfigNotFound (waiting): the HarvesterCluster's spec.providerConfigRef names
	// a ProviderConfig that does not exist. Same as the MachineRequest's.
	ReasonProviderConfigNotFound = "ProviderConfigNotFound"
	// ReasonInvalidProviderConfig (waiting): the ProviderConfig's harvester block is missing or
	// malformed; the message names the field. Same as the MachineRequest's.
	ReasonInvalidProviderConfig = "InvalidProviderConfig"
	// ReasonProviderConfigNotShared (waiting): the ProviderConfig is in another namespace and its
	// spec.scope.type is not "platform". Same as the MachineRequest's.
	ReasonProviderConfigNotShared = "ProviderConfigNotShared"
	// ReasonProviderConfigNotReady (waiting): a preflight check of the ProviderConfig failed; the
	// message names it and its fix. Same as the MachineRequest's.
	ReasonProviderConfigNotReady = "ProviderConfigNotReady"
	// ReasonProviderConfigMoved: the ProviderConfig now points at another Harvester cluster or
	// namespace than the one the machine was created in; the machine stays where it is and is
	// still observed and deleted there. Same as the MachineRequest's.
	ReasonProviderConfigMoved = "ProviderConfigMoved"
	// ReasonCredentialsUnavailable (waiting): the credentials Secret is missing, lacks the key, or
	// holds an unusable kubeconfig. Same as the MachineRequest's.
	ReasonCredentialsUnavailable = "CredentialsUnavailable"
	// ReasonUntrustedEndpoint (waiting): the ProviderConfig's spec.harvester.endpoint names
	// another host than the kubeconfig, which pins no CA; nothing is sent. Same as the
	// MachineRequest's.
	ReasonUntrustedEndpoint = "UntrustedEndpoint"
	// ReasonInsecureCredentials (waiting): the kubeconfig skips TLS verification, uses plain http
	// or a proxy, and its Secret does not allow it. Same as the MachineRequest's.
	ReasonInsecureCredentials = "InsecureCredentials"
	// ReasonPermissionDenied (waiting): Harvester refused a request with the credentials; the
	// message names the verb and resource. Same as the MachineRequest's.
	ReasonPermissionDenied = "PermissionDenied"
	// ReasonHarvesterUnavailable (transient): a Harvester API request failed; the provider retries
	// with backoff. Same as the MachineRequest's.
	ReasonHarvesterUnavailable = "HarvesterUnavailable"
	// ReasonQuotaExceeded (waiting): a ResourceQuota of the Harvester namespace refused an object.
	// Same as the MachineRequest's.
	ReasonQuotaExceeded = "QuotaExceeded"

	// ReasonFailureDomainNotFound (HarvesterMachine, waiting): the Machine's spec.failureDomain is
	// not one of the HarvesterCluster's spec.failureDomains; nothing is created until it is (add
	// it to the HarvesterCluster, or correct the Machine). A machine whose VM exists is not judged:
	// it stays in the failure domain it was created in.
	ReasonFailureDomainNotFound = "FailureDomainNotFound"
	// ReasonNetworkNotFound (HarvesterMachine, waiting): a NetworkAttachmentDefinition of
	// spec.networks does not exist on Harvester. Same as the ProviderConfig check's reason.
	ReasonNetworkNotFound = "NetworkNotFound"
	// ReasonImageNotReady (waiting): the VirtualMachineImage exists but is not imported yet. Same
	// as the MachineRequest's.
	ReasonImageNotReady = "ImageNotReady"
	// ReasonVMProvisioning: the machine's disks, cloud-init Secret and VM are being created on
	// Harvester, and the VM is starting until it runs and reports its address. It is the
	// MachineRequest's VMCreating, named as Cluster API names provisioning.
	ReasonVMProvisioning = "VMProvisioning"
	// ReasonVMUnschedulable (diagnosis): Harvester cannot place the VM; the message carries the
	// scheduler's reason. Same as the MachineRequest's.
	ReasonVMUnschedulable = "VMUnschedulable"
	// ReasonVolumeNotBound (diagnosis): a disk of the VM is Pending. Same as the MachineRequest's.
	ReasonVolumeNotBound = "VolumeNotBound"
	// ReasonVolumeMissing (diagnosis): a disk of the VM was deleted outside the provider. Same as
	// the MachineRequest's.
	ReasonVolumeMissing = "VolumeMissing"
	// ReasonVMNotStarting (diagnosis): the VM's instance does not start. Same as the
	// MachineRequest's.
	ReasonVMNotStarting = "VMNotStarting"
	// ReasonNoIPAddress (diagnosis): the VM runs without an address on its primary NIC past the
	// time the guest agent needs; check the guest agent and DHCP. Same as the MachineRequest's.
	ReasonNoIPAddress = "NoIPAddress"
	// ReasonProvisioningTimeout (does not heal): the machine has not become ready within the
	// provisioning timeout; the message carries the diagnosis. Cluster API's MachineHealthCheck
	// may replace the machine. Same as the MachineRequest's.
	ReasonProvisioningTimeout = "ProvisioningTimeout"
	// ReasonVMRunning (HarvesterMachine, Ready=True): the VM runs and its address is in
	// status.addresses. Same as the MachineRequest's.
	ReasonVMRunning = "VMRunning"
	// ReasonVMNotReady: a provisioned machine's VM exists but is not running (stopped, migrating,
	// crashed); the message carries KubeVirt's printable status. Same as the MachineRequest's.
	ReasonVMNotReady = "VMNotReady"
	// ReasonDiskInUse (waiting): a disk of ours cannot be deleted because a VM uses it. Same as
	// the MachineRequest's.
	ReasonDiskInUse = "DiskInUse"
	// ReasonPlacementNotRecorded (waiting): the API server did not keep the record of where the
	// machine lives; nothing is created, and a deletion waits, until it is kept. Same as the
	// MachineRequest's.
	ReasonPlacementNotRecorded = "PlacementNotRecorded"
	// ReasonPlacementRefused (waiting, Degraded): the HarvesterMachine's record of where its
	// machine lives (annotation harvester.butler.butlerlabs.dev/placement) names another VM
	// namespace or name than its own (its ProviderConfig's Harvester namespace, its own name),
	// and no VM exists there, or one that is another's; or its spec.providerID was set with no
	// place recorded (the provider writes it only after recording one). The record and the
	// providerID are the provider's, and a new machine is made only where its ProviderConfig puts
	// it: nothing is made or changed on Harvester. Remove the annotation and the provider records
	// the machine's own place; for a providerID, delete the Machine.
	ReasonPlacementRefused = "PlacementRefused"
	// ReasonDeleting: the object is being deleted: the machine's VM, disks and cloud-init Secret
	// are being removed from Harvester, and the same one of them has been left there for 30
	// seconds past the VM's shutdown grace period (the message names it). A deletion that makes
	// progress is not reported step by step. Same as the MachineRequest's.
	ReasonDeleting = "Deleting"
	// ReasonDeletionBlocked (waiting): the object is being deleted but Harvester cannot be reached
	// (ProviderConfig or credentials gone). Same as the MachineRequest's.
	ReasonDeletionBlocked = "DeletionBlocked"

	// ReasonInvalidSpec (does not heal): a field is invalid in a way the schema cannot express.
	// Same as the MachineRequest's.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonImageNotFound (does not heal until the image exists): the VirtualMachineImage does not
	// exist on Harvester. Same as the MachineRequest's.
	ReasonImageNotFound = "ImageNotFound"
	// ReasonImageImportFailed (does not heal): Harvester failed to import the image. Same as the
	// MachineRequest's.
	ReasonImageImportFailed = "ImageImportFailed"
	// ReasonImageBackendUnsupported (does not heal): the image's storage backend is not one the
	// provider clones root disks from. Same as the MachineRequest's.
	ReasonImageBackendUnsupported = "ImageBackendUnsupported"
	// ReasonDiskTooSmall (does not heal): spec.rootDisk.size is smaller than the image's virtual
	// size. Same as the MachineRequest's.
	ReasonDiskTooSmall = "DiskTooSmall"
	// ReasonUserDataTooLarge (does not heal): the bootstrap data exceeds what a Secret can hold
	// (1 MiB). Same as the MachineRequest's.
	ReasonUserDataTooLarge = "UserDataTooLarge"
	// ReasonNameConflict (does not heal): an object with the name the provider needs exists on
	// Harvester and was not made for this machine; it is never adopted or changed. Same as the
	// MachineRequest's.
	ReasonNameConflict = "NameConflict"
	// ReasonVMDeleted (does not heal): the VM of a provisioned machine was deleted outside the
	// provider; Cluster API's MachineHealthCheck may replace the machine. Same as the
	// MachineRequest's.
	ReasonVMDeleted = "VMDeleted"
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
