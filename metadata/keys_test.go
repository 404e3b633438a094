package metadata

import "testing"

func TestStreamRecordKeys(t *testing.T) {
	cases := map[string]string{
		AnchorKey(DefaultPrefix, "orders"):   "/streamtier/streams/orders/anchor",
		ManifestKey(DefaultPrefix, "orders"): "/streamtier/streams/orders/manifest",
		EpochKey(DefaultPrefix, "orders"):    "/streamtier/streams/orders/epoch",
		StreamPrefix("/p", "orders"):         "/p/streams/orders/",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
