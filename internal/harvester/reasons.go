package harvester

// The engine's reasons: why a machine, an image or a check is where it is, in the engine's own
// words. A front door maps each to a reason of its API and adds the advice only it can give (which
// field of its object to change, which annotation to set): the MachineRequest's reasons are
// spelled as these, except where noted.
const (
	// Reasons of machines.

	// ReasonQuotaExceeded: a ResourceQuota refused an object; the message names the quota.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonPermissionDenied: Harvester refused the credentials a request (403).
	ReasonPermissionDenied = "PermissionDenied"
	// ReasonCredentialsUnavailable: the credentials are missing, unusable or refused (401).
	ReasonCredentialsUnavailable = "CredentialsUnavailable"
	// ReasonUntrustedEndpoint: the endpoint override could send the credentials elsewhere.
	ReasonUntrustedEndpoint = "UntrustedEndpoint"
	// ReasonInsecureCredentials: the connection could be read or redirected, and the credentials'
	// owner did not opt in.
	ReasonInsecureCredentials = "InsecureCredentials"
	// ReasonInvalidEndpoint: the endpoint override is not a usable URL (the MachineRequest says
	// InvalidProviderConfig: it is the ProviderConfig's spec.harvester.endpoint).
	ReasonInvalidEndpoint = "InvalidEndpoint"
	// ReasonInvalidSpec: Harvester's validation refused an object as described; the same
	// description would be refused again.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonVMDeleted: the machine's recorded VM is gone; it is never replaced by another.
	ReasonVMDeleted = "VMDeleted"
	// ReasonNameTaken: an object of the machine's name belongs to nobody the engine may take it
	// from (MachineRequest: NameConflict).
	ReasonNameTaken = "NameTaken"
	// ReasonNameTakenByAnotherManagementCluster: an object of the machine's name was made for an
	// owner of the same namespace and name by another management cluster; the owner may say that
	// it takes the machine over (MachineRequest: NameConflict).
	ReasonNameTakenByAnotherManagementCluster = "NameTakenByAnotherManagementCluster"
	// ReasonOwnedElsewhere: the tenant cluster's ownership on Harvester (its Lease, see
	// ownership.go) is another management cluster's, or nobody's yet: nothing made for another
	// owner is taken.
	ReasonOwnedElsewhere = "OwnedElsewhere"
	// ReasonOwnerUnknown: this management cluster's identity could not be read, so it holds no
	// tenant cluster's ownership.
	ReasonOwnerUnknown = "OwnerUnknown"
	// ReasonImageNotFound, ReasonImageNotReady, ReasonImageImportFailed,
	// ReasonImageBackendUnsupported and ReasonDiskTooSmall: the image the root disk is cloned
	// from cannot be used (yet).
	ReasonImageNotFound           = "ImageNotFound"
	ReasonImageNotReady           = "ImageNotReady"
	ReasonImageImportFailed       = "ImageImportFailed"
	ReasonImageBackendUnsupported = "ImageBackendUnsupported"
	ReasonDiskTooSmall            = "DiskTooSmall"
	// ReasonDiskInUse: a disk to delete is mounted by a VM that is not the machine's.
	ReasonDiskInUse = "DiskInUse"
	// ReasonVMCreating: the machine is on its way (a disk being replaced or deleted first).
	ReasonVMCreating = "VMCreating"
	// ReasonVMNotStarting, ReasonVMUnschedulable, ReasonVolumeNotBound and ReasonVolumeMissing:
	// diagnoses of a VM that does not start.
	ReasonVMNotStarting   = "VMNotStarting"
	ReasonVMUnschedulable = "VMUnschedulable"
	ReasonVolumeNotBound  = "VolumeNotBound"
	ReasonVolumeMissing   = "VolumeMissing"
	// ReasonNoIPAddress: the VM runs but reports no IPv4 address.
	ReasonNoIPAddress = "NoIPAddress"

	// Reasons of images.

	// ReasonCreateImageFailed: the image cannot be created as asked (a name taken by another
	// URL, Harvester's refusal).
	ReasonCreateImageFailed = "CreateImageFailed"
	// ReasonHarvesterImportFailed, ReasonHarvesterRetryLimitExceeded and
	// ReasonHarvesterInitFailed: Harvester gave up importing the image.
	ReasonHarvesterImportFailed       = "HarvesterImportFailed"
	ReasonHarvesterRetryLimitExceeded = "HarvesterRetryLimitExceeded"
	ReasonHarvesterInitFailed         = "HarvesterInitFailed"

	// Reasons of preflight checks.

	ReasonCheckPassed          = "CheckPassed"
	ReasonNotChecked           = "NotChecked"
	ReasonNoDefaultImage       = "NoDefaultImage"
	ReasonHarvesterUnreachable = "HarvesterUnreachable"
	ReasonNetworkNotFound      = "NetworkNotFound"
	ReasonStorageClassNotFound = "StorageClassNotFound"
	ReasonPermissionsMissing   = "PermissionsMissing"
)

// The preflight's checks (Check.Type), one per condition of a ProviderConfig (spelled the same).
const (
	CheckCredentials = "CredentialsValid"
	CheckImage       = "ImageReady"
	CheckNetwork     = "NetworkReady"
	CheckStorage     = "StorageReady"
	CheckPermissions = "PermissionsReady"
)
