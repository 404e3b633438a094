package read

import (
	"errors"
	"testing"
)

func TestParseReadFrom(t *testing.T) {
	for _, c := range []struct {
		in   string
		want From
		bad  bool
	}{
		{in: "first", want: FromFirst()},
		{in: "", want: FromFirst()},
		{in: "last", want: FromLast()},
		{in: "next", want: FromNext()},
		{in: "1234", want: FromOffset(1234)},
		{in: "@1700000000123", want: FromTimestamp(1700000000123)},
		{in: "@2023-11-14T22:13:20Z", want: FromTimestamp(1700000000000)},
		{in: "@2023-11-14T23:13:20.5+01:00", want: FromTimestamp(1700000000500)},
		{in: "-1", bad: true},
		{in: "@yesterday", bad: true},
		{in: "latest", bad: true},
	} {
		got, err := ParseFrom(c.in)
		if c.bad {
			if !errors.Is(err, ErrBadFrom) {
				t.Errorf("%q: got %v, %v; want ErrBadFrom", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestRouteRead(t *testing.T) {
	// remote [100, 500), local [400, 900) unless a case says otherwise.
	base := routeInput{RemoteKnown: true, RemoteFirst: 100, RemoteNext: 500, LocalPresent: true, LocalFirst: 400, LocalNext: 900}
	offline := routeInput{RemoteKnown: true, RemoteFirst: 100, RemoteNext: 500}
	with := func(in routeInput, f func(*routeInput)) routeInput { f(&in); return in }
	at := func(in routeInput, from From) routeInput { in.From = from; return in }
	for _, c := range []struct {
		name string
		in   routeInput
		want routeDecision
		err  error
	}{
		{"no manifest", with(at(base, FromFirst()), func(in *routeInput) { in.RemoteKnown = false }), routeDecision{}, ErrUnavailable},
		{"no manifest, offset local", with(at(base, FromOffset(800)), func(in *routeInput) { in.RemoteKnown = false }), routeDecision{}, ErrUnavailable},
		{"first: remote oldest", at(base, FromFirst()), routeDecision{Tier: TierRemote, From: 100}, nil},
		{"first: local oldest", with(at(base, FromFirst()), func(in *routeInput) { in.LocalFirst = 50 }), routeDecision{Tier: TierLocal, From: 50}, nil},
		{"first: nothing remote", with(at(base, FromFirst()), func(in *routeInput) { in.RemoteFirst = 500 }), routeDecision{Tier: TierLocal, From: 400}, nil},
		{"first offline", at(offline, FromFirst()), routeDecision{Tier: TierRemote, From: 100}, nil},
		{"first offline, empty", with(at(offline, FromFirst()), func(in *routeInput) { in.RemoteFirst = 500 }), routeDecision{Tier: TierRemote, From: 500, End: true}, nil},
		{"next", at(base, FromNext()), routeDecision{Tier: TierLocal, From: 900}, nil},
		{"next offline", at(offline, FromNext()), routeDecision{Tier: TierRemote, From: 500, End: true}, nil},
		{"offset local", at(base, FromOffset(450)), routeDecision{Tier: TierLocal, From: 450}, nil},
		{"offset at local first", at(base, FromOffset(400)), routeDecision{Tier: TierLocal, From: 400}, nil},
		{"offset at local next", at(base, FromOffset(900)), routeDecision{Tier: TierLocal, From: 900}, nil},
		{"offset ahead", at(base, FromOffset(901)), routeDecision{}, ErrOffsetAhead},
		{"offset remote", at(base, FromOffset(399)), routeDecision{Tier: TierRemote, From: 399}, nil},
		{"offset at remote first", at(base, FromOffset(100)), routeDecision{Tier: TierRemote, From: 100}, nil},
		{"offset below both", at(base, FromOffset(7)), routeDecision{Tier: TierRemote, From: 100, Attached: true}, nil},
		{"offset below local, nothing remote", with(at(base, FromOffset(7)), func(in *routeInput) { in.RemoteFirst, in.RemoteNext = 0, 0 }),
			routeDecision{Tier: TierLocal, From: 400, Attached: true}, nil},
		{"offset in a hole between the tiers", with(at(base, FromOffset(550)), func(in *routeInput) { in.LocalFirst = 600 }),
			routeDecision{Tier: TierLocal, From: 600, Attached: true}, nil},
		{"offset remote offline", at(offline, FromOffset(499)), routeDecision{Tier: TierRemote, From: 499}, nil},
		{"offset at the end offline", at(offline, FromOffset(500)), routeDecision{Tier: TierRemote, From: 500, End: true}, nil},
		{"offset past the end offline", at(offline, FromOffset(501)), routeDecision{}, ErrOffsetAhead},
		{"offset below offline", at(offline, FromOffset(3)), routeDecision{Tier: TierRemote, From: 100, Attached: true}, nil},
		{"empty log, remote", with(at(base, FromOffset(200)), func(in *routeInput) { in.LocalFirst, in.LocalNext = 500, 500 }),
			routeDecision{Tier: TierRemote, From: 200}, nil},
	} {
		got, err := routeRead(c.in)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%s: got %+v, %v; want %v", c.name, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: got %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

func TestHandOff(t *testing.T) {
	for _, c := range []struct {
		name        string
		at          uint64
		present     bool
		first, next uint64
		want        handOffStep
	}{
		{"offline", 500, false, 0, 0, handOffEnd},
		{"inside the local log", 500, true, 400, 900, handOffLocal},
		{"at the local first", 400, true, 400, 900, handOffLocal},
		{"at the local tail", 900, true, 400, 900, handOffLocal},
		{"local retention passed it", 399, true, 400, 900, handOffRemote},
		{"replica behind", 901, true, 400, 900, handOffWait},
	} {
		if got := handOff(c.at, c.present, c.first, c.next); got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got, c.want)
		}
	}
}

func TestLastOffset(t *testing.T) {
	for _, c := range []struct {
		in   routeInput
		want uint64
	}{
		{routeInput{LocalPresent: true, LocalFirst: 400, LocalNext: 900, RemoteFirst: 100, RemoteNext: 500}, 899},
		{routeInput{LocalPresent: true, LocalFirst: 500, LocalNext: 500, RemoteFirst: 100, RemoteNext: 500}, 499},
		{routeInput{LocalPresent: true, LocalFirst: 500, LocalNext: 500, RemoteFirst: 500, RemoteNext: 500}, 500},
		{routeInput{RemoteFirst: 100, RemoteNext: 500}, 499},
		{routeInput{RemoteFirst: 0, RemoteNext: 0}, 0},
	} {
		if got := lastOffset(c.in); got != c.want {
			t.Errorf("%+v: got %d, want %d", c.in, got, c.want)
		}
	}
}
