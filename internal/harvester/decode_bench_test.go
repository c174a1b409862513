package harvester

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
)

// vmFieldsRead is a VirtualMachine with only the fields the engine reads (observe, diagnose,
// delete, the vmsByClaim index): what a watch of VMs could decode at the least and still serve
// the engine. It exists for BenchmarkDecodeVMWatchEvent alone.
type vmFieldsRead struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		RunStrategy *kubevirtv1.VirtualMachineRunStrategy `json:"runStrategy,omitempty"`
		Template    *struct {
			Spec struct {
				Volumes                       []kubevirtv1.Volume  `json:"volumes,omitempty"`
				NodeSelector                  map[string]string    `json:"nodeSelector,omitempty"`
				Affinity                      *corev1.Affinity     `json:"affinity,omitempty"`
				TerminationGracePeriodSeconds *int64               `json:"terminationGracePeriodSeconds,omitempty"`
				Networks                      []kubevirtv1.Network `json:"networks,omitempty"`
				Domain                        struct {
					Devices struct {
						Interfaces []kubevirtv1.Interface `json:"interfaces,omitempty"`
					} `json:"devices"`
				} `json:"domain"`
			} `json:"spec"`
		} `json:"template,omitempty"`
	} `json:"spec"`
	Status struct {
		PrintableStatus kubevirtv1.VirtualMachinePrintableStatus `json:"printableStatus,omitempty"`
		Conditions      []kubevirtv1.VirtualMachineCondition     `json:"conditions,omitempty"`
	} `json:"status"`
}

// BenchmarkDecodeVMWatchEvent measures what one VM watch event costs the manager to decode, as
// client-go's watch decoder does (sigs.k8s.io/json): whole, as the owned cache holds VMs; into
// only the fields the engine reads; and as its metadata. It bounds what watching VMs by their
// metadata alone could save: the VM watch is about a fifth of the manager's CPU
// (docs/proposals/20261127-vm-watch-kept-whole.md).
func BenchmarkDecodeVMWatchEvent(b *testing.B) {
	vm := BuildVirtualMachine(testSpec())
	vm.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
	vm.Status.Conditions = []kubevirtv1.VirtualMachineCondition{
		{Type: kubevirtv1.VirtualMachineReady, Status: corev1.ConditionTrue},
		{Type: "LiveMigratable", Status: corev1.ConditionFalse, Reason: "DisksNotLiveMigratable", Message: "cannot migrate VMI: PVC disk-0 is not shared"},
	}
	data, err := json.Marshal(vm)
	if err != nil {
		b.Fatal(err)
	}
	for name, into := range map[string]func() any{
		"whole":       func() any { return &kubevirtv1.VirtualMachine{} },
		"fields read": func() any { return &vmFieldsRead{} },
		"metadata":    func() any { return &metav1.PartialObjectMetadata{} },
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, into()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
