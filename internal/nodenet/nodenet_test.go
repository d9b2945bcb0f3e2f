package nodenet

import (
	"fmt"
	"strings"
	"testing"
)

func conformanceConfig() Config {
	return Config{
		NodeIP: "10.213.0.1",
		Mappings: []Mapping{
			{Protocol: UDP, HostIP: "10.213.0.1", HostPort: 54323, PodIP: "10.213.0.3", PodPort: 8081},
			{Protocol: TCP, HostIP: "10.213.0.1", HostPort: 54323, PodIP: "10.213.0.3", PodPort: 8080},
			{Protocol: TCP, HostIP: "127.0.0.1", HostPort: 54323, PodIP: "10.213.0.2", PodPort: 8080},
			{Protocol: TCP, HostIP: AllAddresses, HostPort: 54324, PodIP: "10.213.0.10", PodPort: 80},
			{Protocol: SCTP, HostIP: AllAddresses, HostPort: 9, PodIP: "10.213.0.9", PodPort: 9},
		},
	}
}

func TestEncodeParseRoundTrip(t *testing.T) {
	in := conformanceConfig()
	s, err := in.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	out, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%s): %v", s, err)
	}
	again, err := out.Encode()
	if err != nil {
		t.Fatalf("Encode after Parse: %v", err)
	}
	if again != s {
		t.Errorf("round trip changed the encoding:\n%s\n%s", s, again)
	}
	if len(out.Mappings) != len(in.Mappings) || out.NodeIP != in.NodeIP {
		t.Errorf("round trip lost data: %+v", out)
	}
}

func TestEncodeIsCanonical(t *testing.T) {
	c := conformanceConfig()
	want, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	first := c.Mappings[0]
	reversed := Config{NodeIP: c.NodeIP}
	for i := len(c.Mappings) - 1; i >= 0; i-- {
		reversed.Mappings = append(reversed.Mappings, c.Mappings[i])
	}
	got, err := reversed.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("order changed the encoding:\n%s\n%s", want, got)
	}
	if c.Mappings[0] != first {
		t.Error("Encode reordered the caller's slice")
	}
	wantPrefix := `{"nodeIP":"10.213.0.1","mappings":[{"protocol":"SCTP",`
	if !strings.HasPrefix(want, wantPrefix) {
		t.Errorf("encoding %s does not start with %s", want, wantPrefix)
	}
}

func TestEncodeSortsAddressesNumerically(t *testing.T) {
	c := Config{NodeIP: "10.0.0.1", Mappings: []Mapping{
		{Protocol: TCP, HostIP: "10.0.0.10", HostPort: 1, PodIP: "10.1.0.1", PodPort: 1},
		{Protocol: TCP, HostIP: "10.0.0.9", HostPort: 1, PodIP: "10.1.0.1", PodPort: 1},
	}}
	s, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if i, j := strings.Index(s, `"10.0.0.9"`), strings.Index(s, `"10.0.0.10"`); i > j {
		t.Errorf("10.0.0.10 sorted before 10.0.0.9: %s", s)
	}
}

func TestEncodeEmptyMappings(t *testing.T) {
	s, err := Config{NodeIP: "10.0.0.1"}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"nodeIP":"10.0.0.1","mappings":[]}`; s != want {
		t.Errorf("Encode = %s, want %s", s, want)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	ok := Mapping{Protocol: TCP, HostIP: "127.0.0.1", HostPort: 80, PodIP: "10.1.0.5", PodPort: 8080}
	with := func(f func(*Mapping)) Config {
		m := ok
		f(&m)
		return Config{NodeIP: "10.0.0.1", Mappings: []Mapping{ok, m}}
	}
	for _, tc := range []struct {
		name string
		c    Config
		want string
	}{
		{"no nodeIP", Config{}, "nodeIP: empty"},
		{"loopback nodeIP", Config{NodeIP: "127.0.0.1"}, "nodeIP: 127.0.0.1 is not a unicast address"},
		{"unspecified nodeIP", Config{NodeIP: "0.0.0.0"}, "nodeIP: 0.0.0.0 is not a unicast address"},
		{"IPv6 nodeIP", Config{NodeIP: "fd00::1"}, `nodeIP: "fd00::1" is not an IPv4 address`},
		{"mapped IPv6 nodeIP", Config{NodeIP: "::ffff:10.0.0.1"}, "IPv6 is not supported"},
		{"protocol", with(func(m *Mapping) { m.Protocol = "tcp" }), `mappings[1].protocol: "tcp" is not one of TCP, UDP, SCTP`},
		{"hostIP", with(func(m *Mapping) { m.HostIP = "localhost" }), `mappings[1].hostIP: "localhost" is not an IPv4 address`},
		{"empty hostIP", with(func(m *Mapping) { m.HostIP = "" }), "mappings[1].hostIP: empty"},
		{"hostPort 0", with(func(m *Mapping) { m.HostPort = 0 }), "mappings[1].hostPort: 0 is out of range 1-65535"},
		{"hostPort big", with(func(m *Mapping) { m.HostPort = 65536 }), "mappings[1].hostPort: 65536 is out of range 1-65535"},
		{"podIP", with(func(m *Mapping) { m.PodIP = "10.1.0.256" }), `mappings[1].podIP: "10.1.0.256" is not an IPv4 address`},
		{"loopback podIP", with(func(m *Mapping) { m.PodIP = "127.0.0.1" }), "mappings[1].podIP: 127.0.0.1 is not a pod address"},
		{"podPort", with(func(m *Mapping) { m.PodPort = -1 }), "mappings[1].podPort: -1 is out of range 1-65535"},
		{"duplicate", with(func(m *Mapping) { m.PodPort = 9 }), "mappings[1]: TCP 127.0.0.1:80 is already mapped by mappings[0]"},
		{"0.0.0.0 overlaps", with(func(m *Mapping) { m.HostIP = AllAddresses }), "mappings[1]: TCP 127.0.0.1:80 is already mapped by mappings[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			if _, err := tc.c.Encode(); err == nil {
				t.Error("Encode accepted an invalid config")
			}
		})
	}
}

func TestValidateAcceptsSamePortOnOtherProtocolOrAddress(t *testing.T) {
	if err := conformanceConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateMappingLimit(t *testing.T) {
	c := Config{NodeIP: "10.0.0.1"}
	for i := range MaxMappings + 1 {
		c.Mappings = append(c.Mappings, Mapping{Protocol: TCP, HostIP: "10.0.0.1", HostPort: int32(i + 1), PodIP: "10.1.0.1", PodPort: 80})
	}
	err := c.Validate()
	if want := fmt.Sprintf("%d mappings, at most %d", MaxMappings+1, MaxMappings); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate() = %v, want an error containing %q", err, want)
	}
	c.Mappings = c.Mappings[:MaxMappings]
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate(%d mappings) = %v", MaxMappings, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"nodeIP":"10.0.0.1","mappings":[],"extra":1}`, `unknown field "extra"`},
		{`{"nodeIP":"10.0.0.1","mappings":[]} {}`, "trailing data"},
		{`{"nodeIP":"10.0.0.1","mappings":[{"protocol":"TCP","hostIP":"0.0.0.0","hostPort":0,"podIP":"10.1.0.1","podPort":1}]}`, "mappings[0].hostPort: 0 is out of range"},
		{`not json`, "nodenet: parse " + Annotation},
	} {
		if _, err := Parse(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}
