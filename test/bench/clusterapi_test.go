package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestClusterAPIRunsSpreadTheirMachinesOverOneClusterOnEachHarvester(t *testing.T) {
	for _, tc := range []struct {
		k, n     int
		replicas []int
	}{
		{k: 1, n: 1000, replicas: []int{1000}},
		{k: 2, n: 1000, replicas: []int{500, 500}},
		{k: 5, n: 5000, replicas: []int{1000, 1000, 1000, 1000, 1000}},
		{k: 3, n: 100, replicas: []int{34, 33, 33}}, // machine i in cluster i mod k
		{k: 0, n: 10, replicas: []int{10}},          // no Harvester count given: one
	} {
		clusters := capiClusters(tc.k, tc.n)
		var replicas []int
		names, deployments, hosts := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for i, c := range clusters {
			replicas = append(replicas, c.replicas)
			if c.harvester != i {
				t.Errorf("k=%d: cluster %d on Harvester %d", tc.k, i, c.harvester)
			}
			if c.spec.ProviderConfig.Name != providerConfigName(i) {
				t.Errorf("k=%d: cluster %d on ProviderConfig %q, want Harvester %d's %q", tc.k, i, c.spec.ProviderConfig.Name, i, providerConfigName(i))
			}
			// The machines of every MachineDeployment are found on Harvester by one prefix.
			if !strings.HasPrefix(c.deployment+"-", capiMachineDeployment+"-") || strings.HasPrefix(c.controlPlane, capiMachineDeployment+"-") {
				t.Errorf("k=%d: MachineDeployment %q, control plane %q: the machines' prefix %q must take the first's and not the second's", tc.k, c.deployment, c.controlPlane, capiMachineDeployment+"-")
			}
			names[c.spec.Name], deployments[c.deployment], hosts[c.spec.Endpoint.Host] = true, true, true
		}
		if !slices.Equal(replicas, tc.replicas) {
			t.Errorf("k=%d, n=%d: replicas %v, want %v", tc.k, tc.n, replicas, tc.replicas)
		}
		if want := len(tc.replicas); len(names) != want || len(deployments) != want || len(hosts) != want {
			t.Errorf("k=%d: %d Cluster names, %d MachineDeployments, %d endpoints, want %d of each, all different", tc.k, len(names), len(deployments), len(hosts), want)
		}
	}
	if first := capiClusters(3, 9)[0]; !reflect.DeepEqual(first.spec, benchTenant) || first.deployment != capiMachineDeployment || first.controlPlane != capiControlPlane {
		t.Errorf("the first Cluster = %+v, want the single-cluster run's", first)
	}
}
