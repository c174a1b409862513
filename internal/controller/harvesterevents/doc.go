// Package harvesterevents takes the changes the engine sees on Harvester (harvester.Notifier) to
// the work queues of the objects they concern: a machine's to the queue of its owner's kind
// (MachineRequest, HarvesterMachine), so that each front door hears of its own, and an image's to
// the ImageSyncs that wait for it. A change that can make a machine Running or complete a
// deletion goes ahead of the creates queued before it.
package harvesterevents
