// Package reasons is the provider's vocabulary of condition reasons: every reason its kinds
// report, declared once, with what it says of the object that reports it (its Behaviour, as
// data). One word means one cause on every kind: the API packages (api/v1alpha1,
// api/infrastructure/v1alpha1) name for their kinds the reasons those report, documented for the
// kind, and the engine reports its outcomes in these words, or in finer ones of its own that its
// front doors map onto these.
package reasons

// Behaviour is what a reason says of the object that reports it: whether anything is wrong, who
// is to act, and what the provider does meanwhile.
type Behaviour string

// The behaviours. A wait (the object is looked at again later) is Waiting, Transient, Attention,
// Configuration or Diagnosis; Permanent is not retried until what caused it changes.
const (
	// Settled: the object is as its spec asks; nothing is to be done.
	Settled Behaviour = "settled"
	// Progress: the object is on its way; nothing is wrong.
	Progress Behaviour = "progress"
	// Waiting: the object waits on something that comes by itself (another controller, an image's
	// import, a timer) or on what the message names; nothing is wrong unless it lasts.
	Waiting Behaviour = "waiting"
	// Transient: a request failed (Harvester unreachable, a timeout, a 5xx); it is retried with
	// backoff.
	Transient Behaviour = "transient"
	// Attention: a person must act (the message says what): the object that waits on it is
	// Degraded, with a Warning event when the wait begins. It is retried, and never fails by
	// itself.
	Attention Behaviour = "attention"
	// Configuration: the configuration (the ProviderConfig, its credentials, their permissions)
	// must be fixed: as Attention, and a MachineRequest that has no VM yet is Failed with it after
	// --config-grace-period, so that a caller waiting for Failed can act. It is retried when the
	// configuration passes again.
	Configuration Behaviour = "configuration"
	// Diagnosis: why a VM does not start or does not run, while the provider waits for it; a
	// machine that is not Running within --provisioning-timeout fails with ProvisioningTimeout.
	Diagnosis Behaviour = "diagnosis"
	// Permanent: the object cannot be served as it is: a MachineRequest or ImageSync is Failed, a
	// Cluster API kind is Ready=False; nothing is retried until the spec or what caused it
	// changes.
	Permanent Behaviour = "permanent"
	// Event: the reason of an event, never of a condition.
	Event Behaviour = "event"
)

// Behaviours are the behaviours in the order the reference documents them, each with what it
// means for the person reading a condition.
var Behaviours = []struct {
	Behaviour
	Meaning string
}{
	{Settled, "as the spec asks; nothing to do"},
	{Progress, "on its way; nothing to do"},
	{Waiting, "waits on something that comes by itself, or on what the message names; nothing to do unless it lasts"},
	{Transient, "a request failed; retried with backoff"},
	{Attention, "someone must act as the message says; the object waiting on it is Degraded, with a Warning event; retried, never failed for it"},
	{Configuration, "fix the ProviderConfig, its credentials or their permissions; as attention, and a MachineRequest with no VM yet is Failed after --config-grace-period"},
	{Diagnosis, "why the VM does not start or run; the machine fails with ProvisioningTimeout if it lasts"},
	{Permanent, "cannot be served as it is; not retried until the spec or the cause changes"},
	{Event, "an event's reason only"},
}

// Reasons of the machines' and clusters' summary (Ready, Progressing, Degraded).
const (
	// AsExpected: nothing needs attention (Degraded=False).
	AsExpected = "AsExpected"
	// Ready: a HarvesterCluster's infrastructure is ready for machines.
	Ready = "Ready"
	// Pending: accepted; nothing is created yet.
	Pending = "Pending"
	// VMCreating: a MachineRequest's disks and VM are being created and the VM is starting.
	VMCreating = "VMCreating"
	// VMProvisioning: a HarvesterMachine's disks and VM are being created and the VM is starting
	// (VMCreating, named as Cluster API names provisioning).
	VMProvisioning = "VMProvisioning"
	// VMRunning: the VM runs and its address is reported.
	VMRunning = "VMRunning"
	// VMNotReady: a provisioned machine's VM exists but does not run.
	VMNotReady = "VMNotReady"
	// Deleting: the object's VM, disks and cloud-init Secret are being removed from Harvester.
	Deleting = "Deleting"
	// DeletionBlocked: the object is being deleted and Harvester cannot be reached.
	DeletionBlocked = "DeletionBlocked"
	// HarvesterUnavailable: a Harvester API request failed.
	HarvesterUnavailable = "HarvesterUnavailable"
	// WaitingForOwner: no owner of Cluster API yet.
	WaitingForOwner = "WaitingForOwner"
	// WaitingForControlPlaneEndpoint: no control plane endpoint yet.
	WaitingForControlPlaneEndpoint = "WaitingForControlPlaneEndpoint"
	// WaitingForClusterInfrastructure: the Cluster's infrastructure is not provisioned yet.
	WaitingForClusterInfrastructure = "WaitingForClusterInfrastructure"
	// WaitingForBootstrapData: the Machine's bootstrap data is not set yet.
	WaitingForBootstrapData = "WaitingForBootstrapData"
)

// Reasons of what a machine's ProviderConfig and credentials allow.
const (
	// ProviderConfigNotFound: the referenced ProviderConfig does not exist.
	ProviderConfigNotFound = "ProviderConfigNotFound"
	// InvalidProviderConfig: the ProviderConfig's harvester block is missing or malformed.
	InvalidProviderConfig = "InvalidProviderConfig"
	// ProviderConfigNotShared: the ProviderConfig is another namespace's and not shared.
	ProviderConfigNotShared = "ProviderConfigNotShared"
	// ProviderConfigNotReady: a preflight check of the ProviderConfig failed.
	ProviderConfigNotReady = "ProviderConfigNotReady"
	// ProviderConfigMoved: the ProviderConfig points elsewhere than where the machine was made.
	ProviderConfigMoved = "ProviderConfigMoved"
	// CredentialsUnavailable: the credentials are missing, unusable or refused.
	CredentialsUnavailable = "CredentialsUnavailable"
	// UntrustedEndpoint: the endpoint override could carry the credentials elsewhere.
	UntrustedEndpoint = "UntrustedEndpoint"
	// InsecureCredentials: the connection could be read or redirected, and nobody allowed it.
	InsecureCredentials = "InsecureCredentials"
	// PermissionDenied: Harvester refused a request with the credentials.
	PermissionDenied = "PermissionDenied"
	// QuotaExceeded: a ResourceQuota of the Harvester namespace refused an object.
	QuotaExceeded = "QuotaExceeded"
)

// Reasons of where a machine lives and whose it is.
const (
	// FailureDomainNotFound: the Machine's failure domain is not one of its cluster's.
	FailureDomainNotFound = "FailureDomainNotFound"
	// PlacementNotRecorded: the API server did not keep the record of where the machine lives.
	PlacementNotRecorded = "PlacementNotRecorded"
	// PlacementRefused: the record of where the machine lives, or its providerID, is not one the
	// provider wrote for it.
	PlacementRefused = "PlacementRefused"
	// NameConflict: an object of the name the provider needs is not the machine's.
	NameConflict = "NameConflict"
	// OwnedElsewhere: the machine's VM was made for another copy of it, whose management cluster
	// runs its tenant cluster.
	OwnedElsewhere = "OwnedElsewhere"
	// VMTakenOver: the machine's VM, made for an earlier owner of its name, was taken over.
	VMTakenOver = "VMTakenOver"
	// CleanupSkipped: a deleted object was released without cleaning up on Harvester.
	CleanupSkipped = "CleanupSkipped"
	// CleanupNotSkipped: a deleted object asked to be released without cleanup, which was not
	// granted.
	CleanupNotSkipped = "CleanupNotSkipped"
)

// Reasons of a machine's addresses from IP address pools (Cluster API's IPAM contract).
const (
	// IPAddressPending: an IPAddressClaim of the machine is not given an address yet.
	IPAddressPending = "IPAddressPending"
	// IPPoolNotReady: the IPAM provider says an address pool is not ready.
	IPPoolNotReady = "IPPoolNotReady"
	// IPPoolExhausted: an address pool has no address left.
	IPPoolExhausted = "IPPoolExhausted"
	// IPAddressAllocationFailed: the IPAM provider could not allocate an address.
	IPAddressAllocationFailed = "IPAddressAllocationFailed"
	// IPPoolKindNotServed: no CRD serves the kind an address pool reference names.
	IPPoolKindNotServed = "IPPoolKindNotServed"
	// IPAddressInvalid: an address given to the machine cannot configure its NIC.
	IPAddressInvalid = "IPAddressInvalid"
	// IPAddressClaimConflict: an IPAddressClaim of the name the machine needs is not its own.
	IPAddressClaimConflict = "IPAddressClaimConflict"
	// GuestAddressMismatch: the guest reports another address than the one assigned.
	GuestAddressMismatch = "GuestAddressMismatch"
	// ManagementNetworkMismatch: the machine's first NIC is not on the network Harvester's cloud
	// provider reads Node addresses from.
	ManagementNetworkMismatch = "ManagementNetworkMismatch"
)

// Reasons of a machine's image, disks and VM.
const (
	// InvalidSpec: a field is invalid in a way the schema cannot express.
	InvalidSpec = "InvalidSpec"
	// ImageNotFound: the VirtualMachineImage does not exist.
	ImageNotFound = "ImageNotFound"
	// ImageNotReady: the VirtualMachineImage is not imported yet.
	ImageNotReady = "ImageNotReady"
	// ImageImportFailed: Harvester failed to import the image.
	ImageImportFailed = "ImageImportFailed"
	// ImageBackendUnsupported: the image's storage backend is not one root disks are cloned from.
	ImageBackendUnsupported = "ImageBackendUnsupported"
	// DiskTooSmall: the root disk is smaller than the image.
	DiskTooSmall = "DiskTooSmall"
	// UserDataTooLarge: the cloud-init data exceeds what a Secret holds.
	UserDataTooLarge = "UserDataTooLarge"
	// NetworkNotFound: a NetworkAttachmentDefinition does not exist.
	NetworkNotFound = "NetworkNotFound"
	// DiskInUse: a disk to delete is mounted by a VM that is not the machine's.
	DiskInUse = "DiskInUse"
	// DeviceUnavailable: Harvester offers no passthrough device or vGPU of a resource the machine
	// asks for.
	DeviceUnavailable = "DeviceUnavailable"
	// VMUnschedulable: Harvester cannot place the VM.
	VMUnschedulable = "VMUnschedulable"
	// VolumeNotBound: a disk of the VM is Pending.
	VolumeNotBound = "VolumeNotBound"
	// VolumeMissing: a disk of the VM was deleted outside the provider.
	VolumeMissing = "VolumeMissing"
	// VMNotStarting: the VM's instance does not start.
	VMNotStarting = "VMNotStarting"
	// NoIPAddress: the VM runs without an address past the time the guest agent needs.
	NoIPAddress = "NoIPAddress"
	// ProvisioningTimeout: the machine did not become Running within the provisioning timeout.
	ProvisioningTimeout = "ProvisioningTimeout"
	// VMDeleted: the VM of a provisioned machine was deleted outside the provider.
	VMDeleted = "VMDeleted"
)

// Reasons of a ProviderConfig's preflight checks.
const (
	// CheckPassed: the check passed.
	CheckPassed = "CheckPassed"
	// AllChecksPassed: every check passed.
	AllChecksPassed = "AllChecksPassed"
	// ChecksFailed: at least one check failed.
	ChecksFailed = "ChecksFailed"
	// ChecksIncomplete: no check failed, and some could not complete.
	ChecksIncomplete = "ChecksIncomplete"
	// NotChecked: the check could not run, since the credentials do not work.
	NotChecked = "NotChecked"
	// NoDefaultImage: the ProviderConfig names no default image.
	NoDefaultImage = "NoDefaultImage"
	// HarvesterUnreachable: the Harvester API did not answer.
	HarvesterUnreachable = "HarvesterUnreachable"
	// StorageClassNotFound: a storage class the disks need does not exist.
	StorageClassNotFound = "StorageClassNotFound"
	// PermissionsMissing: the credentials lack permissions the provider needs.
	PermissionsMissing = "PermissionsMissing"
)

// Reasons of an ImageSync.
const (
	// ImageDownloading: Harvester is downloading the image.
	ImageDownloading = "ImageDownloading"
	// ImageReady: the image is on Harvester.
	ImageReady = "ImageReady"
	// ImageMissing: a ready image was deleted on Harvester and is made again.
	ImageMissing = "ImageMissing"
	// ButlerConfigNotFound: the ButlerConfig "butler" does not exist.
	ButlerConfigNotFound = "ButlerConfigNotFound"
	// ImageFactoryNotConfigured: the ButlerConfig names no image factory.
	ImageFactoryNotConfigured = "ImageFactoryNotConfigured"
	// CredentialsError: the Harvester credentials stayed unusable past the grace period.
	CredentialsError = "CredentialsError"
	// UnsupportedTransferMode: the transfer mode asked is not supported.
	UnsupportedTransferMode = "UnsupportedTransferMode"
	// CreateImageFailed: the VirtualMachineImage cannot be created as asked.
	CreateImageFailed = "CreateImageFailed"
	// HarvesterImportFailed: Harvester reports the import failed for good.
	HarvesterImportFailed = "HarvesterImportFailed"
	// HarvesterRetryLimitExceeded: Harvester gave up downloading the image after its retries.
	HarvesterRetryLimitExceeded = "HarvesterRetryLimitExceeded"
	// HarvesterInitFailed: Harvester could not initialize the image.
	HarvesterInitFailed = "HarvesterInitFailed"
)

// Reasons of a HarvesterCluster's tenant credentials, ownership and pause.
const (
	// GuestCredentialsIssued: the tenant's Harvester credentials exist and are delivered.
	GuestCredentialsIssued = "GuestCredentialsIssued"
	// GuestCredentialsNotManaged: the user opted out of tenant credentials.
	GuestCredentialsNotManaged = "GuestCredentialsNotManaged"
	// GuestCredentialsPending: the tenant credentials are being made.
	GuestCredentialsPending = "GuestCredentialsPending"
	// GuestPermissionsMissing: the provider's credentials may not make the tenant's.
	GuestPermissionsMissing = "GuestPermissionsMissing"
	// GuestCredentialsNameConflict: an object of a name the tenant credentials need is another's.
	GuestCredentialsNameConflict = "GuestCredentialsNameConflict"
	// GuestCredentialsFailed: a request for the tenant credentials failed.
	GuestCredentialsFailed = "GuestCredentialsFailed"
	// GuestNamespaceShared: the cluster's Harvester namespace holds others' objects.
	GuestNamespaceShared = "GuestNamespaceShared"
	// GuestTenantServerInvalid: the tenant server given beside the credentials is not usable.
	GuestTenantServerInvalid = "GuestTenantServerInvalid"
	// GuestNamespaceExclusive: the tenant credentials reach the cluster's namespace alone.
	GuestNamespaceExclusive = "GuestNamespaceExclusive"
	// GuestBindingClusterWide: the tenant credentials are still bound cluster-wide.
	GuestBindingClusterWide = "GuestBindingClusterWide"
	// OwnershipHeld: this management cluster holds the tenant cluster's ownership Lease.
	OwnershipHeld = "OwnershipHeld"
	// OwnershipTakenOver: this management cluster took the Lease over.
	OwnershipTakenOver = "OwnershipTakenOver"
	// OwnedByAnotherManagementCluster: another management cluster holds the Lease.
	OwnedByAnotherManagementCluster = "OwnedByAnotherManagementCluster"
	// OwnershipReleased: the paused cluster's Lease is released.
	OwnershipReleased = "OwnershipReleased"
	// OwnershipUnknown: the Lease cannot be read or written.
	OwnershipUnknown = "OwnershipUnknown"
	// Paused: the object is paused.
	Paused = "Paused"
	// NotPaused: nothing pauses the object.
	NotPaused = "NotPaused"
)

// behaviours is each reason's behaviour.
var behaviours = map[string]Behaviour{
	AsExpected:                      Settled,
	Ready:                           Settled,
	Pending:                         Progress,
	VMCreating:                      Progress,
	VMProvisioning:                  Progress,
	VMRunning:                       Settled,
	VMNotReady:                      Diagnosis,
	Deleting:                        Progress,
	DeletionBlocked:                 Attention,
	HarvesterUnavailable:            Transient,
	WaitingForOwner:                 Waiting,
	WaitingForControlPlaneEndpoint:  Waiting,
	WaitingForClusterInfrastructure: Waiting,
	WaitingForBootstrapData:         Waiting,

	ProviderConfigNotFound:  Configuration,
	InvalidProviderConfig:   Configuration,
	ProviderConfigNotShared: Configuration,
	ProviderConfigNotReady:  Configuration,
	ProviderConfigMoved:     Attention,
	CredentialsUnavailable:  Configuration,
	UntrustedEndpoint:       Configuration,
	InsecureCredentials:     Configuration,
	PermissionDenied:        Configuration,
	QuotaExceeded:           Attention,

	FailureDomainNotFound: Attention,
	PlacementNotRecorded:  Waiting,
	PlacementRefused:      Attention,
	NameConflict:          Permanent,
	OwnedElsewhere:        Waiting,
	VMTakenOver:           Event,
	CleanupSkipped:        Event,
	CleanupNotSkipped:     Event,

	IPAddressPending:          Waiting,
	IPPoolNotReady:            Waiting,
	IPPoolExhausted:           Attention,
	IPAddressAllocationFailed: Attention,
	IPPoolKindNotServed:       Attention,
	IPAddressInvalid:          Attention,
	IPAddressClaimConflict:    Attention,
	GuestAddressMismatch:      Attention,
	ManagementNetworkMismatch: Attention,

	InvalidSpec:             Permanent,
	ImageNotFound:           Permanent,
	ImageNotReady:           Waiting,
	ImageImportFailed:       Permanent,
	ImageBackendUnsupported: Permanent,
	DiskTooSmall:            Permanent,
	UserDataTooLarge:        Permanent,
	NetworkNotFound:         Waiting,
	DiskInUse:               Attention,
	DeviceUnavailable:       Attention,
	VMUnschedulable:         Diagnosis,
	VolumeNotBound:          Diagnosis,
	VolumeMissing:           Diagnosis,
	VMNotStarting:           Diagnosis,
	NoIPAddress:             Diagnosis,
	ProvisioningTimeout:     Permanent,
	VMDeleted:               Permanent,

	CheckPassed:          Settled,
	AllChecksPassed:      Settled,
	ChecksFailed:         Attention,
	ChecksIncomplete:     Transient,
	NotChecked:           Waiting,
	NoDefaultImage:       Settled,
	HarvesterUnreachable: Transient,
	StorageClassNotFound: Attention,
	PermissionsMissing:   Attention,

	ImageDownloading:            Progress,
	ImageReady:                  Settled,
	ImageMissing:                Progress,
	ButlerConfigNotFound:        Permanent,
	ImageFactoryNotConfigured:   Permanent,
	CredentialsError:            Permanent,
	UnsupportedTransferMode:     Permanent,
	CreateImageFailed:           Permanent,
	HarvesterImportFailed:       Permanent,
	HarvesterRetryLimitExceeded: Permanent,
	HarvesterInitFailed:         Permanent,

	GuestCredentialsIssued:          Settled,
	GuestCredentialsNotManaged:      Settled,
	GuestCredentialsPending:         Progress,
	GuestPermissionsMissing:         Attention,
	GuestCredentialsNameConflict:    Attention,
	GuestCredentialsFailed:          Transient,
	GuestNamespaceShared:            Attention,
	GuestTenantServerInvalid:        Attention,
	GuestNamespaceExclusive:         Settled,
	GuestBindingClusterWide:         Attention,
	OwnershipHeld:                   Settled,
	OwnershipTakenOver:              Settled,
	OwnedByAnotherManagementCluster: Waiting,
	OwnershipReleased:               Waiting,
	OwnershipUnknown:                Transient,
	Paused:                          Waiting,
	NotPaused:                       Settled,
}

// Of is the behaviour of reason ("" for a word that is not one of the provider's reasons).
func Of(reason string) Behaviour { return behaviours[reason] }

// Degrading reports whether a wait with this reason needs a person to act, so that the object is
// Degraded while it lasts (Attention and Configuration).
func Degrading(reason string) bool {
	b := Of(reason)
	return b == Attention || b == Configuration
}

// OnConfiguration reports whether a wait with this reason is on the configuration, which only the
// user can fix (Configuration).
func OnConfiguration(reason string) bool { return Of(reason) == Configuration }
