package options

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"regexp"
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
		o.SyncPeriod != 10*time.Hour || len(o.WatchNamespaces) != 0 || o.LogFormat != "json" {
		t.Errorf("unexpected defaults: %+v", o)
	}
}

func TestParseValues(t *testing.T) {
	o, err := Parse([]string{"--watch-namespaces=butler-system, tenant-a", "--sync-period=1h", "--metrics-secure=false",
		"--leader-elect", "--leader-election-namespace=butler-system", "--max-concurrent-reconciles=4", "--log-format=text"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.WatchNamespaces, ",") != "butler-system,tenant-a" || o.SyncPeriod != time.Hour || o.MetricsSecure ||
		!o.LeaderElect || o.LeaderElectionNamespace != "butler-system" || o.Concurrency != 4 || o.LogFormat != "text" {
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
		"bad log level":       {[]string{"--log-level=loud"}, `--log-level "loud"`},
		"bad log format":      {[]string{"--log-format=xml"}, `--log-format "xml"`},
		"bad namespace":       {[]string{"--watch-namespaces=Tenant_A"}, `"Tenant_A" is not a namespace name`},
		"unknown flag":        {[]string{"--metrics-addr=:9090"}, "flag provided but not defined: -metrics-addr"},
		"positional argument": {[]string{"run"}, `unexpected arguments ["run"]`},
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
