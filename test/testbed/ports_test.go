package testbed

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeLocalAddrsAreDistinctAndAvoidTheReserved(t *testing.T) {
	// A port taken now stands for a stopped manager's webhook port: free, but promised.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reserved := held.Addr().(*net.TCPAddr).Port
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		addrs, err := FreeLocalAddrs(3, reserved)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 3 {
			t.Fatalf("FreeLocalAddrs(3) = %v, want 3 addresses", addrs)
		}
		seen := map[string]bool{}
		for _, addr := range addrs {
			host, port, err := net.SplitHostPort(addr)
			if err != nil || host != "127.0.0.1" {
				t.Fatalf("address %q: want 127.0.0.1:<port> (%v)", addr, err)
			}
			if port == strconv.Itoa(reserved) {
				t.Errorf("FreeLocalAddrs returned the reserved port %d: %v", reserved, addrs)
			}
			if seen[port] {
				t.Errorf("FreeLocalAddrs returned port %s twice: %v", port, addrs)
			}
			seen[port] = true
			// Every port is free once they are returned: a manager can bind it.
			l, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("bind %s: %v", addr, err)
			}
			_ = l.Close()
		}
	}
}
