package clustercache

import "errors"

// Problem is why credentials cannot reach a cluster, in words a front door can map to its own
// reasons (the MachineRequest's are spelled the same).
type Problem string

const (
	// CredentialsUnusable means the Secret, its key or the kubeconfig in it is missing or unusable.
	CredentialsUnusable Problem = "CredentialsUnavailable"
	// EndpointUntrusted means the endpoint override could take the credentials to another server.
	EndpointUntrusted Problem = "UntrustedEndpoint"
	// ConnectionInsecure means the connection could be read or redirected, and nobody opted in.
	ConnectionInsecure Problem = "InsecureCredentials"
	// EndpointInvalid means the endpoint override is not a usable URL.
	EndpointInvalid Problem = "InvalidEndpoint"
)

// AnnotationAllowInsecure set to "true" on a credentials Secret accepts a kubeconfig that skips
// TLS verification, talks plain http or goes through a proxy: whoever may write the credentials
// decides. (The API documents it as v1alpha1.AnnotationAllowInsecureCredentials.)
const AnnotationAllowInsecure = "harvester.butler.butlerlabs.dev/allow-insecure-credentials"

// Error says why credentials cannot be used. Message names the Secret, fields, contexts and hosts,
// never a credential, and says what to fix; nothing was sent to any server.
type Error struct {
	Problem Problem
	Message string
}

func (e *Error) Error() string { return e.Message }

// AsError finds an *Error in err's chain.
func AsError(err error) (*Error, bool) { return errors.AsType[*Error](err) }
