package v1alpha1

import "github.com/butlerdotdev/butler-provider-harvester/api/reasons"

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

// Condition reasons, each the provider's word for one cause on every kind (package
// api/reasons, which also says what each means for the object: its behaviour). A Failed
// MachineRequest's failureReason is one whose behaviour is permanent, or a configuration reason
// that outlasted the grace period; the others are states that resolve by themselves or once the
// user fixes what the condition message names.
const (
	// ReasonPending: the request was accepted and the provider has not created anything yet.
	ReasonPending = reasons.Pending
	// ReasonProviderConfigNotFound: spec.providerRef names a ProviderConfig that does not
	// exist. Create it, or fix spec.providerRef.
	ReasonProviderConfigNotFound = reasons.ProviderConfigNotFound
	// ReasonInvalidProviderConfig: the ProviderConfig's harvester block is missing or
	// malformed; the message names the field.
	ReasonInvalidProviderConfig = reasons.InvalidProviderConfig
	// ReasonCredentialsUnavailable: the credentials Secret is missing, lacks the key, or
	// holds a kubeconfig that is not usable; the message says which.
	ReasonCredentialsUnavailable = reasons.CredentialsUnavailable
	// ReasonPermissionDenied: Harvester refused a request with the given credentials;
	// the message names the verb and resource.
	ReasonPermissionDenied = reasons.PermissionDenied
	// ReasonHarvesterUnavailable: a Harvester API request failed (unreachable,
	// timeout, 5xx, throttling, conflict); the provider retries with backoff.
	ReasonHarvesterUnavailable = reasons.HarvesterUnavailable
	// ReasonImageNotReady: the VirtualMachineImage exists but is not imported yet.
	ReasonImageNotReady = reasons.ImageNotReady
	// ReasonVMCreating: the machine's disks and VM are being created on Harvester, and the VM
	// is starting until it runs and reports an IPv4 address. One message covers it all: the
	// steps of a healthy start are no news (a diagnosis names what goes wrong).
	ReasonVMCreating = reasons.VMCreating
	// ReasonVMUnschedulable: Harvester cannot place the VM; the message carries the
	// scheduler's reason.
	ReasonVMUnschedulable = reasons.VMUnschedulable
	// ReasonVolumeNotBound: a disk of the VM is Pending; the message says why.
	ReasonVolumeNotBound = reasons.VolumeNotBound
	// ReasonVolumeMissing: a disk of the VM was deleted outside the provider.
	ReasonVolumeMissing = reasons.VolumeMissing
	// ReasonVMNotStarting: the VM's instance does not start; the message carries
	// KubeVirt's phase and condition.
	ReasonVMNotStarting = reasons.VMNotStarting
	// ReasonNoIPAddress: the VM has run for longer than the guest agent needs to report
	// an address, without an IPv4 address on its NIC: check the guest agent and DHCP.
	ReasonNoIPAddress = reasons.NoIPAddress
	// ReasonProvisioningTimeout: the machine has not become Running within the
	// provisioning timeout (--provisioning-timeout, measured from its creation or last retry);
	// the message carries the diagnosis. A retry (spec change or retry annotation) starts a new
	// timeout.
	ReasonProvisioningTimeout = reasons.ProvisioningTimeout
	// ReasonVMRunning: the VM runs and its IP address is in status.ipAddress.
	ReasonVMRunning = reasons.VMRunning
	// ReasonVMNotReady: a Running machine's VM exists but is not running (stopped, migrating,
	// crashed); the message carries KubeVirt's printable status.
	ReasonVMNotReady = reasons.VMNotReady
	// ReasonAsExpected is the reason of Degraded=False.
	ReasonAsExpected = reasons.AsExpected
	// ReasonDeleting: the VM and its disks are being removed from Harvester.
	ReasonDeleting = reasons.Deleting
	// ReasonProviderConfigMoved: the ProviderConfig now points at another Harvester
	// cluster or namespace (or another provider) than the one the machine was created in
	// (status.placement). The machine stays where it is and is still observed and deleted there;
	// new machines use the new target. Restore the ProviderConfig, or delete and recreate the
	// MachineRequest to move the machine.
	ReasonProviderConfigMoved = reasons.ProviderConfigMoved
	// ReasonQuotaExceeded: a ResourceQuota of the Harvester namespace refused to admit an
	// object; the message names the quota. Raise the quota or free resources; the provider retries.
	ReasonQuotaExceeded = reasons.QuotaExceeded
	// ReasonDiskInUse: a disk of ours cannot be deleted because a VM uses it (it is left
	// by an earlier attempt and no longer matches the spec, or the machine is being deleted and
	// another VM mounts it); the message names the VM. Harvester refuses to delete a volume a VM
	// uses: the provider waits until it is detached.
	ReasonDiskInUse = reasons.DiskInUse
	// ReasonVMTakenOver: the VM under the machine's name was created by this
	// provider for an earlier MachineRequest of the same namespace and name, which no longer exists
	// (a bootstrap run again after its management cluster was deleted); it is taken over as it is.
	ReasonVMTakenOver = reasons.VMTakenOver
	// ReasonDeletionBlocked: the MachineRequest is being deleted but the provider cannot
	// reach Harvester (ProviderConfig or Secret gone). Restore them, or set the annotation
	// AnnotationSkipHarvesterCleanup to release the MachineRequest without cleaning up.
	ReasonDeletionBlocked = reasons.DeletionBlocked

	// ReasonInvalidSpec: a field is invalid in a way the schema cannot express.
	ReasonInvalidSpec = reasons.InvalidSpec
	// ReasonImageNotFound: the VirtualMachineImage does not exist on Harvester.
	ReasonImageNotFound = reasons.ImageNotFound
	// ReasonImageImportFailed: Harvester failed to import the image.
	ReasonImageImportFailed = reasons.ImageImportFailed
	// ReasonImageBackendUnsupported: the image's storage backend (spec.backend) is
	// not one the provider clones root disks from (backingimage, or cdi where Harvester has CDI's
	// DataVolume API); the message names the backend.
	ReasonImageBackendUnsupported = reasons.ImageBackendUnsupported
	// ReasonDiskTooSmall: spec.diskGB is smaller than the image's virtual size.
	ReasonDiskTooSmall = reasons.DiskTooSmall
	// ReasonUserDataTooLarge: userData and networkData together exceed what a Secret
	// can hold (1 MiB).
	ReasonUserDataTooLarge = reasons.UserDataTooLarge
	// ReasonNameConflict: an object with the name the provider needs exists on
	// Harvester and was not created for this MachineRequest. It is never adopted or changed.
	ReasonNameConflict = reasons.NameConflict
	// ReasonOwnedElsewhere (HarvesterMachines only): the VM of the machine's name was
	// made for an earlier copy of it, and this management cluster does not run its tenant
	// cluster (another holds the cluster's ownership Lease on Harvester, see the
	// HarvesterCluster's Owned condition): nothing is taken while that one does.
	ReasonOwnedElsewhere = reasons.OwnedElsewhere
	// ReasonVMDeleted: the VM of a Running machine was deleted outside the provider.
	ReasonVMDeleted = reasons.VMDeleted
	// ReasonPlacementNotRecorded: the API server did not keep AnnotationPlacement on the
	// MachineRequest (a webhook or policy removed or changed it), or the annotation no longer
	// parses: nothing is created, and a deletion waits, until the record is kept and readable.
	ReasonPlacementNotRecorded = reasons.PlacementNotRecorded
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
	// AnnotationPlacement records where on Harvester the machine lives, as JSON
	// ({"clusterID":...,"server":...,"namespace":...,"name":...}). The provider writes it, together
	// with its finalizer, before it creates anything for the machine, reads it back from the API
	// server's answer, and never changes it: the machine is observed and deleted there, whatever
	// its ProviderConfig or spec say later. It is metadata so that every MachineRequest schema
	// keeps it (Butler's own CRD prunes status fields it does not know); the VM's UID is in
	// status.providerID. Do not edit it.
	AnnotationPlacement = "harvester.butler.butlerlabs.dev/placement"
	// AnnotationHandOver lets a MachineRequest, when set to "true" on it, take over the VM (with its
	// disks and cloud-init Secret) that a MachineRequest of the same namespace and name made from
	// another management cluster, such as the one of an earlier Butler bootstrap run that is gone.
	// Without it such a VM is a NameConflict: two live management clusters against one Harvester
	// namespace must never take one VM from each other. A NameConflict failure is retried when it
	// is set.
	AnnotationHandOver = "harvester.butler.butlerlabs.dev/hand-over"
	// AnnotationAllowInsecureCredentials accepts, set to "true" on the credentials Secret, a
	// kubeconfig that skips TLS verification, talks plain http, or goes through a proxy-url.
	// Without it such kubeconfigs are refused (ReasonInsecureCredentials). It lives on the Secret
	// so that only who may write the credentials may weaken them: people who may edit
	// ProviderConfigs cannot (on a ProviderConfig it is ignored). It never allows
	// spec.harvester.endpoint to name another host or path (ReasonUntrustedEndpoint).
	AnnotationAllowInsecureCredentials = "harvester.butler.butlerlabs.dev/allow-insecure-credentials"
	// AnnotationSharedNamespace set to "true" on a ProviderConfig lets the provider issue Cluster
	// API tenant clusters' Harvester credentials in its harvester.namespace while others' VMs,
	// disks or credentials are there too. Without it such credentials are refused
	// (GuestNamespaceShared): Harvester's roles, bound in a namespace, reach every VM and PVC of
	// it, so tenants sharing one can stop or detach each other's. Set it only where the clusters
	// sharing the namespace trust each other. It lives on the ProviderConfig, which tenants do
	// not write.
	AnnotationSharedNamespace = "harvester.butler.butlerlabs.dev/shared-namespace"
	// AnnotationHandOverFrom on a ProviderConfig names, comma-separated, management clusters
	// (their kube-system namespace's UID) that are gone for good: the Cluster API tenant clusters
	// they ran with this ProviderConfig are taken over by this management cluster where a copy of
	// them was restored, once their ownership Lease on Harvester has gone unrenewed for a whole
	// lease duration as this manager sees it. It lives on the ProviderConfig, which tenants do
	// not write: a tenant can never take another management cluster's cluster.
	AnnotationHandOverFrom = "harvester.butler.butlerlabs.dev/hand-over-from"
	// AnnotationTenantServer on the credentials Secret is the Harvester API server URL (https)
	// that Cluster API tenant clusters' credentials name, for where tenants reach Harvester
	// elsewhere than at its VIP: a DNS name, a load balancer. The Secret's key TenantCAKey, if
	// present, holds the PEM bundle that server is trusted with (default: Harvester's cluster
	// CA). Without it tenants get Harvester's VIP (ConfigMap harvester-system/vip) on port 6443, as
	// Harvester's own kubeconfig generator writes it. A change rewrites the tenants' kubeconfig
	// with the same token.
	AnnotationTenantServer = "harvester.butler.butlerlabs.dev/tenant-server"
	// TenantCAKey is the credentials Secret's key of the CA bundle for AnnotationTenantServer.
	TenantCAKey = "tenant-ca.crt"
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
	ReasonCheckPassed = reasons.CheckPassed
	// ReasonAllChecksPassed: every check passed (Ready=True).
	ReasonAllChecksPassed = reasons.AllChecksPassed
	// ReasonChecksFailed: at least one check failed (Ready=False); the message names them.
	ReasonChecksFailed = reasons.ChecksFailed
	// ReasonChecksIncomplete: no check failed, but some could not complete because Harvester's API
	// failed transiently (Ready=Unknown); they are retried, and MachineRequests are not held up.
	ReasonChecksIncomplete = reasons.ChecksIncomplete
	// ReasonNotChecked: the check could not run because the credentials do not work.
	ReasonNotChecked = reasons.NotChecked
	// ReasonNoDefaultImage: no harvester.imageName is set; every MachineRequest must set spec.image.
	ReasonNoDefaultImage = reasons.NoDefaultImage
	// ReasonHarvesterUnreachable: the Harvester API did not answer.
	ReasonHarvesterUnreachable = reasons.HarvesterUnreachable
	// ReasonNetworkNotFound: the NetworkAttachmentDefinition does not exist.
	ReasonNetworkNotFound = reasons.NetworkNotFound
	// ReasonStorageClassNotFound: a storage class the disks need does not exist.
	ReasonStorageClassNotFound = reasons.StorageClassNotFound
	// ReasonPermissionsMissing: the credentials lack permissions; the message lists them.
	ReasonPermissionsMissing = reasons.PermissionsMissing
	// ReasonProviderConfigNotShared (MachineRequest): spec.providerRef names a
	// ProviderConfig of another namespace whose spec.scope.type is not "platform".
	ReasonProviderConfigNotShared = reasons.ProviderConfigNotShared
	// ReasonUntrustedEndpoint (CredentialsValid=False; MachineRequest): spec.harvester.endpoint
	// names another host than the kubeconfig's server and the kubeconfig pins no CA, so the
	// endpoint could carry the credentials to a server of someone else's choosing. Nothing is
	// sent. Put the endpoint into the kubeconfig itself, or pin the cluster's CA there.
	ReasonUntrustedEndpoint = reasons.UntrustedEndpoint
	// ReasonInsecureCredentials (CredentialsValid=False; MachineRequest): the kubeconfig
	// skips TLS verification, uses a plain http:// server, or a proxy-url. Nothing is sent unless
	// the credentials Secret carries AnnotationAllowInsecureCredentials.
	ReasonInsecureCredentials = reasons.InsecureCredentials
	// ReasonProviderConfigNotReady (MachineRequest): a preflight check of the
	// ProviderConfig that this request depends on failed; the message names it and its fix.
	ReasonProviderConfigNotReady = reasons.ProviderConfigNotReady
)

// ImageSync finalizer and reasons. The failure reasons are the published provider's, so that callers
// matching on them keep working; this provider sets them only for causes that cannot heal by
// themselves, and retries when what caused them changes.
const (
	// ImageSyncFinalizer is held while the provider manages an ImageSync. Removing it never deletes
	// the image on the provider: VM disks are cloned from it.
	ImageSyncFinalizer = "butler.butlerlabs.dev/imagesync"

	// ReasonImageSyncPending (Progressing): accepted; waiting for what the message says.
	ReasonImageSyncPending = reasons.Pending
	// ReasonImageDownloading (Progressing): Harvester is downloading the image from the factory;
	// the message carries its progress (and failed attempts it retries).
	ReasonImageDownloading = reasons.ImageDownloading
	// ReasonImageReady (Ready): the image is on Harvester; status.providerImageRef names it.
	ReasonImageReady = reasons.ImageReady
	// ReasonImageMissing (Progressing): a Ready image was deleted on Harvester; it is created again.
	ReasonImageMissing = reasons.ImageMissing

	// ReasonButlerConfigNotFound: the cluster-scoped ButlerConfig "butler" does not exist.
	// Retried when it is created.
	ReasonButlerConfigNotFound = reasons.ButlerConfigNotFound
	// ReasonImageFactoryNotConfigured: ButlerConfig "butler" has no spec.imageFactory.url.
	// Retried when it is set.
	ReasonImageFactoryNotConfigured = reasons.ImageFactoryNotConfigured
	// ReasonCredentialsError: the ProviderConfig's Harvester credentials are missing or
	// unusable after the grace period. Retried when they work.
	ReasonCredentialsError = reasons.CredentialsError
	// ReasonUnsupportedTransferMode: spec.transferMode is "proxy", which Harvester does
	// not need and this provider does not support. Retried when the spec changes.
	ReasonUnsupportedTransferMode = reasons.UnsupportedTransferMode
	// ReasonCreateImageFailed: Harvester refused the VirtualMachineImage, or one of that
	// name exists with another URL (not ours to reuse). Retried when the spec changes or the
	// retry annotation is set.
	ReasonCreateImageFailed = reasons.CreateImageFailed
	// ReasonHarvesterImportFailed: Harvester reports the import failed for good (for
	// example an upload that failed).
	ReasonHarvesterImportFailed = reasons.HarvesterImportFailed
	// ReasonHarvesterRetryLimitExceeded: Harvester gave up downloading the image after its
	// retries (status.failed above spec.retry), for example because the URL is unreachable.
	ReasonHarvesterRetryLimitExceeded = reasons.HarvesterRetryLimitExceeded
	// ReasonHarvesterInitFailed: Harvester could not initialize the image (its backing
	// image or storage class) after its retries.
	ReasonHarvesterInitFailed = reasons.HarvesterInitFailed
)
