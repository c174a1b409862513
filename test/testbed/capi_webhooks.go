package testbed

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// webhookServing is where a manager serves its webhooks: a loopback port and a serving
// certificate signed by a CA of the testbed's, all kept in the manager's work directory so that a
// manager started again there serves them where the API server already sends them.
type webhookServing struct {
	port    int
	certDir string
	caPEM   []byte
}

// hostPort is the address the API server calls the webhooks at.
func (w webhookServing) hostPort() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(w.port))
}

// webhookServingIn returns the webhook serving of the program in workDir, made on first use: a
// free port, a CA and a serving certificate for 127.0.0.1 and localhost (tls.crt, tls.key in
// certDir), in files named after the program.
func webhookServingIn(workDir, program string) (webhookServing, error) {
	w := webhookServing{certDir: filepath.Join(workDir, program+"-webhook-certs")}
	portFile, caFile := filepath.Join(workDir, program+"-webhook-port"), filepath.Join(w.certDir, "ca.crt")
	port, portErr := os.ReadFile(portFile) //nolint:gosec // G304: the testbed's own work directory
	ca, caErr := os.ReadFile(caFile)       //nolint:gosec // G304: the testbed's own work directory
	if portErr == nil && caErr == nil {
		p, err := strconv.Atoi(strings.TrimSpace(string(port)))
		w.port, w.caPEM = p, ca
		return w, err
	}
	if !errors.Is(portErr, os.ErrNotExist) && portErr != nil {
		return w, portErr
	}
	addr, err := FreeLocalAddr()
	if err != nil {
		return w, err
	}
	_, p, _ := net.SplitHostPort(addr)
	if w.port, err = strconv.Atoi(p); err != nil {
		return w, err
	}
	if w.caPEM, err = writeServingCert(w.certDir); err != nil {
		return w, fmt.Errorf("webhook serving certificate: %w", err)
	}
	if err := os.WriteFile(caFile, w.caPEM, 0o600); err != nil { //nolint:gosec // G703: the testbed's own work directory
		return w, err
	}
	return w, os.WriteFile(portFile, []byte(p), 0o600)
}

// writeServingCert makes a CA and a serving certificate it signs for 127.0.0.1 and localhost,
// writes the certificate and its key into dir as tls.crt and tls.key (what the manager's webhook
// server reads), and returns the CA's certificate (PEM), the caBundle the API server trusts.
func writeServingCert(dir string) ([]byte, error) {
	ca, err := newCA("testbed webhook CA")
	if err != nil {
		return nil, err
	}
	serving, err := ca.issueServing()
	if err != nil {
		return nil, err
	}
	return ca.certPEM, serving.write(dir, "tls.crt", "tls.key")
}

// installWebhooks points the API server at a manager's webhooks, as its release does
// (cert-manager injecting the CA): its defaulting and validating webhook configurations, and the
// conversion webhook of the CRDs its release converts, each at https://127.0.0.1:<port> with the
// testbed's CA. It is idempotent, and waits until the API server calls the webhooks.
func installWebhooks(ctx context.Context, cfg *rest.Config, assets string, program managerProgram, w webhookServing) error {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	dir := filepath.Join(assets, program.webhooks)
	if err := applyWebhookConfigurations(ctx, c, filepath.Join(dir, "manifests.yaml"), program, w); err != nil {
		return err
	}
	if err := enableConversion(ctx, c, filepath.Join(dir, "conversion"), w); err != nil {
		return err
	}
	return program.called(ctx, c)
}

// applyWebhookConfigurations creates or updates a program's webhook configurations (mutating and
// validating), each webhook's Service replaced by the manager's URL.
func applyWebhookConfigurations(ctx context.Context, c client.Client, manifests string, program managerProgram, w webhookServing) error {
	data, err := os.ReadFile(manifests) //nolint:gosec // G304: a file of the Cluster API build
	if err != nil {
		return fmt.Errorf("%w (run make capi to add it to the build)", err)
	}
	objs, err := DecodeManifests(data)
	if err != nil {
		return err
	}
	names := map[string]string{
		"MutatingWebhookConfiguration":   program.mutating,
		"ValidatingWebhookConfiguration": program.validating,
	}
	for _, u := range objs {
		name, ok := names[u.GetKind()]
		if !ok {
			return fmt.Errorf("%s: unexpected %s", manifests, u.GetKind())
		}
		u.SetName(name)
		webhooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		for _, hook := range webhooks {
			if hook, ok := hook.(map[string]any); ok {
				hook["clientConfig"] = clientConfigFor(hook["clientConfig"], w)
			}
		}
		if err := unstructured.SetNestedSlice(u.Object, webhooks, "webhooks"); err != nil {
			return err
		}
		if err := createOrReplace(ctx, c, u); err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), name, err)
		}
	}
	return nil
}

// clientConfigFor is a webhook's clientConfig that calls the manager's URL at the path of the
// Service it named, trusting the testbed's CA.
func clientConfigFor(clientConfig any, w webhookServing) map[string]any {
	path, _, _ := unstructured.NestedString(map[string]any{"c": clientConfig}, "c", "service", "path")
	return map[string]any{"url": "https://" + w.hostPort() + path, "caBundle": base64.StdEncoding.EncodeToString(w.caPEM)}
}

// createOrReplace creates obj, or replaces the object of its name with it.
func createOrReplace(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Create(ctx, obj)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, ok := obj.DeepCopyObject().(client.Object)
		if !ok {
			return fmt.Errorf("%T is no client.Object", obj)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), current); err != nil {
			return err
		}
		obj.SetResourceVersion(current.GetResourceVersion())
		return c.Update(ctx, obj)
	})
}

// enableConversion turns the conversion webhook on for every CRD that a program's patches name,
// as its release does: the API server then converts between their versions (v1beta1, v1beta2)
// through the manager.
func enableConversion(ctx context.Context, c client.Client, patches string, w webhookServing) error {
	files, err := filepath.Glob(filepath.Join(patches, "webhook_in_*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no conversion patches in %s (run make capi to add them to the build)", patches)
	}
	for _, file := range files {
		data, err := os.ReadFile(file) //nolint:gosec // G304: a file of the Cluster API build
		if err != nil {
			return err
		}
		patch := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &patch.Object); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: patch.GetName()}, crd); err != nil {
				return err
			}
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ConversionReviewVersions: []string{"v1"},
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://" + w.hostPort() + "/convert"), CABundle: w.caPEM},
				},
			}
			return c.Update(ctx, crd)
		})
		if apierrors.IsNotFound(err) {
			continue // a kind this management cluster does not serve
		}
		if err != nil {
			return fmt.Errorf("turn the conversion webhook on for CRD %s: %w", patch.GetName(), err)
		}
	}
	return nil
}

// KubeadmConfigGVK is the kubeadm bootstrap provider's config kind, in its storage version.
var KubeadmConfigGVK = schema.GroupVersionKind{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfig"}

// waitForKubeadmConfigValidation waits until the API server calls the kubeadm bootstrap
// provider's webhooks: a KubeadmConfig of format ignition (which its schema allows), created in a
// dry run, is refused by its validation, which allows that format only under a feature gate the
// testbed leaves off.
func waitForKubeadmConfigValidation(ctx context.Context, c client.Client) error {
	const refusal = "KubeadmBootstrapFormatIgnition"
	return waitUntilCalled(ctx, "the kubeadm bootstrap provider's", func() error {
		kc := ClusterAPIObject(KubeadmConfigGVK, "default", "webhook-probe", map[string]any{"format": "ignition"})
		err := c.Create(ctx, kc, client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), refusal) {
			return nil
		}
		if err == nil {
			err = errors.New("it was accepted")
		}
		return fmt.Errorf("a dry-run KubeadmConfig of format ignition, which the validation refuses naming %s: %w", refusal, err)
	})
}

// waitUntilCalled polls called until it returns nil, for up to 30 seconds: the API server learns
// of new webhook configurations asynchronously.
func waitUntilCalled(ctx context.Context, whose string, called func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := called()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server does not call %s webhooks after 30s (%w)", whose, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitForDefaulting waits until the API server calls core's webhooks (it learns of new
// configurations asynchronously): a MachineDeployment created in a dry run comes back defaulted.
func waitForDefaulting(ctx context.Context, c client.Client) error {
	return waitUntilCalled(ctx, "Cluster API's", func() error {
		md := ClusterAPIObject(MachineDeploymentGVK, "default", "webhook-probe", map[string]any{
			"clusterName": "webhook-probe",
			"template": map[string]any{"spec": map[string]any{
				"clusterName": "webhook-probe",
				"bootstrap":   map[string]any{"dataSecretName": "webhook-probe"}, //nolint:gosec // G101: a Secret's name, no credential
				"infrastructureRef": map[string]any{
					"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ProbeMachineTemplate", "name": "webhook-probe",
				},
			}},
		})
		err := c.Create(ctx, md, client.DryRunAll)
		if err == nil {
			if _, defaulted, _ := unstructured.NestedString(md.Object, "spec", "selector", "matchLabels", "cluster.x-k8s.io/deployment-name"); defaulted {
				return nil
			}
			err = errors.New("it came back without the selector Cluster API's defaulting sets")
		}
		return fmt.Errorf("a dry-run MachineDeployment: %w", err)
	})
}
