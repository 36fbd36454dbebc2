// Package scrapetest turns metrics text into a scrape for the tests of
// the benchmarks that read metrics.
package scrapetest

import (
	"strings"
	"testing"

	"source.plinth.dev/bench/scrape"
)

// Parse parses text in the Prometheus text format, failing the test on
// malformed text.
func Parse(t testing.TB, text string) scrape.Scrape {
	t.Helper()
	s, err := scrape.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
