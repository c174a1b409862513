package integration

import (
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/harvesterevents"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/setup"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// The manager's controllers, built from its flags by the one setup place, register on the
// management cluster; each controller whose kinds it does not serve says it is off in one log
// line: here the Cluster API front door (no HarvesterCluster CRD), and the ImageSync controller on
// the Butler CLI's schema (no ImageSync CRD).
func TestSetupRegistersWhatTheClusterServes(t *testing.T) {
	imageSyncOff := os.Getenv(schemaEnv) == "butler-cli"
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"defaults":          {nil, []string{"Cluster API controllers are off: the cluster has no HarvesterCluster CRD"}},
		"--cluster-api off": {[]string{"--cluster-api=false"}, []string{"Cluster API controllers are off (--cluster-api=false)"}},
	} {
		t.Run(name, func(t *testing.T) {
			if imageSyncOff {
				tc.want = append(tc.want, "ImageSync controller is off: the cluster has no ImageSync CRD")
			}
			o, err := options.Parse(tc.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var lines []string
			logger := funcr.New(func(_, args string) {
				mu.Lock()
				defer mu.Unlock()
				lines = append(lines, args)
			}, funcr.Options{})
			mgr, err := ctrl.NewManager(mgmtCfg, ctrl.Options{Scheme: mgmt.Scheme(), Logger: logger,
				Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
				Controller: config.Controller{SkipNameValidation: ptr.To(true)}}) // startManager's controllers have the same names
			if err != nil {
				t.Fatal(err)
			}
			events := &harvesterevents.HarvesterEvents{}
			shared := setup.Shared{
				Harvester:       harvester.NewClusters(&clustercache.Cache{SecretReader: mgr.GetAPIReader(), Context: t.Context()}, events),
				HarvesterEvents: events,
				Recorder:        mgr.GetEventRecorder("butler-provider-harvester"),
			}
			if err := setup.Controllers(t.Context(), mgr, o, shared); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			var off []string
			for _, l := range lines {
				if strings.Contains(l, " off") {
					off = append(off, l)
				}
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(off, func(l string) bool { return strings.Contains(l, w) }) {
					t.Errorf("no log line says %q: %q", w, off)
				}
			}
			if len(off) != len(tc.want) {
				t.Errorf("%d controllers said they are off, want %d: %q", len(off), len(tc.want), off)
			}
		})
	}
}
