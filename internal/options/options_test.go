package options

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseDefaults(t *testing.T) {
	o, err := Parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.MetricsAddr != ":8443" || !o.MetricsSecure || o.ProbeAddr != ":8081" || o.Concurrency != 16 ||
		o.SyncPeriod != 10*time.Hour || len(o.WatchNamespaces) != 0 || o.LogFormat != "json" || o.EnableHTTP2 ||
		o.GracefulShutdownTimeout != 20*time.Second || o.MetricsCertName != "tls.crt" || o.MetricsCertKey != "tls.key" ||
		o.Kubeconfig != "" || o.FlagNotes != nil {
		t.Errorf("unexpected defaults: %+v", o)
	}
}

func TestParseValues(t *testing.T) {
	o, err := Parse([]string{"--watch-namespaces=butler-system, tenant-a", "--sync-period=1h", "--metrics-secure=false",
		"--leader-elect", "--leader-election-namespace=butler-system", "--max-concurrent-reconciles=4", "--log-format=text",
		"--enable-http2", "--graceful-shutdown-timeout=5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.WatchNamespaces, ",") != "butler-system,tenant-a" || o.SyncPeriod != time.Hour || o.MetricsSecure ||
		!o.LeaderElect || o.LeaderElectionNamespace != "butler-system" || o.Concurrency != 4 || o.LogFormat != "text" ||
		!o.EnableHTTP2 || o.GracefulShutdownTimeout != 5*time.Second {
		t.Errorf("flags not applied: %+v", o)
	}
}

func TestParseRejectsBadValuesNamingTheFlag(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"zero concurrency":    {[]string{"--max-concurrent-reconciles=0"}, "--max-concurrent-reconciles must be at least 1"},
		"negative qps":        {[]string{"--harvester-qps=-1"}, "--harvester-qps must be positive"},
		"zero sync period":    {[]string{"--sync-period=0"}, "--sync-period must be a positive duration"},
		"unbounded shutdown":  {[]string{"--graceful-shutdown-timeout=-1s"}, "--graceful-shutdown-timeout must be zero or a positive duration"},
		"bad log level":       {[]string{"--log-level=loud"}, `--log-level "loud"`},
		"bad log format":      {[]string{"--log-format=xml"}, `--log-format "xml"`},
		"bad namespace":       {[]string{"--watch-namespaces=Tenant_A"}, `"Tenant_A" is not a namespace name`},
		"unknown flag":        {[]string{"--metrics-addr=:9090"}, "flag provided but not defined: -metrics-addr"},
		"positional argument": {[]string{"run"}, `unexpected arguments ["run"]`},
		"cert names without a directory": {[]string{"--metrics-cert-name=metrics.crt"},
			"--metrics-cert-name and --metrics-cert-key name files in --metrics-cert-dir (or --metrics-cert-path), which is not set"},
		"empty cert key name":              {[]string{"--metrics-cert-dir=/certs", "--metrics-cert-key="}, "--metrics-cert-key must be set"},
		"published: unknown zap level":     {[]string{"--zap-log-level=loud"}, `--zap-log-level "loud": use debug, info, error, panic or a verbosity above 0`},
		"published: zero verbosity":        {[]string{"--zap-log-level=0"}, `--zap-log-level "0"`},
		"published: unknown zap encoder":   {[]string{"--zap-encoder=xml"}, `--zap-encoder "xml": use json or console`},
		"published: contradicting levels":  {[]string{"--log-level=error", "--zap-log-level=debug"}, "--zap-log-level=debug (--log-level=debug) contradicts --log-level=error: give one of them"},
		"published: contradicting formats": {[]string{"--zap-encoder=console", "--log-format=json"}, "--zap-encoder=console (--log-format=text) contradicts --log-format=json"},
		"published: contradicting dirs":    {[]string{"--metrics-cert-path=/a", "--metrics-cert-dir=/b"}, "--metrics-cert-path=/a (--metrics-cert-dir=/a) contradicts --metrics-cert-dir=/b"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if _, err := Parse([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help returned %v", err)
	}
	fs, _ := NewFlagSet(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		if !regexp.MustCompile(`(?m)^\s+-`+f.Name+`\b`).MatchString(out.String()) || len(f.Usage) < 20 {
			t.Errorf("--help does not document --%s", f.Name)
		}
	})
}

// The flags of the published provider's manager are accepted: mapped onto this manager's where one
// fits, ignored otherwise, and each given one noted once for the start-up log.
func TestPublishedFlags(t *testing.T) {
	tests := map[string]struct {
		args  []string
		check func(*Options) bool
		notes []string
	}{
		"the Butler CLI's args": {
			args:  []string{"--leader-elect=false", "--health-probe-bind-address=:8082", "--metrics-bind-address=:8083"},
			check: func(o *Options) bool { return !o.LeaderElect && o.ProbeAddr == ":8082" && o.MetricsAddr == ":8083" },
		},
		"zap level and encoder": {
			args:  []string{"--zap-log-level=debug", "--zap-encoder=console"},
			check: func(o *Options) bool { return o.LogLevel == "debug" && o.LogFormat == "text" },
			notes: []string{"--zap-log-level=debug (a flag of the published provider) is mapped onto --log-level=debug",
				"--zap-encoder=console (a flag of the published provider) is mapped onto --log-format=text"},
		},
		"zap verbosity": {
			args:  []string{"--zap-log-level=2", "--zap-encoder=json"},
			check: func(o *Options) bool { return o.LogLevel == "DEBUG+2" && o.LogFormat == "json" },
			notes: []string{"--zap-log-level=2 (a flag of the published provider) is mapped onto --log-level=DEBUG+2",
				"--zap-encoder=json (a flag of the published provider) is mapped onto --log-format=json"},
		},
		"zap panic is the quietest level": {
			args:  []string{"--zap-log-level=panic"},
			check: func(o *Options) bool { return o.LogLevel == "error" },
			notes: []string{"--zap-log-level=panic (a flag of the published provider) is mapped onto --log-level=error"},
		},
		"the same value given twice": {
			args:  []string{"--zap-log-level=info", "--log-level=info"},
			check: func(o *Options) bool { return o.LogLevel == "info" },
			notes: []string{"--zap-log-level=info (a flag of the published provider) is mapped onto --log-level=info"},
		},
		"metrics certificates": {
			args: []string{"--metrics-cert-path=/certs", "--metrics-cert-name=metrics.crt", "--metrics-cert-key=metrics.key"},
			check: func(o *Options) bool {
				return o.MetricsCertDir == "/certs" && o.MetricsCertName == "metrics.crt" && o.MetricsCertKey == "metrics.key"
			},
			notes: []string{"--metrics-cert-path=/certs (a flag of the published provider) is mapped onto --metrics-cert-dir=/certs"},
		},
		"ignored": {
			args: []string{"--zap-devel", "--zap-stacktrace-level=panic", "--zap-time-encoding=rfc3339",
				"--webhook-cert-path=/tmp/k8s-webhook-server/serving-certs", "--webhook-cert-name=tls.crt", "--webhook-cert-key=tls.key"},
			check: func(o *Options) bool { return o.LogLevel == "info" && o.LogFormat == "json" },
			notes: []string{
				"--zap-devel=true (a flag of the published provider) is ignored: --log-level and --log-format set the logging",
				"--zap-stacktrace-level=panic (a flag of the published provider) is ignored: this manager logs no stack traces",
				"--zap-time-encoding=rfc3339 (a flag of the published provider) is ignored: times are logged in RFC 3339 (log/slog)",
				"--webhook-cert-path=/tmp/k8s-webhook-server/serving-certs (a flag of the published provider) is ignored: this manager serves no webhooks",
				"--webhook-cert-name=tls.crt (a flag of the published provider) is ignored: this manager serves no webhooks",
				"--webhook-cert-key=tls.key (a flag of the published provider) is ignored: this manager serves no webhooks",
			},
		},
		"kubeconfig": {
			args:  []string{"--kubeconfig=/etc/butler/management.kubeconfig"},
			check: func(o *Options) bool { return o.Kubeconfig == "/etc/butler/management.kubeconfig" },
			notes: []string{"--kubeconfig=/etc/butler/management.kubeconfig: the management cluster is the current context of that file, not the in-cluster config or KUBECONFIG"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := Parse(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(o) {
				t.Errorf("args %q gave %+v", tt.args, o)
			}
			if !slices.Equal(o.FlagNotes, tt.notes) {
				t.Errorf("notes:\n got %q\nwant %q", o.FlagNotes, tt.notes)
			}
			if _, err := NewLogger(o.LogLevel, o.LogFormat, io.Discard); err != nil {
				t.Errorf("the mapped logging does not work: %v", err)
			}
		})
	}
}
