package main

import (
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// The metrics server offers HTTP/2 only when asked to (TestInstalledWithLeastPrivilege checks what
// the running server negotiates).
func TestMetricsOptionsHTTP2(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"http/1.1"}},
		{[]string{"--enable-http2"}, []string{"h2"}},
	} {
		o, err := options.Parse(tt.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		// What controller-runtime's metrics server starts from, before it applies TLSOpts.
		c := &tls.Config{NextProtos: []string{"h2"}}
		for _, f := range metricsOptions(o).TLSOpts {
			f(c)
		}
		if !slices.Equal(c.NextProtos, tt.want) {
			t.Errorf("args %q: the metrics server offers %q, want %q", tt.args, c.NextProtos, tt.want)
		}
	}
}

// --kubeconfig is read by the manager itself: controller-runtime's flag of that name is on the
// standard flag set, which the manager does not parse.
func TestManagementConfigFromKubeconfigFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "management.kubeconfig")
	kubeconfig := "apiVersion: v1\nkind: Config\ncurrent-context: mgmt\n" +
		"clusters: [{name: mgmt, cluster: {server: \"https://mgmt.example:6443\"}}]\n" +
		"users: [{name: admin, user: {token: not-a-secret}}]\n" +
		"contexts: [{name: mgmt, context: {cluster: mgmt, user: admin}}]\n"
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := managementConfig(path)
	if err != nil || c.Host != "https://mgmt.example:6443" {
		t.Fatalf("--kubeconfig %s: host %q, %v", path, c.Host, err)
	}
	if !c.DisableCompression {
		t.Errorf("the management cluster is asked for compressed answers")
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := managementConfig(missing); err == nil || !strings.Contains(err.Error(), "--kubeconfig "+missing) {
		t.Errorf("a missing --kubeconfig file: %v, want an error naming the flag", err)
	}
}

// --metrics-cert-name and --metrics-cert-key (and --metrics-cert-path, the published provider's
// name of --metrics-cert-dir) reach the metrics server.
func TestMetricsOptionsCertificate(t *testing.T) {
	o, err := options.Parse([]string{"--metrics-cert-path=/certs", "--metrics-cert-name=metrics.crt", "--metrics-cert-key=metrics.key"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if m := metricsOptions(o); m.CertDir != "/certs" || m.CertName != "metrics.crt" || m.KeyName != "metrics.key" {
		t.Errorf("metrics server certificate %q %q %q, want /certs metrics.crt metrics.key", m.CertDir, m.CertName, m.KeyName)
	}
}

// The Harvester client of a cluster with running machines must not be stopped between two of
// their checks: its informers' watches are what wake a machine when its VM changes or goes. A
// janitor that stopped it after 15 idle minutes left machines checked every 30 unwatched for the
// rest of the gap.
func TestHarvesterClientsOutliveTheGapBetweenHealthChecks(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--watched-health-check-interval=2h"},
		{"--health-check-interval=45m", "--watched-health-check-interval=40m"},
	} {
		o, err := options.Parse(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		idle := harvesterCache(t.Context(), o, nil).IdleTimeout
		if longest := max(o.HealthInterval, o.WatchedHealth); idle <= longest {
			t.Errorf("%v: Harvester clients stop after %s idle, within the %s between two checks of a running machine", args, idle, longest)
		}
	}
}
