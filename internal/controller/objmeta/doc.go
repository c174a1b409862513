// Package objmeta is the front doors' metadata on their own objects (MachineRequests,
// HarvesterMachines, HarvesterClusters, ImageSyncs): their finalizers and annotations, written in
// one JSON patch that tests they are still what was read (PatchFinalizersAndAnnotations,
// RemoveFinalizer), so that another controller's writes to the object do not conflict with it;
// the placement record, where a machine lives on Harvester, stored before anything is created
// and checked in the API server's answer (RecordPlace); and which updates of an object wake its
// reconcile (UpdatesThatMatter), which drops the provider's own writes.
package objmeta
