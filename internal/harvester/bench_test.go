package harvester

import (
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

func BenchmarkBuildVirtualMachine(b *testing.B) {
	s := testSpec()
	s.ExtraDisks = []DiskSpec{{SizeGB: 100}}
	for b.Loop() {
		_ = BuildVirtualMachine(s)
	}
}

func BenchmarkBuildObjectsOfOneMachine(b *testing.B) {
	s := testSpec()
	image := ImageInfo{Ref: s.Image, StorageClassName: "longhorn-talos"}
	for b.Loop() {
		_ = BuildCloudInitSecret(s, nil)
		_ = BuildRootDiskClaim(s, image)
		_ = BuildVirtualMachine(s)
	}
}

func BenchmarkSelectAddresses(b *testing.B) {
	ifaces := []kubevirtv1.VirtualMachineInstanceNetworkInterface{
		{InterfaceName: "lo", IP: "127.0.0.1", IPs: []string{"127.0.0.1", "::1"}},
		{Name: NICName, InterfaceName: "eth0", MAC: "52:54:00:aa:bb:cc", IP: "fe80::5054:ff:feaa:bbcc",
			IPs: []string{"fe80::5054:ff:feaa:bbcc", "10.40.0.21", "2001:db8::21"}},
	}
	for b.Loop() {
		if SelectAddresses(ifaces, NICName).Primary == "" {
			b.Fatal("no address")
		}
	}
}
