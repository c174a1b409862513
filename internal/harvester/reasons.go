package harvester

// The engine reports its outcomes in the provider's reasons (package api/reasons), which every
// front door's API reports as they are, with the advice only the door can give (which field of
// its object to change, which annotation to set). Where the engine must tell apart causes that a
// door reports as one, or reports in a word of its own, it has the finer words below; each front
// door maps them onto its API's reasons (outcome.APIReason), and a test holds every one of them
// mapped.
const (
	// ReasonNameTaken: an object of the machine's name belongs to nobody the engine may take it
	// from (the APIs say NameConflict).
	ReasonNameTaken = "NameTaken"
	// ReasonNameTakenByAnotherManagementCluster: an object of the machine's name was made for an
	// owner of the same namespace and name by another management cluster; the owner may say that
	// it takes the machine over (the APIs say NameConflict, with the hand-over as advice).
	ReasonNameTakenByAnotherManagementCluster = "NameTakenByAnotherManagementCluster"
	// ReasonInvalidEndpoint: the endpoint override is not a usable URL (the APIs say
	// InvalidProviderConfig: it is the ProviderConfig's spec.harvester.endpoint).
	ReasonInvalidEndpoint = "InvalidEndpoint"
	// ReasonOwnerUnknown: this management cluster's identity could not be read, so it holds no
	// tenant cluster's ownership (the APIs say OwnedElsewhere).
	ReasonOwnerUnknown = "OwnerUnknown"
)

// The preflight's checks (Check.Type), one per condition of a ProviderConfig (spelled the same).
const (
	CheckCredentials = "CredentialsValid"
	CheckImage       = "ImageReady"
	CheckNetwork     = "NetworkReady"
	CheckStorage     = "StorageReady"
	CheckPermissions = "PermissionsReady"
)
