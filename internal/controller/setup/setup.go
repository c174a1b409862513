// Package setup is the one place the manager's controllers are built and registered: each
// reconciler gets its settings from the manager's options and the objects the controllers share,
// and its controller options (how many reconciles at once); a controller whose kinds the
// management cluster does not serve to the manager stays off, which one log line says.
package setup

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/clusterapi"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/harvesterevents"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/imagesync"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/machinerequest"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/providerconfig"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// Shared are the objects the controllers share, which the manager's command makes.
type Shared struct {
	// Harvester hands out the engine of a ProviderConfig's Harvester cluster.
	Harvester harvester.Connector
	// HarvesterEvents routes the engine's notifications to the queue of their owner's kind.
	HarvesterEvents *harvesterevents.HarvesterEvents
	// Recorder records the controllers' events.
	Recorder events.EventRecorder
}

// Controllers builds every controller from o and shared and registers it with mgr: the
// MachineRequest, ProviderConfig and ImageSync controllers, and the Cluster API front door
// (HarvesterCluster, HarvesterMachine) unless --cluster-api=false. The ImageSync controller and the
// Cluster API front door stay off where the management cluster does not serve their kinds to the
// manager; MachineRequests are served all the same.
func Controllers(ctx context.Context, mgr ctrl.Manager, o *options.Options, shared Shared) error {
	preflight := &providerconfig.Reconciler{
		Client:          mgr.GetClient(),
		SecretReader:    mgr.GetAPIReader(),
		Harvester:       shared.Harvester,
		Recorder:        shared.Recorder,
		RecheckInterval: o.RecheckInterval,
	}
	if err := machineRequests(mgr, o, shared, preflight).SetupWithManager(ctx, mgr, machineOptions(o)); err != nil {
		return fmt.Errorf("set up controller: %w", err)
	}
	if err := preflight.SetupWithManager(ctx, mgr, controller.Options{}); err != nil {
		return fmt.Errorf("set up ProviderConfig controller: %w", err)
	}
	if err := imageSyncs(ctx, mgr, o, shared); err != nil {
		return fmt.Errorf("set up ImageSync controller: %w", err)
	}
	if err := clusterAPI(ctx, mgr, o, shared, preflight); err != nil {
		return fmt.Errorf("set up Cluster API controllers: %w", err)
	}
	return nil
}

// machineOptions are the options of the controllers of machines (MachineRequests and
// HarvesterMachines), which --max-concurrent-reconciles sets. ProviderConfigs, ImageSyncs and
// HarvesterClusters are few: their controllers reconcile one at a time.
func machineOptions(o *options.Options) controller.Options {
	return controller.Options{MaxConcurrentReconciles: o.Concurrency}
}

func machineRequests(mgr ctrl.Manager, o *options.Options, shared Shared, preflight *providerconfig.Reconciler) *machinerequest.Reconciler {
	return &machinerequest.Reconciler{
		Client:               mgr.GetClient(),
		Harvester:            shared.Harvester,
		HarvesterEvents:      shared.HarvesterEvents,
		Recorder:             shared.Recorder,
		Preflight:            preflight,
		CreatingPollInterval: o.CreatingPoll,
		WatchedPollInterval:  o.WatchedPoll,
		HealthCheckInterval:  o.HealthInterval,
		WatchedHealthCheck:   o.WatchedHealth,
		ProvisioningTimeout:  o.ProvisioningTimeout,
		IPReportTimeout:      o.IPReportTimeout,
		ConfigGracePeriod:    o.ConfigGracePeriod,
	}
}

// imageSyncs registers the ImageSync controller where the management cluster serves ImageSyncs
// and ButlerConfigs to the manager.
func imageSyncs(ctx context.Context, mgr ctrl.Manager, o *options.Options, shared Shared) error {
	if why := imagesync.Unavailable(ctx, mgr); why != "" {
		logOff(mgr.GetLogger(), "ImageSync controller is", why, "imagesync")
		return nil
	}
	r := &imagesync.Reconciler{
		Client: mgr.GetClient(), Harvester: shared.Harvester, HarvesterEvents: shared.HarvesterEvents,
		Recorder: shared.Recorder, ConfigGracePeriod: o.ConfigGracePeriod,
	}
	return r.SetupWithManager(ctx, mgr, controller.Options{})
}

// clusterAPI registers the Cluster API front door unless --cluster-api=false, where the
// management cluster serves its kinds and Cluster API's to the manager.
func clusterAPI(ctx context.Context, mgr ctrl.Manager, o *options.Options, shared Shared, preflight *providerconfig.Reconciler) error {
	if !o.ClusterAPI {
		mgr.GetLogger().Info("Cluster API controllers are off (--cluster-api=false)")
		return nil
	}
	if why := clusterapi.Unavailable(ctx, mgr); why != "" {
		logOff(mgr.GetLogger(), "Cluster API controllers are", why, "harvestermachine")
		return nil
	}
	machines := &clusterapi.HarvesterMachineReconciler{
		Client: mgr.GetClient(), LiveReader: mgr.GetAPIReader(), Harvester: shared.Harvester, HarvesterEvents: shared.HarvesterEvents, Recorder: shared.Recorder, Preflight: preflight,
		PollInterval: o.CreatingPoll, WatchedPollInterval: o.WatchedPoll, HealthCheckInterval: o.HealthInterval, WatchedHealthCheck: o.WatchedHealth,
		StartLimits:        harvester.StartLimits{IPReport: o.IPReportTimeout},
		HandOverFrom:       o.HandOverFrom,
		SkipCleanupAnytime: o.SkipCleanupAnytime,
	}
	if err := machines.SetupWithManager(ctx, mgr, machineOptions(o)); err != nil {
		return err
	}
	if why := clusterapi.TemplatesUnavailable(ctx, mgr); why != "" {
		logOff(mgr.GetLogger(), "The HarvesterMachineTemplate controller (capacity for scaling from zero) is", why, "harvestermachinetemplate")
	} else if err := (&clusterapi.HarvesterMachineTemplateReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr, controller.Options{}); err != nil {
		return err
	}
	clusters := &clusterapi.HarvesterClusterReconciler{Client: mgr.GetClient(), Recorder: shared.Recorder, Preflight: preflight, Harvester: shared.Harvester, LiveReader: mgr.GetAPIReader(),
		SkipCleanupAnytime: o.SkipCleanupAnytime}
	return clusters.SetupWithManager(ctx, mgr, controller.Options{})
}

// logOff says, once, that a controller is off and why (what its kinds lack): a restart is needed
// once that is fixed, since the controller is only registered at start-up.
func logOff(logger logr.Logger, what, why, name string) {
	logger.Info(what+" off: "+why+"; MachineRequests are served as usual. Restart the manager once this is fixed", "controller", name)
}
