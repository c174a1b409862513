package v1alpha1

// Condition types of a MachineRequest.
const (
	// ConditionReady is True while the machine runs and its IP address is reported.
	ConditionReady = "Ready"
	// ConditionProgressing is True while the provider is working towards Running (or towards
	// deletion) and False once it has arrived or has given up.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True while something keeps the provider from making progress: a
	// transient Harvester error, missing credentials or a permanent failure. Its message says why.
	ConditionDegraded = "Degraded"
)

// Condition reasons. Each is also the failureReason of a Failed MachineRequest where it says
// "permanent"; the others are transient or waiting states that resolve by themselves or once the
// user fixes what the condition message names.
const (
	// ReasonPending: the request was accepted and the provider has not created anything yet.
	ReasonPending = "Pending"
	// ReasonProviderConfigNotFound (waiting): spec.providerRef names a ProviderConfig that does not
	// exist. Create it, or fix spec.providerRef.
	ReasonProviderConfigNotFound = "ProviderConfigNotFound"
	// ReasonInvalidProviderConfig (waiting): the ProviderConfig's harvester block is missing or
	// malformed; the message names the field.
	ReasonInvalidProviderConfig = "InvalidProviderConfig"
	// ReasonCredentialsUnavailable (waiting): the credentials Secret is missing, lacks the key, or
	// holds a kubeconfig that is not usable; the message says which.
	ReasonCredentialsUnavailable = "CredentialsUnavailable"
	// ReasonPermissionDenied (waiting): Harvester refused a request with the given credentials;
	// the message names the verb and resource.
	ReasonPermissionDenied = "PermissionDenied"
	// ReasonHarvesterUnavailable (transient): a Harvester API request failed (unreachable,
	// timeout, 5xx, throttling, conflict); the provider retries with backoff.
	ReasonHarvesterUnavailable = "HarvesterUnavailable"
	// ReasonImageNotReady (waiting): the VirtualMachineImage exists but is not imported yet.
	ReasonImageNotReady = "ImageNotReady"
	// ReasonVMCreating: the VM exists on Harvester and is starting.
	ReasonVMCreating = "VMCreating"
	// ReasonWaitingForIPAddress: the VM runs and the guest agent has not reported an IPv4
	// address on the VM's NIC yet.
	ReasonWaitingForIPAddress = "WaitingForIPAddress"
	// ReasonVMUnschedulable (diagnosis): Harvester cannot place the VM; the message carries the
	// scheduler's reason.
	ReasonVMUnschedulable = "VMUnschedulable"
	// ReasonVolumeNotBound (diagnosis): a disk of the VM is Pending; the message says why.
	ReasonVolumeNotBound = "VolumeNotBound"
	// ReasonVolumeMissing (diagnosis): a disk of the VM was deleted outside the provider.
	ReasonVolumeMissing = "VolumeMissing"
	// ReasonVMNotStarting (diagnosis): the VM's instance does not start; the message carries
	// KubeVirt's phase and condition.
	ReasonVMNotStarting = "VMNotStarting"
	// ReasonNoIPAddress (diagnosis): the VM has run for longer than the guest agent needs to report
	// an address, without an IPv4 address on its NIC: check the guest agent and DHCP.
	ReasonNoIPAddress = "NoIPAddress"
	// ReasonProvisioningTimeout (Degraded): the machine has not become Running within the
	// provisioning timeout; the message carries the diagnosis. The provider keeps waiting.
	ReasonProvisioningTimeout = "ProvisioningTimeout"
	// ReasonVMRunning: the VM runs and its IP address is in status.ipAddress.
	ReasonVMRunning = "VMRunning"
	// ReasonVMNotReady: a Running machine's VM exists but is not running (stopped, migrating,
	// crashed); the message carries KubeVirt's printable status.
	ReasonVMNotReady = "VMNotReady"
	// ReasonAsExpected is the reason of Degraded=False.
	ReasonAsExpected = "AsExpected"
	// ReasonDeleting: the VM and its disks are being removed from Harvester.
	ReasonDeleting = "Deleting"
	// ReasonDeletionBlocked (waiting): the MachineRequest is being deleted but the provider cannot
	// reach Harvester (ProviderConfig or Secret gone). Restore them, or set the annotation
	// AnnotationSkipHarvesterCleanup to release the MachineRequest without cleaning up.
	ReasonDeletionBlocked = "DeletionBlocked"

	// ReasonInvalidSpec (permanent): a field is invalid in a way the schema cannot express.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonImageNotFound (permanent): the VirtualMachineImage does not exist on Harvester.
	ReasonImageNotFound = "ImageNotFound"
	// ReasonImageImportFailed (permanent): Harvester failed to import the image.
	ReasonImageImportFailed = "ImageImportFailed"
	// ReasonDiskTooSmall (permanent): spec.diskGB is smaller than the image's virtual size.
	ReasonDiskTooSmall = "DiskTooSmall"
	// ReasonUserDataTooLarge (permanent): userData and networkData together exceed what a Secret
	// can hold (1 MiB).
	ReasonUserDataTooLarge = "UserDataTooLarge"
	// ReasonNameConflict (permanent): an object with the name the provider needs exists on
	// Harvester and was not created for this MachineRequest. It is never adopted or changed.
	ReasonNameConflict = "NameConflict"
	// ReasonVMDeleted (permanent): the VM of a Running machine was deleted outside the provider.
	ReasonVMDeleted = "VMDeleted"
)

const (
	// MachineRequestFinalizer holds a MachineRequest until its objects on Harvester are gone.
	// It is the published provider's finalizer name, so upgrades keep working.
	MachineRequestFinalizer = "machinerequest.butler.butlerlabs.dev/harvester-finalizer"
	// AnnotationSkipHarvesterCleanup is the escape hatch for when Harvester or its credentials are
	// gone for good: set to "true" on a MachineRequest being deleted, it releases the finalizer
	// without deleting anything on Harvester. Whatever exists on Harvester is left there.
	AnnotationSkipHarvesterCleanup = "harvester.butler.butlerlabs.dev/skip-cleanup"
	// AnnotationRetry lets a user retry a Failed MachineRequest without a spec change: set to
	// "true", it makes the provider retry, and the provider removes it when the retry starts.
	AnnotationRetry = "harvester.butler.butlerlabs.dev/retry"
)

// Condition types of a harvester ProviderConfig, each a preflight check; Ready is True when all
// of them are.
const (
	// ConditionCredentialsValid: the credentials Secret exists, has the key, holds a
	// self-contained kubeconfig, and the Harvester API answers with it.
	ConditionCredentialsValid = "CredentialsValid"
	// ConditionImageReady: the default image (harvester.imageName) exists and is imported.
	ConditionImageReady = "ImageReady"
	// ConditionNetworkReady: the NetworkAttachmentDefinition named by harvester.networkName exists.
	ConditionNetworkReady = "NetworkReady"
	// ConditionStorageReady: the storage classes the disks need exist (the default image's, and
	// harvester.storageClassName if set).
	ConditionStorageReady = "StorageReady"
	// ConditionPermissionsReady: the credentials may do everything the provider does on Harvester
	// (checked with SelfSubjectAccessReviews); the message lists what is missing.
	ConditionPermissionsReady = "PermissionsReady"
)

// Reasons of the ProviderConfig conditions, besides the MachineRequest reasons they share
// (CredentialsUnavailable, ImageNotFound, ImageNotReady, ImageImportFailed).
const (
	// ReasonCheckPassed: the check passed.
	ReasonCheckPassed = "CheckPassed"
	// ReasonAllChecksPassed: every check passed (Ready=True).
	ReasonAllChecksPassed = "AllChecksPassed"
	// ReasonChecksFailed: at least one check failed (Ready=False); the message names them.
	ReasonChecksFailed = "ChecksFailed"
	// ReasonChecksIncomplete: no check failed, but some could not complete because Harvester's API
	// failed transiently (Ready=Unknown); they are retried, and MachineRequests are not held up.
	ReasonChecksIncomplete = "ChecksIncomplete"
	// ReasonNotChecked: the check could not run because the credentials do not work.
	ReasonNotChecked = "NotChecked"
	// ReasonNoDefaultImage: no harvester.imageName is set; every MachineRequest must set spec.image.
	ReasonNoDefaultImage = "NoDefaultImage"
	// ReasonHarvesterUnreachable: the Harvester API did not answer.
	ReasonHarvesterUnreachable = "HarvesterUnreachable"
	// ReasonNetworkNotFound: the NetworkAttachmentDefinition does not exist.
	ReasonNetworkNotFound = "NetworkNotFound"
	// ReasonStorageClassNotFound: a storage class the disks need does not exist.
	ReasonStorageClassNotFound = "StorageClassNotFound"
	// ReasonPermissionsMissing: the credentials lack permissions; the message lists them.
	ReasonPermissionsMissing = "PermissionsMissing"
	// ReasonProviderConfigNotShared (MachineRequest, waiting): spec.providerRef names a
	// ProviderConfig of another namespace whose spec.scope.type is not "platform".
	ReasonProviderConfigNotShared = "ProviderConfigNotShared"
	// ReasonProviderConfigNotReady (MachineRequest, waiting): a preflight check of the
	// ProviderConfig that this request depends on failed; the message names it and its fix.
	ReasonProviderConfigNotReady = "ProviderConfigNotReady"
)
