package clustercache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

const (
	secretToken = "s3cr3t-t0ken-value"
	// secretPassword hides in URLs, where only hosts may be quoted in messages.
	secretPassword = "pr0xy-passw0rd"
	// pinnedCA is certificate-authority-data: the checks only look at whether it is there.
	pinnedCA  = "    certificate-authority-data: ZmFrZQ==\n"
	tokenUser = "    token: " + secretToken + "\n"
)

// kubeconfigWith is a kubeconfig whose current context "h" uses cluster "h" (server, then the
// extra cluster fields) and user "u" (the user fields), each YAML indented by four spaces.
func kubeconfigWith(server, cluster, user string) []byte {
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: h
  cluster:
    server: ` + server + "\n" + cluster + `contexts:
- name: h
  context: {cluster: h, user: u}
current-context: h
users:
- name: u
  user:
` + user)
}

// kubeconfig is a kubeconfig for https://harvester.example:6443 that pins a CA, with the user fields.
func kubeconfig(user string) []byte {
	return kubeconfigWith("https://harvester.example:6443", pinnedCA, user)
}

// Every rule of RESTConfigFromKubeconfig: what is accepted builds a client for exactly the
// intended server; what is refused says why with the reason that names the fix, and never
// quotes a credential.
func TestRESTConfigFromKubeconfig(t *testing.T) {
	const server = "https://harvester.example:6443"
	optIn := KubeconfigOptions{AllowInsecure: true}
	withEndpoint := func(endpoint string, allowInsecure bool) KubeconfigOptions {
		return KubeconfigOptions{Endpoint: endpoint, AllowInsecure: allowInsecure}
	}
	systemRoots := func(extra string) []byte { return kubeconfigWith(server, extra, tokenUser) }
	otherContext := func(current string) []byte {
		return []byte(`apiVersion: v1
kind: Config
clusters:
- {name: h, cluster: {server: "` + server + `"}}
- {name: laptop, cluster: {server: "https://laptop.example", certificate-authority: /etc/ca.crt}}
contexts:
- {name: h, context: {cluster: h, user: u}}
- {name: laptop, context: {cluster: laptop, user: me}}
- {name: no-cluster, context: {cluster: gone, user: u}}
- {name: no-user, context: {cluster: h, user: gone}}
current-context: "` + current + `"
users:
- {name: u, user: {token: ` + secretToken + `}}
- {name: me, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}}}
`)
	}

	for name, tc := range map[string]struct {
		kubeconfig []byte
		opts       KubeconfigOptions
		// wantHost is the server the client talks to; empty when the kubeconfig is refused with
		// wantReason and a message mentioning each of wantMentions.
		wantHost     string
		wantReason   Problem
		wantMentions []string
		check        func(*rest.Config) error
	}{
		"token": {kubeconfig: kubeconfig(tokenUser), wantHost: server},
		"exec plugin": {kubeconfig: kubeconfig("    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n"),
			wantReason: CredentialsUnusable, wantMentions: []string{"exec plugin"}},
		"auth provider": {kubeconfig: kubeconfig("    auth-provider:\n      name: oidc\n"),
			wantReason: CredentialsUnusable, wantMentions: []string{"auth provider"}},
		"token file": {kubeconfig: kubeconfig("    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n"),
			wantReason: CredentialsUnusable, wantMentions: []string{"refers to files"}},
		"CA file": {kubeconfig: systemRoots("    certificate-authority: /etc/ssl/ca.crt\n"),
			wantReason: CredentialsUnusable, wantMentions: []string{"CA file"}},
		"server without scheme": {kubeconfig: kubeconfigWith("harvester.example:6443", "", tokenUser),
			wantReason: CredentialsUnusable, wantMentions: []string{`cluster "h"`, "https://"}},

		// Only the current context counts, and it must be complete.
		"another context's exec plugin and CA file are ignored": {kubeconfig: otherContext("h"), wantHost: server,
			check: func(rc *rest.Config) error {
				if rc.ExecProvider != nil || rc.CAFile != "" {
					return fmt.Errorf("the other context leaked in: %+v", rc)
				}
				return nil
			}},
		"the other context, when current, is refused": {kubeconfig: otherContext("laptop"),
			wantReason: CredentialsUnusable, wantMentions: []string{`user "me"`, "exec plugin", `cluster "laptop"`, "CA file"}},
		"no current context": {kubeconfig: otherContext(""),
			wantReason: CredentialsUnusable, wantMentions: []string{"no current-context"}},
		"current context missing": {kubeconfig: otherContext("gone"),
			wantReason: CredentialsUnusable, wantMentions: []string{`current-context "gone"`, "names no context"}},
		"current context's cluster missing": {kubeconfig: otherContext("no-cluster"),
			wantReason: CredentialsUnusable, wantMentions: []string{`context "no-cluster"`, `cluster "gone"`}},
		"current context's user missing": {kubeconfig: otherContext("no-user"),
			wantReason: CredentialsUnusable, wantMentions: []string{`context "no-user"`, `user "gone"`}},

		// spec.harvester.endpoint
		"endpoint on the same host, another port": {kubeconfig: systemRoots(""), opts: withEndpoint("https://harvester.example:8443", false),
			wantHost: "https://harvester.example:8443"},
		"endpoint on the same host, spelt otherwise": {kubeconfig: systemRoots(""), opts: withEndpoint("https://HARVESTER.example.:443/", false),
			wantHost: "https://HARVESTER.example.:443/"},
		// tls-server-name belongs to the kubeconfig's server: the endpoint must prove its own name.
		"endpoint on another host, CA pinned": {kubeconfig: kubeconfigWith(server, pinnedCA+"    tls-server-name: harvester.example\n", tokenUser),
			opts: withEndpoint("https://10.0.0.1:6443", false), wantHost: "https://10.0.0.1:6443",
			check: func(rc *rest.Config) error {
				if string(rc.CAData) != "fake" || rc.Insecure || rc.ServerName != "" {
					return fmt.Errorf("CA %q, insecure %v, server name %q: want the pinned CA, verified, for the endpoint's own name", rc.CAData, rc.Insecure, rc.ServerName)
				}
				return nil
			}},
		"endpoint on another host, no CA": {kubeconfig: systemRoots(""), opts: withEndpoint("https://evil.example:6443", true),
			wantReason:   EndpointUntrusted,
			wantMentions: []string{"spec.harvester.endpoint", `"evil.example"`, `"harvester.example"`, "pins no CA", "nothing was sent", "remove spec.harvester.endpoint"}},
		"endpoint on another host, CA pinned but not verified": {kubeconfig: kubeconfigWith(server, pinnedCA+"    insecure-skip-tls-verify: true\n", tokenUser),
			opts: withEndpoint("https://evil.example:6443", true), wantReason: EndpointUntrusted,
			wantMentions: []string{"spec.harvester.endpoint", "insecure-skip-tls-verify"}},
		"endpoint on another host over http, CA pinned": {kubeconfig: kubeconfig(tokenUser), opts: withEndpoint("http://evil.example:6443", true),
			wantReason: EndpointUntrusted, wantMentions: []string{"spec.harvester.endpoint", "plain http"}},
		"endpoint on the same host, another path (another cluster behind Rancher)": {kubeconfig: kubeconfigWith("https://rancher.example/k8s/clusters/c-harvester", pinnedCA, tokenUser),
			opts: withEndpoint("https://rancher.example/k8s/clusters/c-other", true), wantReason: EndpointUntrusted,
			wantMentions: []string{"spec.harvester.endpoint", `"/k8s/clusters/c-other"`, `"/k8s/clusters/c-harvester"`, "only its port may differ"}},
		"endpoint on the same host and path, another port": {kubeconfig: kubeconfigWith("https://rancher.example/k8s/clusters/c-harvester", pinnedCA, tokenUser),
			opts: withEndpoint("https://rancher.example:8443/k8s/clusters/c-harvester/", false), wantHost: "https://rancher.example:8443/k8s/clusters/c-harvester/"},
		"endpoint over http on the same host": {kubeconfig: kubeconfig(tokenUser), opts: withEndpoint("http://harvester.example:8080", false),
			wantReason: ConnectionInsecure, wantMentions: []string{"spec.harvester.endpoint is plain http://", AnnotationAllowInsecure}},
		"endpoint over http on the same host, opted in": {kubeconfig: kubeconfig(tokenUser), opts: withEndpoint("http://harvester.example:8080", true),
			wantHost: "http://harvester.example:8080"},
		"endpoint not a URL": {kubeconfig: kubeconfig(tokenUser), opts: withEndpoint("ftp://harvester.example", true),
			wantReason: EndpointInvalid, wantMentions: []string{"spec.harvester.endpoint", "https://"}},
		"endpoint with a password": {kubeconfig: kubeconfig(tokenUser), opts: withEndpoint("https://admin:"+secretPassword+"@harvester.example", false),
			wantReason: EndpointInvalid, wantMentions: []string{"spec.harvester.endpoint", "user information"}},

		// Insecure kubeconfigs, and the opt-in.
		"http server": {kubeconfig: kubeconfigWith("http://harvester.example:8080", "", tokenUser),
			wantReason: ConnectionInsecure, wantMentions: []string{`cluster "h"`, "plain http:// server", AnnotationAllowInsecure}},
		"http server, opted in": {kubeconfig: kubeconfigWith("http://harvester.example:8080", "", tokenUser), opts: optIn,
			wantHost: "http://harvester.example:8080"},
		"http server, https endpoint on the same host": {kubeconfig: kubeconfigWith("http://harvester.example:8080", "", tokenUser),
			opts: withEndpoint("https://harvester.example:6443", false), wantHost: "https://harvester.example:6443"},
		"proxy-url": {kubeconfig: kubeconfigWith(server, pinnedCA+"    proxy-url: http://proxy.example:3128\n", tokenUser),
			wantReason: ConnectionInsecure, wantMentions: []string{"proxy-url", AnnotationAllowInsecure}},
		"proxy-url, opted in": {kubeconfig: kubeconfigWith(server, pinnedCA+"    proxy-url: http://proxy.example:3128\n", tokenUser), opts: optIn,
			wantHost: server, check: func(rc *rest.Config) error {
				if rc.Proxy == nil {
					return fmt.Errorf("the proxy-url was dropped")
				}
				return nil
			}},
		"proxy-url with a password, malformed, opted in": {kubeconfig: kubeconfigWith(server, pinnedCA+"    proxy-url: ftp://u:"+secretPassword+"@proxy.example\n", tokenUser),
			opts: optIn, wantReason: CredentialsUnusable, wantMentions: []string{"proxy-url", `cluster "h"`}},
		"insecure-skip-tls-verify": {kubeconfig: systemRoots("    insecure-skip-tls-verify: true\n"),
			wantReason: ConnectionInsecure, wantMentions: []string{"insecure-skip-tls-verify", AnnotationAllowInsecure}},
		"insecure-skip-tls-verify, opted in": {kubeconfig: systemRoots("    insecure-skip-tls-verify: true\n"), opts: optIn,
			wantHost: server, check: func(rc *rest.Config) error {
				if !rc.Insecure {
					return fmt.Errorf("not insecure")
				}
				return nil
			}},
		"insecure-skip-tls-verify, same-host endpoint, opted in": {kubeconfig: systemRoots("    insecure-skip-tls-verify: true\n"),
			opts: withEndpoint("https://harvester.example:8443", true), wantHost: "https://harvester.example:8443"},
	} {
		t.Run(name, func(t *testing.T) {
			rc, err := RESTConfigFromKubeconfig(tc.kubeconfig, tc.opts)
			if tc.wantHost != "" {
				if err != nil {
					t.Fatal(err)
				}
				// clientcmd leaves the credentials out of a client for plain http.
				wantToken := strings.HasPrefix(tc.wantHost, "https://")
				if rc.Host != tc.wantHost || (rc.BearerToken == secretToken) != wantToken {
					t.Fatalf("host %q, token set %v; want host %q, token set %v", rc.Host, rc.BearerToken == secretToken, tc.wantHost, wantToken)
				}
				if tc.check != nil {
					if err := tc.check(rc); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			refused, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("err = %v (%T), want an *Error", err, err)
			}
			if refused.Problem != tc.wantReason {
				t.Errorf("problem %s, want %s: %s", refused.Problem, tc.wantReason, refused.Message)
			}
			for _, m := range tc.wantMentions {
				if !strings.Contains(refused.Message, m) {
					t.Errorf("message %q does not mention %q", refused.Message, m)
				}
			}
			for _, secret := range []string{secretToken, secretPassword} {
				if strings.Contains(refused.Message, secret) {
					t.Errorf("message %q quotes a credential", refused.Message)
				}
			}
		})
	}
	t.Run("garbage never echoed", func(t *testing.T) {
		_, err := RESTConfigFromKubeconfig([]byte("token: "+secretToken+"\n\t{{{"), KubeconfigOptions{})
		if err == nil || strings.Contains(err.Error(), secretToken) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestSameHost(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"harvester.example", "harvester.example", true},
		{"Harvester.Example.", "harvester.example", true},
		{"10.0.0.1", "10.0.0.1", true},
		{"::ffff:10.0.0.1", "10.0.0.1", true},
		{"2001:db8::1", "2001:db8:0:0::1", true},
		{"harvester.example", "harvester.example.evil", false},
		{"10.0.0.1", "10.0.0.2", false},
		{"localhost", "127.0.0.1", false}, // names are not resolved: that would trust DNS
	} {
		if got := sameHost(tc.a, tc.b); got != tc.want {
			t.Errorf("sameHost(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

// The cache refuses before it builds a client, with the kubeconfig's own reason: the
// ProviderConfig's CredentialsValid and the waiting MachineRequests show it.
func TestGetRefusesWithTheKubeconfigsReason(t *testing.T) {
	creds := Credentials{Namespace: "default", SecretNamespace: "mgmt", SecretName: "harvester", Key: "kubeconfig"}
	for _, tc := range []struct {
		endpoint      string
		allowInsecure bool // the credentials Secret's annotation
		want          Problem
	}{
		{"", false, ConnectionInsecure},
		{"https://evil.example", true, EndpointUntrusted},
		{"ftp://harvester.example", true, EndpointInvalid},
	} {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "mgmt", Name: "harvester"},
			Data:       map[string][]byte{"kubeconfig": kubeconfigWith("https://harvester.example:6443", "    insecure-skip-tls-verify: true\n", tokenUser)},
		}
		if tc.allowInsecure {
			secret.Annotations = map[string]string{AnnotationAllowInsecure: "true"}
		}
		f := &Cache{SecretReader: fake.NewClientBuilder().WithObjects(secret).Build()}
		creds.Endpoint = tc.endpoint
		_, err := f.Get(context.Background(), creds)
		f.Stop()
		w, ok := AsError(err)
		if !ok || w.Problem != tc.want {
			t.Errorf("endpoint %q, Secret opted in %v: err = %v, want an error with problem %s", tc.endpoint, tc.allowInsecure, err, tc.want)
			continue
		}
		if !strings.Contains(w.Message, "credentials Secret mgmt/harvester") || strings.Contains(w.Message, secretToken) {
			t.Errorf("message %q should name the Secret and never the token", w.Message)
		}
	}
}

// The opt-in the API documents is the one the cache reads.
func TestAllowInsecureAnnotationIsTheAPIs(t *testing.T) {
	if AnnotationAllowInsecure != v1alpha1.AnnotationAllowInsecureCredentials {
		t.Fatalf("clustercache reads %q, the API documents %q", AnnotationAllowInsecure, v1alpha1.AnnotationAllowInsecureCredentials)
	}
}
