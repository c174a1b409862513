// Package harvester is the engine: the one place that knows Harvester. It turns a MachineSpec into
// the objects Harvester and KubeVirt run a virtual machine from (a cloud-init Secret,
// PersistentVolumeClaims and a VirtualMachine), reads the machine's addresses back from its
// VirtualMachineInstance, judges a start that goes wrong (Assess), reaches a machine where it was
// created (Locate), puts images on Harvester, runs a ProviderConfig's preflight checks, and removes
// everything it created. It speaks its own words (Reason*, Check*): each front door maps them to
// its API's reasons and adds its own advice; it never reads a front door's objects.
//
// A front door sees the Connector (one Cluster per Harvester cluster, over the clients of package
// clustercache) and the Cluster interface; object builders are pure functions so that the shapes
// Harvester accepts are pinned by table tests.
//
// Ownership: every object created here carries LabelMachineRequestUID, the owner's UID whatever
// its kind (plus namespace, name, kind and role labels). An object without our UID label is never changed or deleted; a same-named foreign
// object is reported as a NameConflict. Disks are created as PVCs by this package rather than
// declared through Harvester's harvesterhci.io/volumeClaimTemplates annotation, so that each PVC
// carries our ownership labels from its first moment and an interrupted create resumes on the very
// same objects instead of racing Harvester's controller; an admission webhook's refusal of a disk
// reaches the MachineRequest's status instead of Harvester's controller logs.
//
// Order of creation: disks, then the cloud-init Secret owned by the root disk, then the VM, whose
// harvesterhci.io/removedPersistentVolumeClaims annotation names the disks that are ours. Harvester
// deletes those disks with the VM, and the garbage collector the Secret with its disk: deleting a
// machine is one request when nothing goes wrong.
package harvester
