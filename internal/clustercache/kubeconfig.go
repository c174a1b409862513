package clustercache

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigOptions are what a ProviderConfig adds to the kubeconfig of its credentials Secret.
// Whoever may edit a ProviderConfig need not be able to read the Secret, so neither option may
// send the Secret's credentials anywhere its kubeconfig would not.
type KubeconfigOptions struct {
	// Endpoint (spec.harvester.endpoint), if set, replaces the server of the kubeconfig's current
	// cluster: only with the same host, or when the kubeconfig pins the CA the endpoint must prove.
	Endpoint string
	// AllowInsecure (annotation AnnotationAllowInsecure on the Secret) accepts a kubeconfig that
	// skips TLS verification, talks plain http or goes through a proxy-url.
	AllowInsecure bool
}

func refuse(problem Problem, format string, args ...any) error {
	return &Error{Problem: problem, Message: fmt.Sprintf(format, args...)}
}

// RESTConfigFromKubeconfig turns the kubeconfig held in a credentials Secret into a client config.
// Every error is an *Error, and nothing is ever sent to a server before it returns.
//
// Only the current context is read: its cluster and user must exist, and nothing else in the
// file matters (a kubeconfig often holds other clusters and users, such as an exec plugin for a
// person's own access). Only self-contained credentials are accepted: exec plugins and auth
// providers would run programs or reach services on the manager's host, and file references
// (token, certificate or key files) would read the manager's own files, such as its
// ServiceAccount token. A kubeconfig that skips TLS verification, talks plain http or uses a
// proxy is refused unless opts.AllowInsecure, and opts.Endpoint only if it cannot take the
// credentials to another server (see checkEndpoint).
func RESTConfigFromKubeconfig(data []byte, opts KubeconfigOptions) (*rest.Config, error) {
	full, err := clientcmd.Load(data)
	if err != nil {
		return nil, refuse(CredentialsUnusable, "the kubeconfig does not parse as a kubeconfig file")
	}
	cfg, err := currentContextOnly(full)
	if err != nil {
		return nil, err
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if err := checkSelfContained(ctx.Cluster, cluster, ctx.AuthInfo, user); err != nil {
		return nil, err
	}
	server, err := parseServer(cluster.Server)
	if err != nil {
		return nil, refuse(CredentialsUnusable,
			"the server of the kubeconfig's cluster %q %v: set it to the Harvester API URL, https://<host>:6443", ctx.Cluster, err)
	}
	if cluster.ProxyURL != "" {
		// Checked here because clientcmd's own error would echo the URL, and with it any password.
		if u, err := url.Parse(cluster.ProxyURL); err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5") {
			return nil, refuse(CredentialsUnusable,
				"the proxy-url of the kubeconfig's cluster %q is not an http://, https:// or socks5:// URL: correct or remove it", ctx.Cluster)
		}
	}
	target := server
	if opts.Endpoint != "" {
		endpoint, err := parseServer(opts.Endpoint)
		if err != nil {
			return nil, refuse(EndpointInvalid,
				"the ProviderConfig's spec.harvester.endpoint %v: set it to the Harvester API URL, https://<host>:6443, or remove it", err)
		}
		if err := checkEndpoint(endpoint, server, ctx.Cluster, cluster); err != nil {
			return nil, err
		}
		target = endpoint
	}
	if !opts.AllowInsecure {
		if err := checkSecure(ctx.Cluster, cluster, target, opts.Endpoint != ""); err != nil {
			return nil, err
		}
	}

	overrides := &clientcmd.ConfigOverrides{}
	// An overridden server also drops the kubeconfig's tls-server-name (clientcmd does so, as
	// kubectl --server does): the endpoint must present a certificate for its own name.
	overrides.ClusterInfo.Server = opts.Endpoint
	rc, err := clientcmd.NewNonInteractiveClientConfig(*cfg, cfg.CurrentContext, overrides, nil).ClientConfig()
	if err != nil {
		return nil, refuse(CredentialsUnusable, "the kubeconfig is incomplete: %s", redactedConfigError(err))
	}
	return rc, nil
}

// currentContextOnly returns a kubeconfig holding only the current context, its cluster and its
// user, so that nothing else in the file can take part in building the client.
func currentContextOnly(full *clientcmdapi.Config) (*clientcmdapi.Config, error) {
	name := full.CurrentContext
	if name == "" {
		return nil, refuse(CredentialsUnusable,
			"the kubeconfig has no current-context: set current-context to the context of the Harvester cluster")
	}
	ctx, ok := full.Contexts[name]
	if !ok || ctx == nil {
		return nil, refuse(CredentialsUnusable,
			"the kubeconfig's current-context %q names no context in the file: add it under contexts, or correct current-context", name)
	}
	cluster, ok := full.Clusters[ctx.Cluster]
	if !ok || cluster == nil {
		return nil, refuse(CredentialsUnusable,
			"the kubeconfig's current context %q names cluster %q, which is not in the file: add it under clusters, or correct the context", name, ctx.Cluster)
	}
	user, ok := full.AuthInfos[ctx.AuthInfo]
	if !ok || user == nil {
		return nil, refuse(CredentialsUnusable,
			"the kubeconfig's current context %q names user %q, which is not in the file: add it under users, or correct the context", name, ctx.AuthInfo)
	}
	only := clientcmdapi.NewConfig()
	only.Contexts[name] = ctx
	only.Clusters[ctx.Cluster] = cluster
	only.AuthInfos[ctx.AuthInfo] = user
	only.CurrentContext = name
	return only, nil
}

func checkSelfContained(clusterName string, cluster *clientcmdapi.Cluster, userName string, user *clientcmdapi.AuthInfo) error {
	var problems []string
	switch {
	case user.Exec != nil:
		problems = append(problems, fmt.Sprintf("user %q uses an exec plugin", userName))
	case user.AuthProvider != nil:
		problems = append(problems, fmt.Sprintf("user %q uses an auth provider", userName))
	case user.TokenFile != "" || user.ClientCertificate != "" || user.ClientKey != "":
		problems = append(problems, fmt.Sprintf("user %q refers to files (use token, client-certificate-data and client-key-data)", userName))
	}
	if cluster.CertificateAuthority != "" {
		problems = append(problems, fmt.Sprintf("cluster %q refers to a CA file (use certificate-authority-data)", clusterName))
	}
	if len(problems) == 0 {
		return nil
	}
	return refuse(CredentialsUnusable, "the kubeconfig must be self-contained: %v", problems)
}

// parseServer parses a server URL. The scheme must be explicit, so that the checks judge the
// scheme the client will use (client-go guesses one when it is missing). The error describes the
// problem after "the server ..." without echoing the URL, which could carry user information.
func parseServer(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return nil, fmt.Errorf("is empty")
	case err != nil:
		return nil, fmt.Errorf("is not a URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("does not start with https://")
	case u.Hostname() == "":
		return nil, fmt.Errorf("has no host")
	case u.User != nil:
		return nil, fmt.Errorf("carries user information (credentials belong in the kubeconfig's user)")
	}
	return u, nil
}

// checkEndpoint refuses an endpoint that could take the credentials to another server than the
// kubeconfig's. The same host with the same path is the server the Secret names (only the port
// differs); another path is not: behind Rancher the path selects the downstream cluster
// (/k8s/clusters/<id>), so it could take the credentials to another cluster. Another host is
// trusted only if it must prove, over TLS, that it holds a certificate from the CA the kubeconfig
// pins: client-go then trusts that CA alone, not the system roots.
func checkEndpoint(endpoint, server *url.URL, clusterName string, cluster *clientcmdapi.Cluster) error {
	if sameHost(endpoint.Hostname(), server.Hostname()) {
		if strings.TrimSuffix(endpoint.EscapedPath(), "/") != strings.TrimSuffix(server.EscapedPath(), "/") {
			return refuse(EndpointUntrusted,
				"the ProviderConfig's spec.harvester.endpoint has path %q, not %q of the kubeconfig's server %q: on the same host another path can be another cluster (behind Rancher the path selects the downstream cluster), so nothing was sent. "+
					"Give spec.harvester.endpoint the kubeconfig's path (only its port may differ), or put the endpoint into the kubeconfig's server",
				endpoint.EscapedPath(), server.EscapedPath(), server.Host)
		}
		return nil
	}
	var unproven string
	switch {
	case endpoint.Scheme != "https":
		unproven = "the endpoint is plain http, so it proves nothing"
	case len(cluster.CertificateAuthorityData) == 0:
		unproven = fmt.Sprintf("the kubeconfig's cluster %q pins no CA (certificate-authority-data) that the endpoint's certificate would have to chain to", clusterName)
	case cluster.InsecureSkipTLSVerify:
		unproven = fmt.Sprintf("the kubeconfig's cluster %q skips TLS verification (insecure-skip-tls-verify), so its CA proves nothing", clusterName)
	default:
		return nil
	}
	return refuse(EndpointUntrusted,
		"the ProviderConfig's spec.harvester.endpoint names host %q, not %q of the kubeconfig's server, and %s: the credentials could go to any server, so nothing was sent. "+
			"Put the endpoint into the kubeconfig's server, pin the Harvester cluster's CA in the kubeconfig, or remove spec.harvester.endpoint",
		endpoint.Hostname(), server.Hostname(), unproven)
}

// sameHost compares host names as DNS does (case and a trailing dot do not matter) and IP
// addresses by value.
func sameHost(a, b string) bool {
	ipA, errA := netip.ParseAddr(a)
	ipB, errB := netip.ParseAddr(b)
	if errA == nil && errB == nil {
		return ipA.Unmap() == ipB.Unmap()
	}
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// checkSecure refuses a connection that others could read or redirect: TLS verification
// skipped, plain http to target (the endpoint when overridden: the kubeconfig's own server is then
// never contacted), or a proxy-url.
func checkSecure(clusterName string, cluster *clientcmdapi.Cluster, target *url.URL, overridden bool) error {
	var problems []string
	if cluster.InsecureSkipTLSVerify {
		problems = append(problems, fmt.Sprintf("the kubeconfig's cluster %q skips TLS verification (insecure-skip-tls-verify)", clusterName))
	}
	switch {
	case target.Scheme != "http":
	case overridden:
		problems = append(problems, "the ProviderConfig's spec.harvester.endpoint is plain http://")
	default:
		problems = append(problems, fmt.Sprintf("the kubeconfig's cluster %q has a plain http:// server", clusterName))
	}
	if cluster.ProxyURL != "" {
		problems = append(problems, fmt.Sprintf("the kubeconfig's cluster %q goes through a proxy (proxy-url)", clusterName))
	}
	if len(problems) == 0 {
		return nil
	}
	return refuse(ConnectionInsecure,
		"%s, so others could read or redirect the connection: use https with TLS verification and no proxy-url, or annotate the credentials Secret with %s: \"true\" to accept that",
		strings.Join(problems, "; "), AnnotationAllowInsecure)
}

// redactedConfigError keeps clientcmd's explanation, which names fields, never their values.
func redactedConfigError(err error) string {
	if clientcmd.IsEmptyConfig(err) {
		return "it has no current context or cluster"
	}
	return err.Error()
}
