package integration

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// recorder is a TLS server on 127.0.0.1 that plays a server someone points the credentials at:
// it records the Authorization header of every request it gets.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auth = append(r.auth, req.Header.Get("Authorization"))
		r.mu.Unlock()
		http.NotFound(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

// seen returns the Authorization headers received so far, one per request.
func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auth...)
}

// tokenKubeconfig is a kubeconfig with a bearer token for server, and cluster fields (YAML,
// indented by four spaces) that say how to trust it.
func tokenKubeconfig(server, token, cluster string) []byte {
	return []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: harvester\n  cluster:\n    server: " + server + "\n" + cluster +
		"contexts:\n- name: harvester\n  context: {cluster: harvester, user: robot}\ncurrent-context: harvester\n" +
		"users:\n- name: robot\n  user:\n    token: " + token + "\n")
}

// credentialsPC adds a credentials Secret holding kubeconfig, and a ProviderConfig using it
// changed by mutate.
func (w *world) credentialsPC(name string, kubeconfig []byte, mutate func(*v1alpha1.ProviderConfig)) *v1alpha1.ProviderConfig {
	w.must(mgmt.Create(w.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Data:       map[string][]byte{"kubeconfig": kubeconfig},
	}))
	return w.otherPC(name, func(pc *v1alpha1.ProviderConfig) {
		pc.Spec.CredentialsRef.Name = name
		mutate(pc)
	})
}

// waitMRWaitingFor waits until the MachineRequest waits, Degraded, because of reason (whether
// the factory refused the credentials or the ProviderConfig's check did, the reason is the same),
// or has been Failed for it once the grace period passed.
func (w *world) waitMRWaitingFor(mr *v1alpha1.MachineRequest, reason string) *metav1.Condition {
	w.t.Helper()
	var found *metav1.Condition
	eventually(w.t, timeout, func() error {
		got := w.get(mr)
		found = meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionDegraded)
		switch {
		case got.Status.Phase != v1alpha1.MachinePhasePending && got.Status.FailureReason != reason:
			return fmt.Errorf("MachineRequest %s is %s (%s), want it waiting in Pending or Failed for %s", mr.Name, got.Status.Phase, got.Status.FailureReason, reason)
		case found == nil || found.Status != metav1.ConditionTrue:
			return fmt.Errorf("MachineRequest %s: Degraded = %+v, want True", mr.Name, found)
		case found.Reason == reason:
			return nil
		}
		return fmt.Errorf("MachineRequest %s: Degraded %s: %s; want it waiting for %s", mr.Name, found.Reason, found.Message, reason)
	})
	return found
}

// requireNoTokenInEvents fails if the token appears in any event of the world's namespace.
func (w *world) requireNoTokenInEvents(token string) {
	w.t.Helper()
	list := &eventsv1.EventList{}
	w.must(mgmt.List(w.ctx, list, client.InNamespace(w.ns)))
	for _, e := range list.Items {
		if strings.Contains(e.Note, token) {
			w.t.Fatalf("event %s %s quotes the token: %s", e.Reason, e.Regarding.Name, e.Note)
		}
	}
}

// An endpoint override cannot take the Secret's token to a server of the ProviderConfig author's
// choosing: not when the kubeconfig trusts the system roots (any public certificate would do),
// and not when it skips TLS verification. Nothing is sent, the ProviderConfig says why, and a
// MachineRequest using it waits and creates nothing.
func TestUntrustedEndpointNeverGetsTheCredentials(t *testing.T) {
	thief := newRecorder(t)
	for name, cluster := range map[string]string{
		"system-roots": "",
		"skip-verify":  "    insecure-skip-tls-verify: true\n",
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			token := "harvester-token-" + rand.String(16)
			pc := w.credentialsPC(name, tokenKubeconfig("https://harvester.invalid:6443", token, cluster), func(pc *v1alpha1.ProviderConfig) {
				pc.Spec.Harvester.Endpoint = thief.URL
			})
			if name == "skip-verify" {
				// The opt-in accepts insecure transport, never another server.
				w.optInInsecure(name)
			}
			c := w.waitPCCondition(pc, v1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonUntrustedEndpoint)
			requireMentions(t, "CredentialsValid message", c.Message, "spec.harvester.endpoint", `"127.0.0.1"`, `"harvester.invalid"`, "nothing was sent")

			mr := w.machineRequest("stolen-" + name)
			mr.Spec.ProviderRef.Name = pc.Name
			w.must(mgmt.Create(w.ctx, mr))
			d := w.waitMRWaitingFor(mr, v1alpha1.ReasonUntrustedEndpoint)
			requireMentions(t, "Degraded message", d.Message, "spec.harvester.endpoint")
			// Long enough for several checks of the ProviderConfig (every 500ms here) and
			// reconciles of the MachineRequest; past the grace period it is Failed for that reason.
			consistently(t, 3*time.Second, func() error {
				if got := w.get(mr); got.Status.Phase != v1alpha1.MachinePhasePending &&
					(got.Status.Phase != v1alpha1.MachinePhaseFailed || got.Status.FailureReason != v1alpha1.ReasonUntrustedEndpoint) {
					return fmt.Errorf("MachineRequest %s went %s (%s)", mr.Name, got.Status.Phase, got.Status.FailureReason)
				}
				if vms, pvcs, secrets := w.harvesterObjects(); vms+pvcs+secrets != 0 {
					return fmt.Errorf("%d VMs, %d PVCs, %d Secrets created", vms, pvcs, secrets)
				}
				return nil
			})
			for _, msg := range []string{c.Message, d.Message} {
				if strings.Contains(msg, token) {
					t.Fatalf("a condition quotes the token: %s", msg)
				}
			}
			w.requireNoTokenInEvents(token)
			w.must(mgmt.Delete(w.ctx, mr))
			// Harvester cannot be asked whether anything is left: if the deletion waits for that,
			// the escape hatch releases it.
			patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationSkipHarvesterCleanup + `":"true"}}}`)
			w.must(client.IgnoreNotFound(mgmt.Patch(w.ctx, &v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Name: mr.Name, Namespace: mr.Namespace}},
				client.RawPatch(types.MergePatchType, patch))))
			w.waitGone(&v1alpha1.MachineRequest{ObjectMeta: mr.ObjectMeta}, mgmt)
		})
	}
	if seen := thief.seen(); len(seen) != 0 {
		t.Fatalf("the endpoint got %d requests, the first with Authorization %q", len(seen), seen[0])
	}
}

// optInInsecure sets the insecure-credentials opt-in on the credentials Secret name.
func (w *world) optInInsecure(name string) {
	w.t.Helper()
	secret := &corev1.Secret{}
	w.must(mgmt.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, secret))
	patch := client.MergeFrom(secret.DeepCopy())
	secret.Annotations = map[string]string{v1alpha1.AnnotationAllowInsecureCredentials: "true"}
	w.must(mgmt.Patch(w.ctx, secret, patch))
}

// A kubeconfig that skips TLS verification is refused until its Secret opts in (the opt-in on the
// ProviderConfig, which people who may not write the credentials may edit, is ignored); only then
// does its server see a request, with the token.
func TestInsecureCredentialsNeedTheOptIn(t *testing.T) {
	w := newWorld(t)
	server := newRecorder(t)
	token := "harvester-token-" + rand.String(16)
	pc := w.credentialsPC("insecure", tokenKubeconfig(server.URL, token, "    insecure-skip-tls-verify: true\n"), func(*v1alpha1.ProviderConfig) {})
	c := w.waitPCCondition(pc, v1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonInsecureCredentials)
	requireMentions(t, "CredentialsValid message", c.Message, "insecure-skip-tls-verify", v1alpha1.AnnotationAllowInsecureCredentials)
	consistently(t, 2*time.Second, func() error {
		if seen := server.seen(); len(seen) != 0 {
			return fmt.Errorf("the server got %d requests without the opt-in", len(seen))
		}
		return nil
	})

	got := &v1alpha1.ProviderConfig{}
	w.must(mgmt.Get(w.ctx, client.ObjectKeyFromObject(pc), got))
	patch := client.MergeFrom(got.DeepCopy())
	got.Annotations = map[string]string{v1alpha1.AnnotationAllowInsecureCredentials: "true"}
	got.Spec.Harvester.StorageClassName = "longhorn" // a new generation: checked again, still refused
	w.must(mgmt.Patch(w.ctx, got, patch))
	consistently(t, 2*time.Second, func() error {
		if seen := server.seen(); len(seen) != 0 {
			return fmt.Errorf("the server got %d requests with the opt-in on the ProviderConfig", len(seen))
		}
		return nil
	})
	w.optInInsecure("insecure")
	// A failing ProviderConfig is checked again within NotReadyRetry (500ms here), now with the
	// opt-in; the recorder is no Harvester, so the check fails further on.
	eventually(t, timeout, func() error {
		for _, auth := range server.seen() {
			if auth == "Bearer "+token {
				return nil
			}
		}
		return fmt.Errorf("the server got no request with the token (%d requests)", len(server.seen()))
	})
	w.waitPCCondition(pc, v1alpha1.ConditionCredentialsValid, metav1.ConditionUnknown, v1alpha1.ReasonHarvesterUnreachable)
}

// The simulated Harvester's own kubeconfig pins its CA, so an endpoint naming the same server
// by another name works: the server proves it holds a certificate from that CA for that name
// (envtest's serving certificate is valid for localhost and 127.0.0.1).
func TestCredentialsEndpointSameServerOtherName(t *testing.T) {
	w := newWorld(t)
	raw, err := clientcmd.Load(harvesterConfig)
	w.must(err)
	server, err := url.Parse(raw.Clusters[raw.Contexts[raw.CurrentContext].Cluster].Server)
	w.must(err)
	if server.Hostname() != "127.0.0.1" || len(raw.Clusters[raw.Contexts[raw.CurrentContext].Cluster].CertificateAuthorityData) == 0 {
		t.Fatalf("the simulated Harvester's kubeconfig names %s and pins a CA of %d bytes: want 127.0.0.1 and a CA", server.Host,
			len(raw.Clusters[raw.Contexts[raw.CurrentContext].Cluster].CertificateAuthorityData))
	}
	endpoint := "https://localhost:" + server.Port()
	pc := w.otherPC("by-name", func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.Endpoint = endpoint })
	w.waitPCCondition(pc, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAllChecksPassed)
	mr := w.machineRequest("by-name-0")
	mr.Spec.ProviderRef.Name = pc.Name
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("after deletion")
}
